"""The llm benchmark (services/llm/bench.py): one short real run of each path must give comparable figures."""

from __future__ import annotations

import json

import pytest

from services.llm import bench

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_service_engine_and_litert_benchmark_do_the_same_work(tmp_path, capsys) -> None:
    out = tmp_path / "llm.json"
    assert bench.main(["--threads", "1", "--turns", "2", "--cancels", "2", "--decode", "16", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    rows = {"service": result["service"], "in_process": result["in_process"], "raw_engine": result["raw_engine"]}
    # like for like: every path prefilled and decoded the same number of tokens
    assert {r["decode_tokens"] for r in rows.values()} == {16}, rows
    assert len({r["prefill_tokens"] for r in rows.values()}) == 1, rows
    for name, row in rows.items():
        assert row["ttft_ms"] > 0 and row["decode_tokens_per_s"] > 0, (name, row)
    assert result["cancels"] == 2 and 0 < result["cancel_ms_mean"] < 5000
    for key in ("overhead", "service_layer"):
        assert set(result[key]) == {"ttft", "decode_time", "target", "met"}
    printed = capsys.readouterr().out
    assert "litert_lm.Benchmark" in printed and "cancel -> engine free" in printed
