"""The kernel's count of a thread's waits for a core, and the engine's threads it is read for."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from services.tts import core_wait

SPIN = "import time\nend = time.perf_counter() + {s}\nwhile time.perf_counter() < end: pass"


def _spin(seconds: float) -> None:
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        pass


def _on_cpu_seconds(tid: int) -> float:
    return int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0]) / 1e9


def test_a_thread_kept_from_the_cores_counts_its_wait_and_an_idle_one_does_not():
    me = threading.get_native_id()
    queued = core_wait.queued_seconds([me])
    time.sleep(0.3)  # asleep, not runnable: no wait
    assert core_wait.queued_seconds([me]) - queued < 0.05
    # one more busy process than there are cores, for a bounded 1.2 s: this thread must now wait its turn
    busy = [subprocess.Popen([sys.executable, "-c", SPIN.format(s=1.2)]) for _ in range((os.cpu_count() or 1) + 1)]
    try:
        time.sleep(0.2)
        queued = core_wait.queued_seconds([me])
        _spin(0.6)
        assert core_wait.queued_seconds([me]) - queued > 0.05
    finally:
        for process in busy:
            process.wait(timeout=10)


def test_threads_that_ended_count_nothing():
    ended = threading.Thread(target=lambda: None)
    ended.start()
    ended.join()
    me = threading.get_native_id()
    assert core_wait.queued_seconds([]) == 0
    alone = core_wait.queued_seconds([me])
    assert core_wait.queued_seconds([me, ended.native_id]) == alone
    assert me in core_wait.thread_ids()


def test_the_onnx_engines_pool_threads_are_the_ones_that_compute_its_synthesis(onnx_engine):
    pool = sorted(onnx_engine.pool_threads)
    assert len(pool) == (os.cpu_count() or 1) - 1 and set(pool) <= core_wait.thread_ids()
    before = [_on_cpu_seconds(t) for t in pool]
    list(onnx_engine.synthesize("The pool threads share this sentence's work.", "jf_alpha"))
    assert all(_on_cpu_seconds(t) - b > 0.01 for t, b in zip(pool, before))


def test_queued_during_returns_the_works_result_and_this_threads_wait():
    result, queued = core_wait.queued_during((), lambda: 42)
    assert result == 42 and 0 <= queued < 0.05
