"""The bench itself: its pure helpers, and one tiny real run (one spoken case, the typed case, two load levels,
quick components) whose JSON must hold every figure the full run reports."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

import numpy as np

from tools.bench import stats
from tools.bench.__main__ import main
from tools.bench.fixtures import SHORT_QUESTION, page_vad_end
from tools.bench.run import MAX_NEW_TOKENS, SPOKEN_MAX_NEW_TOKENS
from tools.bench.wsdriver import TRAILING_SILENCE_S
from tools.speech import speak

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

SUMMARY = {"n", "p50", "p95", "p99", "mean", "min", "max"}


def test_percentiles_and_summary() -> None:
    assert stats.percentile([], 50) is None
    assert stats.percentile([3.0, 1.0, 2.0], 50) == 2.0
    assert stats.percentile([0.0, 10.0], 95) == pytest.approx(9.5)
    s = stats.summary([1.0, 2.0, None, 3.0])
    assert s.keys() == SUMMARY and s["n"] == 3 and s["p50"] == 2.0 and s["max"] == 3.0


def test_the_median_interval_widens_with_noise_and_narrows_with_turns() -> None:
    assert stats.median_ci([5.0]) is None  # one turn says nothing about the spread
    noisy = [10.0 + 80.0 * ((i * 37) % 11 - 5) / 5 for i in range(40)]   # about +-80 ms around 10 ms
    calm = [10.0 + 2.0 * ((i * 37) % 11 - 5) / 5 for i in range(40)]    # about +-2 ms
    lo, hi = stats.median_ci(noisy)
    assert lo < 10.0 < hi and hi - lo > 20  # a p50 near 10 ms from such turns cannot tell met from missed
    clo, chi = stats.median_ci(calm)
    assert clo <= 10.0 <= chi and chi - clo < 3
    assert stats.median_ci(noisy * 4)[1] - stats.median_ci(noisy * 4)[0] < hi - lo  # more turns, narrower
    assert stats.median_ci(noisy) == [lo, hi]  # the same turns always give the same interval


def test_the_page_client_stops_where_its_vad_hears_the_end_of_speech(tmp_path) -> None:
    speech = speak(SHORT_QUESTION, "en-us", 16000, tmp_path)
    voiced = np.flatnonzero(np.abs(speech.astype(np.int32)) > 1000)
    last_voiced_ms = voiced[-1] / 16
    cut = page_vad_end(speech.astype("<i2").tobytes())
    assert cut % 1024 == 0  # whole 32 ms frames, as the page sends them
    # 400 ms of silence after the speech ends (capture.js redemptionMs), plus the frame it is heard in
    assert 400 <= cut / 32 - last_voiced_ms <= 400 + 3 * 32
    with pytest.raises(ValueError, match="no end of speech"):
        page_vad_end(bytes(32000))


def test_compare_lists_every_shared_figure(capsys, tmp_path) -> None:
    a = {"machine": {"cores": 2}, "cases": {"typed": {"summary": {"ttfa_ms": {"n": 3, "p50": 100.0}}}},
         "load": {"levels": [{"level": 1, "busy": 0}]}}
    b = {"machine": {"cores": 8}, "cases": {"typed": {"summary": {"ttfa_ms": {"n": 3, "p50": 80.0}}}},
         "load": {"levels": [{"level": 1, "busy": 2}]}}
    rows = {key: (va, vb, diff) for key, va, vb, diff, _ in stats.compare(a, b)}
    assert rows["cases.typed.summary.ttfa_ms.p50"] == (100.0, 80.0, -20.0)
    assert rows["load.levels[1].busy"] == (0.0, 2.0, 2.0)
    assert not any(k.startswith("machine.") or k.endswith(".n") for k in rows)
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 0
    assert "-20.0%" in capsys.readouterr().out


def test_a_tiny_run_saves_every_figure(tmp_path) -> None:
    out = tmp_path / "results"
    work_dirs = set(Path(tempfile.gettempdir()).glob("sotto-bench-*"))
    assert main(["run", "--turns", "1", "--levels", "1,2", "--load-turns", "1", "--cases",
                 "spoken_short_camera,spoken_short_raw", "--quick-components", "--out", str(out)]) == 0
    [path] = out.glob("*[0-9].json")
    r = json.loads(path.read_text())
    # the fixtures and the stacks' logs are gone after a run that went well
    assert set(Path(tempfile.gettempdir()).glob("sotto-bench-*")) == work_dirs and "work_dir" not in r
    assert {"cpu", "cores", "load_average", "load_average_end"} <= r["machine"].keys()
    assert r["command"].startswith("python -m tools.bench run") and r["wall_s"] > 0
    assert set(r["cases"]) == {"spoken_short_camera", "spoken_short_raw", "typed"}
    for name, case in r["cases"].items():
        s = case["summary"]
        assert s["ok"] == 1, (name, case["rows"])
        assert s["ttfa_ms"].keys() == SUMMARY and s["ttfa_ms"]["p50"] > 0
        assert set(s["stages_ms"]) == {"endpoint", "llm_queue", "first_token", "tts_first_chunk", "first_audio"}
        assert s["transport_ms"]["n"] == 1
        assert s["direct_ms"]["first_audio"]["p50"] > 0
        assert s["overhead_ms"]["n"] == 1 and s["cpu_overhead_ms"]["n"] == 1
        # the tts service really synthesised the first sentence: its own first-chunk time is a real duration
        [row] = case["rows"]
        assert row["tts_service_first_chunk_ms"] > 50 and s["tts_synthesis_slowdown_ms"]["n"] == 1
        # and on both paths the kernel's count of the synthesis's waits for a core was read: the pipeline's
        # cost is the part outside synthesis plus the difference of those waits
        direct_wait = row["direct"]["tts_first_chunk_queued_ms"]
        assert row["tts_core_wait_ms"] >= 0 and direct_wait >= 0
        assert row["tts_core_wait_diff_ms"] == pytest.approx(row["tts_core_wait_ms"] - direct_wait, abs=0.2)
        assert s["pipeline_cost_ms"]["p50"] == pytest.approx(
            s["overhead_outside_synthesis_ms"]["p50"] + row["tts_core_wait_diff_ms"], abs=0.2)
        assert s["overhead_ratio_p50"] is not None and isinstance(s["overhead_met"], bool)
        assert s["same_reply_both_paths"], case["rows"]  # deterministic sampling: the paths did the same work
        # the first token's overhead splits into the engine's own gap and the hops, and the two add up
        timings = row["stack"]["timings"]
        assert timings["llm_engine_first_token_ms"] > 0 and row["direct"]["engine_first_token_ms"] > 0
        first_token_overhead = (timings["first_token_ms"] - timings["llm_queue_ms"]
                                - row["direct"]["first_token_ms"])
        assert abs(row["llm_engine_gap_ms"] + row["first_token_hops_ms"] - first_token_overhead) <= 0.3
        assert case["load_average"]
    for name in ("spoken_short_camera", "spoken_short_raw"):
        assert r["cases"][name]["summary"]["stages_ms"]["endpoint"]["p50"] > 0
    # each stack got its own reply cap: the tiny model's spelled-out gibberish short, the text model's sentences not
    decoded = {name: case["rows"][0]["stack"]["timings"]["llm_decode_tokens"] for name, case in r["cases"].items()}
    assert decoded["spoken_short_camera"] == decoded["spoken_short_raw"] == SPOKEN_MAX_NEW_TOKENS
    assert SPOKEN_MAX_NEW_TOKENS < decoded["typed"] <= MAX_NEW_TOKENS
    assert (r["config"]["spoken_max_new_tokens"], r["config"]["max_new_tokens"]) == (SPOKEN_MAX_NEW_TOKENS,
                                                                                    MAX_NEW_TOKENS)
    # the page client stopped at its VAD's end and sent audio.end: nothing streamed while the answer was prepared
    [page] = r["cases"]["spoken_short_camera"]["rows"]
    assert page["stack"]["audio_end_sent"] is not None and page["stack"]["mic_tail_ms"] == 0
    assert page["direct"]["vad_cpu_ms"] == 0
    # the raw client streamed on; the direct path's VAD heard the same tail after the endpoint
    [raw] = r["cases"]["spoken_short_raw"]["rows"]
    assert raw["stack"]["audio_end_sent"] is None
    assert 0 < raw["direct"]["mic_tail_ms"] < TRAILING_SILENCE_S * 1000 and raw["direct"]["vad_cpu_ms"] > 0
    o = r["overhead"]
    assert {"all_turns_ms", "ratio_p50", "per_case", "cpu_all_turns_ms", "met"} <= o.keys()
    assert o["cases"] == ["spoken_short_camera", "typed"] and o["raw_client"]["cases"] == ["spoken_short_raw"]
    assert o["outside_synthesis_all_turns_ms"]["n"] == 2  # one page spoken turn, one typed turn
    assert o["llm_engine_gap_all_turns_ms"]["n"] == o["first_token_hops_all_turns_ms"]["n"] == 2
    assert o["raw_client"]["all_turns_ms"]["n"] == 1 and set(o["per_case"]) == set(r["cases"])
    assert o["all_turns_p50_ci95_ms"][0] <= o["all_turns_ms"]["p50"] <= o["all_turns_p50_ci95_ms"][1]
    assert o["tts_slower_all_turns_ms"]["n"] == 2 and len(o["tts_slower_p50_ci95_ms"]) == 2
    assert o["tts_core_wait_diff_all_turns_ms"]["n"] == 2 and o["pipeline_cost_all_turns_ms"]["n"] == 2
    assert isinstance(o["cost_met_at_ci_high"], bool)
    # the run names the code it measured, so its turns can be pooled with other runs of the same code
    assert len(r["commit"].removesuffix("-dirty")) == 40
    assert main(["pool", str(path), str(path), "--out", str(tmp_path / "pooled.json")]) == 0
    pooled = json.loads((tmp_path / "pooled.json").read_text())["overhead"]
    assert pooled["all_turns_ms"]["n"] == 4 and pooled["all_turns_ms"]["p50"] == o["all_turns_ms"]["p50"]
    levels = r["load"]["levels"]
    assert [row["level"] for row in levels] == [1, 2] and r["load"]["admission_limit"] == 2
    for row in levels:
        assert {"turns", "ok", "busy", "errors", "timeouts", "dropped", "refused_http", "ttfa_ms",
                "load_average"} <= row.keys()
        assert row["timeouts"] == 0 and row["dropped"] == 0
    assert (out / f"{r['started_at']}-load.png").stat().st_size > 1000
    c = r["components"]
    assert c["vad"]["model_ms_per_window"] > 0
    assert {row["model"] for row in c["llm"]} == {"tiny-gemma4-mm.litertlm", "smollm2-135m-instruct.litertlm"}
    for row in c["llm"]:
        assert row["litert_benchmark"]["decode_tokens_per_s"] > 0 and row["engine"]["ttft_ms_p50"] > 0
    assert {"service", "in_process", "raw_engine", "overhead", "service_layer", "cancel_ms_mean"} <= c["llm_service"].keys()
    assert c["tts"]["onnx"]["short"]["rtf"] > 0 and ("rtf" in c["tts"]["mlx"] or "skipped" in c["tts"]["mlx"])
    assert c["grpc"]["round_trip_us_p50"] > 0 and c["grpc"]["server_stream_us_per_message"] > 0


def _result(commit: str, overheads: dict[str, list[float]], spoken_tokens: int = 4, outside: float = 8.0) -> dict:
    """A saved run reduced to what pooling reads: per case its paired turns (overhead, synthesis difference
    with `outside` ms outside it, core wait, TTFA) and the run's own overall figures, as `python -m tools.bench
    run` writes them."""
    from tools.bench.overhead import overhead_by_client

    cases = {name: {"summary": {"client": "raw" if name.endswith("_raw") else "page"},
                    "rows": [{"overhead_ms": v, "tts_synthesis_slowdown_ms": v - outside, "tts_core_wait_diff_ms": 0.5,
                              "llm_engine_gap_ms": 1.0, "first_token_hops_ms": 2.0,
                              "stack": {"client_ttfa_ms": 1000.0 + v}} for v in values]}
             for name, values in overheads.items()}
    return {"started_at": commit, "commit": commit, "cases": cases, "overhead": overhead_by_client(cases),
            "config": {"top_k": 1, "llm_threads": 1, "max_new_tokens": 12, "spoken_max_new_tokens": spoken_tokens}}


def test_pool_takes_the_p50_over_every_turn_of_every_run(capsys, tmp_path) -> None:
    from tools.bench.pool import pool

    a = _result("abc", {"spoken_short": [0.0, 2.0, 4.0], "spoken_short_raw": [50.0, 60.0]})
    b = _result("abc", {"spoken_short": [20.0, 22.0], "typed": [24.0], "spoken_short_raw": [70.0]})
    pooled = pool([a, b], ["a.json", "b.json"])
    overall = pooled["overhead"]
    # six page and typed turns: their median, not the median of the two runs' medians (2 and 22)
    assert overall["all_turns_ms"]["n"] == 6 and overall["all_turns_ms"]["p50"] == 12.0
    assert overall["cases"] == ["spoken_short", "typed"] and not overall["met"]
    assert overall["outside_synthesis_all_turns_ms"]["p50"] == 8.0  # each turn's overhead minus its slowdown
    assert overall["raw_client"]["all_turns_ms"] == {"n": 3, "p50": 60.0, "p95": 69.0, "p99": 69.8, "mean": 60.0,
                                                      "min": 50.0, "max": 70.0}
    assert pooled["per_case"]["spoken_short"]["all_turns_ms"]["n"] == 5
    assert [r["overhead_p50_ms"] for r in pooled["runs"]] == [2.0, 22.0]
    for name, result in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(result))
    assert main(["pool", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--out", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "overhead p50 12.0 ms" in out and "NOT met" in out
    assert json.loads((tmp_path / "p.json").read_text())["overhead"]["all_turns_ms"]["p50"] == 12.0


def test_the_verdict_reads_the_pipeline_costs_interval_when_the_hosts_speed_widens_the_raw_one(capsys) -> None:
    """Turns whose synthesis ran at the host's varying speed: the raw p50 (8 ms) is under the target but its
    interval spans it; every turn's cost outside synthesis plus core wait is 6.5 ms, so the turns show it met.
    The same turns with 12 ms outside synthesis do not."""
    from tools.bench.report import print_overall

    noisy = [-150.0, -80.0, -20.0, 5.0, 8.0, 9.0, 30.0, 90.0, 160.0]
    shown = _result("abc", {"spoken_short": noisy, "typed": noisy}, outside=6.0)["overhead"]
    assert shown["met"] and not shown["met_at_ci_high"] and shown["all_turns_p50_ci95_ms"][1] > 10
    assert shown["pipeline_cost_all_turns_ms"]["p50"] == 6.5 and shown["cost_met_at_ci_high"]
    assert shown["tts_host_speed_all_turns_ms"]["p50"] == 1.5  # what it leaves out: the raw p50 8 less the cost 6.5
    print_overall(shown)
    assert "met (the raw interval spans 10 ms; the pipeline cost's stays under it)" in capsys.readouterr().out
    costly = _result("abc", {"spoken_short": noisy, "typed": noisy}, outside=12.0)["overhead"]
    assert costly["met"] and not costly["cost_met_at_ci_high"]
    print_overall(costly)
    assert "more turns needed to tell" in capsys.readouterr().out


def test_pool_refuses_runs_of_other_code_or_settings_and_says_which(capsys, tmp_path) -> None:
    from tools.bench.pool import PoolError, pool

    a = _result("abc", {"typed": [1.0, 3.0]})
    with pytest.raises(PoolError, match="differ in commit, spoken_max_new_tokens"):
        pool([a, _result("def", {"typed": [5.0]}, spoken_tokens=12)], ["a.json", "b.json"])
    mixed = pool([a, _result("def", {"typed": [5.0]})], ["a.json", "b.json"], mixed=True)
    assert mixed["settings"] == {"mixed": ["commit"]} and mixed["overhead"]["all_turns_ms"]["n"] == 3
    (tmp_path / "load.json").write_text(json.dumps({"load": {}}))
    (tmp_path / "broken.json").write_text("{")
    assert main(["pool", str(tmp_path / "load.json")]) == 2
    assert "holds no cases" in capsys.readouterr().err
    assert main(["pool", str(tmp_path / "broken.json")]) == 2
    assert "cannot read" in capsys.readouterr().err
