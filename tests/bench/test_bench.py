"""The bench itself: its pure helpers, and one tiny real run (two spoken cases, the typed case, two load levels,
quick components) that must print the TTFA table and save every figure the full run reports."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest

from services.common import config
from tools.bench import stats
from tools.bench.__main__ import main
from tools.bench.fixtures import SHORT_QUESTION, page_vad_end
from tools.bench.run import (
    BUDGET_STAGES,
    MAX_NEW_TOKENS,
    SPOKEN_MAX_NEW_TOKENS,
    overhead,
)
from tools.bench.wsdriver import TRAILING_SILENCE_S
from tools.speech import speak

SUMMARY = {"n", "p50", "p95", "p99", "mean", "min", "max"}


def test_summary_skips_missing_values() -> None:
    s = stats.summary([1.0, 2.0, None, 3.0])
    assert s.keys() == SUMMARY and s["n"] == 3 and s["p50"] == 2.0 and s["max"] == 3.0
    assert stats.summary([None]) == {"n": 0} | dict.fromkeys(SUMMARY - {"n"})


def test_the_median_interval_widens_with_noise_and_narrows_with_turns() -> None:
    assert stats.median_ci([5.0]) is None  # one turn says nothing about the spread
    noisy = [10.0 + 80.0 * ((i * 37) % 11 - 5) / 5 for i in range(40)]   # about +-80 ms around 10 ms
    calm = [10.0 + 2.0 * ((i * 37) % 11 - 5) / 5 for i in range(40)]    # about +-2 ms
    lo, hi = stats.median_ci(noisy)
    assert lo < 10.0 < hi and hi - lo > 20  # a p50 near 10 ms from such turns cannot tell met from missed
    clo, chi = stats.median_ci(calm)
    assert clo <= 10.0 <= chi and chi - clo < 3
    wide_lo, wide_hi = stats.median_ci(noisy * 4)
    assert wide_hi - wide_lo < hi - lo  # more turns, narrower
    assert stats.median_ci(noisy) == [lo, hi]  # the same turns always give the same interval


def _cases(overheads: dict[str, list[float]]) -> dict:
    return {name: {"summary": {"client": "raw" if name.endswith("_raw") else "page"},
                   "rows": [{"overhead_ms": v, "stack": {"client_ttfa_ms": 1000.0}} for v in values]}
            for name, values in overheads.items()}


def test_the_overhead_pools_the_page_and_typed_turns_and_keeps_the_raw_client_apart() -> None:
    o = overhead(_cases({"spoken_short": [0.0, 2.0, 4.0], "typed": [20.0, 22.0, 24.0],
                         "spoken_short_raw": [50.0, 60.0]}))
    assert o["cases"] == ["spoken_short", "typed"] and o["all_turns_ms"]["n"] == 6
    assert o["all_turns_ms"]["p50"] == 12.0 and o["ratio_p50"] == 0.012 and o["verdict"] == "NOT met"
    assert o["raw_client"]["cases"] == ["spoken_short_raw"] and o["raw_client"]["all_turns_ms"]["p50"] == 55.0
    calm = overhead(_cases({"typed": [4.0, 5.0, 6.0, 5.0, 5.0]}))
    assert calm["verdict"] == "met" and "raw_client" not in calm
    noisy = overhead(_cases({"typed": [-150.0, -80.0, 5.0, 8.0, 9.0, 90.0, 160.0]}))
    assert noisy["all_turns_p50_ci95_ms"][1] > 10 and noisy["verdict"].startswith("met at the p50, but")


def test_the_page_client_stops_where_its_vad_hears_the_end_of_speech(tmp_path) -> None:
    speech = speak(SHORT_QUESTION, "en-us", 16000, tmp_path)
    voiced = np.flatnonzero(np.abs(speech.astype(np.int32)) > 1000)
    last_voiced_ms = voiced[-1] / 16
    cut = page_vad_end(speech.astype("<i2").tobytes())
    assert cut % 1024 == 0  # whole 32 ms frames, as the page sends them
    # the server's turn silence after the speech ends (capture.js redemptionMs), plus the frame it is heard in
    silence = config.load(config.VadConfig, {}).turn_silence_ms
    assert silence <= cut / 32 - last_voiced_ms <= silence + 3 * 32
    with pytest.raises(ValueError, match="no end of speech"):
        page_vad_end(bytes(32000))


def test_gaps_are_the_silences_a_player_that_never_waits_would_play() -> None:
    """Chunks of 0.1 s: the second comes while the first plays, the third 50 ms after the audio ran out, the fourth
    in time again."""
    chunks = [(0.0, 2400), (0.05, 2400), (0.25, 2400), (0.3, 2400)]
    assert stats.playback_gaps(chunks, 24000) == [50.0]
    assert stats.playback_gaps([(0.0, 2400)], 24000) == []


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


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_tiny_run_prints_the_ttfa_table_and_saves_every_figure(tmp_path, capsys, monkeypatch) -> None:
    out = tmp_path / "results"
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the run's work dir, apart from any other bench's
    work_dirs = set(Path(tempfile.gettempdir()).glob("sotto-bench-*"))
    assert main(["run", "--turns", "2", "--levels", "1,2", "--load-turns", "1", "--cases",
                 "spoken_short_camera,spoken_short_raw", "--quick", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    [path] = out.glob("*[0-9].json")
    r = json.loads(path.read_text())
    # the fixtures and the stacks' logs are gone after a run that went well
    assert set(Path(tempfile.gettempdir()).glob("sotto-bench-*")) == work_dirs and "work_dir" not in r
    assert {"cpu", "cores", "load_average", "load_average_end"} <= r["machine"].keys()
    assert r["command"].startswith("python -m tools.bench run") and r["wall_s"] > 0
    assert set(r["cases"]) == {"spoken_short_camera", "spoken_short_raw", "typed"}
    # the headline: a spoken conversation at make up's defaults, on human speech, printed before the plumbing
    h = r["headline"]
    assert printed.index("HEADLINE: a spoken conversation") < printed.index("PLUMBING") < printed.index("Time to")
    assert h["turns"] == 6 and h["ok"] == 6, h["rows"]  # three questions, two rounds, one session
    assert "smollm2" in h["config"]["model"].lower() and h["budget_ms"]["asr"]["n"] == 6
    assert 0 < h["ttfa_ms"]["p50"] <= h["ttfa_ms"]["p95"]
    assert "Time to first audio per case" in printed and "longest gap" in printed and "engines: spoken" in printed
    for name, case in r["cases"].items():
        s = case["summary"]
        assert s["ok"] == 2, (name, case["rows"])
        assert s["ttfa_ms"].keys() == SUMMARY and 0 < s["ttfa_ms"]["p50"] <= s["ttfa_ms"]["p95"]
        assert f"{s['ttfa_ms']['p50']:.1f}" in next(line for line in printed.splitlines() if line.startswith(name))
        assert set(s["budget_ms"]) == set(BUDGET_STAGES)
        for stage in BUDGET_STAGES[1:]:
            assert s["budget_ms"][stage]["n"] == 2, (name, stage)
        assert s["direct_ms"]["first_audio"]["p50"] > 0
        lo, hi = s["overhead_p50_ci95_ms"]
        assert lo <= s["overhead_ms"]["p50"] <= hi
        assert s["same_reply_both_paths"], case["rows"]  # deterministic sampling: the paths did the same work
    for name in ("spoken_short_camera", "spoken_short_raw"):
        assert r["cases"][name]["summary"]["budget_ms"]["endpoint"]["p50"] > 0
    # each stack got its own reply cap: the tiny model's spelled-out gibberish short, the text model's sentences not
    decoded = {name: case["rows"][0]["stack"]["timings"]["llm_decode_tokens"] for name, case in r["cases"].items()}
    assert decoded["spoken_short_camera"] == decoded["spoken_short_raw"] == SPOKEN_MAX_NEW_TOKENS
    assert SPOKEN_MAX_NEW_TOKENS < decoded["typed"] <= MAX_NEW_TOKENS
    # the page client stopped at its VAD's end and sent audio.end: nothing streamed while the answer was prepared,
    # unless the server held the turn open (the server may end the turn before the page's VAD does: the turn model's
    # early verdict, so the audio after the server's end is no measure of it)
    page = r["cases"]["spoken_short_camera"]["rows"][0]
    assert page["stack"]["audio_end_sent"] is not None
    assert page["stack"]["held"] or page["stack"]["after_vad_end_ms"] == 0, page["stack"]
    if page["stack"]["mic_tail_ms"] == 0:
        assert page["direct"]["vad_cpu_ms"] == 0  # the direct path listens to exactly what the stack's vad heard
    # the raw client streamed on; the direct path's VAD heard the same tail after the endpoint
    raw = r["cases"]["spoken_short_raw"]["rows"][0]
    assert raw["stack"]["audio_end_sent"] is None
    assert 0 < raw["direct"]["mic_tail_ms"] < TRAILING_SILENCE_S * 1000 and raw["direct"]["vad_cpu_ms"] > 0
    o = r["overhead"]
    assert o["cases"] == ["spoken_short_camera", "typed"] and o["all_turns_ms"]["n"] == 4
    assert o["all_turns_p50_ci95_ms"][0] <= o["all_turns_ms"]["p50"] <= o["all_turns_p50_ci95_ms"][1]
    assert o["raw_client"]["cases"] == ["spoken_short_raw"] and "overhead p50" in printed
    llm = r["llm_service"]
    paths = [llm[p] for p in ("service", "in_process", "litert_benchmark")]
    assert {p["decode_tokens"] for p in paths} == {16} and len({p["prefill_tokens"] for p in paths}) == 1, llm
    assert all(p["ttft_ms"] > 0 and p["decode_tokens_per_s"] > 0 for p in paths)
    assert llm["cancels"] == 1 and 0 < llm["cancel_ms_mean"] < 5000 and "cancel -> engine free" in printed
    levels = r["load"]["levels"]
    assert [row["level"] for row in levels] == [1, 2] and r["load"]["admission_limit"] == 2
    for row in levels:
        assert row["timeouts"] == 0 and row["dropped"] == 0 and row["ttfa_ms"].keys() == SUMMARY
    assert (out / f"{r['started_at']}-load.png").stat().st_size > 1000
    c = r["components"]
    assert c["vad"]["model_ms_per_window"] > 0 and c["vad"]["realtime_streams_per_core"] > 0
    assert c["tts"]["answers"]["short"]["rtf"] > 0 and ("rtf" in c["tts"]["mlx"] or "skipped" in c["tts"]["mlx"])
