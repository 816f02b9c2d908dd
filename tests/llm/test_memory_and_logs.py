"""Memory budget planning, process RSS, and the capture of the native library's stderr."""

from __future__ import annotations

import os

import pytest

from services.llm.errors import MemoryBudgetError
from services.llm.memory import plan_memory, process_rss_bytes
from services.llm.native_log import stderr_tap

GB = 1024**3
MB = 1024**2


def test_context_is_kept_when_it_fits():
    plan = plan_memory(2 * GB, 4096, budget_fraction=0.65, kv_bytes_per_token=64 * 1024, total_bytes=16 * GB)
    assert plan.context_tokens == 4096 and not plan.lowered
    assert plan.kv_bytes == 4096 * 64 * 1024


def test_context_is_lowered_to_fit():
    # 1024 MB budget, 800 MB model: 224 MB left = 3584 tokens at 64 KiB (a multiple of 256).
    plan = plan_memory(800 * MB, 8192, budget_fraction=0.5, kv_bytes_per_token=64 * 1024, total_bytes=2 * GB)
    assert plan.lowered and plan.context_tokens == 3584
    assert "KV cache" in plan.describe()


def test_a_model_too_big_for_the_budget_is_refused_with_figures():
    with pytest.raises(MemoryBudgetError, match=r"model 3000 MB \+ KV cache for 512 tokens 32 MB > budget 2662 MB"):
        plan_memory(3000 * MB, 4096, budget_fraction=0.65, kv_bytes_per_token=64 * 1024, total_bytes=4 * GB)


def test_engine_reports_its_memory_plan(tiny_engine):
    plan = tiny_engine.info.memory
    assert plan.model_bytes == os.path.getsize(tiny_engine.info.path)
    assert plan.budget_bytes == int(plan.total_bytes * 0.65)


def test_process_rss_is_current_and_plausible():
    import mmap

    before = process_rss_bytes()
    with mmap.mmap(-1, 64 * MB) as block:  # fresh pages, not memory the allocator already holds
        for offset in range(0, 64 * MB, 4096):
            block[offset] = 1  # touch every page
        assert process_rss_bytes() >= before + 48 * MB


def test_stderr_tap_keeps_what_native_code_writes_to_fd2():
    tap = stderr_tap()
    mark = tap.mark()
    os.write(2, b"E0000 00:00:00.0 1 engine.cc:42] tf_lite_audio_encoder_hw not found\n")
    os.write(2, b"I0000 00:00:00.0 1 other.cc:1] chatter\n")
    assert "engine.cc:42] tf_lite_audio_encoder_hw not found" == tap.reason_since(mark)
    assert tap.since(tap.mark()) == []


def test_stderr_tap_does_not_blame_a_generation_for_lines_written_before_its_mark():
    # mark() does not wait for the pump, so these lines may still be unread in the pipe when it returns.
    tap = stderr_tap()
    for _ in range(20):
        os.write(2, b"E0000 00:00:00.0 1 engine.cc:7] an earlier failure\n")
        os.write(2, b"a progress bar without its newline\r")
        mark = tap.mark()
        os.write(2, b"E0000 00:00:00.0 1 engine.cc:9] this generation's failure\n")
        assert tap.since(mark) == ["E0000 00:00:00.0 1 engine.cc:9] this generation's failure"]
