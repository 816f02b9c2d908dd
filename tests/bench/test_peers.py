"""`make bench-peers`' pure parts: the ratio and its paired interval, the order of turns, which turns count, and
the clip's end of speech both sides are timed from. (The run itself needs Pipecat's venv and takes minutes: it
is `make bench-peers`, not a test.)"""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from tools.bench import stats
from tools.bench.peers_clips import RATE, schedule, speech_end_s
from tools.bench.peers_report import pairs, summarize, usable, verdict
from tools.speech import speak


def test_the_ratio_is_of_percentiles_and_its_interval_holds_it() -> None:
    sotto = [600.0, 700.0, 800.0, 900.0, 1000.0]
    pipecat = [1200.0, 1400.0, 1600.0, 1800.0, 2000.0]
    ratio, interval = stats.ratio_ci(sotto, pipecat, 50)
    assert ratio == 0.5  # 800 / 1600
    assert interval is not None and interval[0] <= 0.5 <= interval[1]
    ratio95, _ = stats.ratio_ci(sotto, pipecat, 95)
    assert ratio95 == pytest.approx(np.percentile(sotto, 95) / np.percentile(pipecat, 95), abs=1e-3)


def test_pairing_keeps_what_the_machine_did_to_both_sides_together() -> None:
    """Host speed swings move both turns of a pair: resampled as pairs, the ratio stays tight; resampled
    apart (shuffled partners) the same numbers give a wider interval."""
    rng = np.random.default_rng(3)
    load = rng.uniform(1.0, 3.0, 40)                  # how slow the machine was at each pair
    sotto, pipecat = 400 * load, 800 * load * rng.uniform(0.95, 1.05, 40)
    _, tight = stats.ratio_ci(sotto, pipecat)
    _, loose = stats.ratio_ci(sotto, rng.permutation(pipecat))
    assert tight[1] - tight[0] < (loose[1] - loose[0]) / 2
    assert tight[0] <= 0.5 <= tight[1]


def test_the_ratio_needs_pairs_of_equal_length() -> None:
    assert stats.ratio_ci([], []) == (None, None)
    assert stats.ratio_ci([1.0], [2.0]) == (0.5, None)  # one pair: a ratio, no interval
    with pytest.raises(ValueError, match="as long as each other"):
        stats.ratio_ci([1.0, 2.0], [1.0])


def test_each_clip_is_heard_by_both_sides_and_who_goes_first_alternates() -> None:
    names = ["a", "b", "c"]
    order = schedule(names, 4)
    assert [name for name, _ in order] == names * 4
    assert all(sorted(sides) == ["pipecat", "sotto"] for _, sides in order)
    firsts = [sides[0] for _, sides in order]
    assert all(x != y for x, y in zip(firsts, firsts[1:]))  # pair after pair
    for name in names:  # and each clip, round after round
        mine = [sides[0] for n, sides in order if n == name]
        assert all(x != y for x, y in zip(mine, mine[1:]))
    assert Counter(firsts) == {"sotto": 6, "pipecat": 6}


def test_only_pairs_where_both_sides_answered_after_the_speech_count() -> None:
    def row(pair: int, side: str, ttfa: float | None, outcome: str = "ok") -> dict:
        return {"pair": pair, "side": side, "ttfa_ms": ttfa, "outcome": outcome, "source": "human",
                "ms": {"first_audio": ttfa}}

    rows = [row(0, "sotto", 500.0), row(0, "pipecat", 1000.0),
            row(1, "pipecat", 900.0), row(1, "sotto", None, "timeout"),
            row(2, "sotto", -200.0), row(2, "pipecat", 800.0),  # answered a pause before the end of speech
            row(3, "pipecat", 1200.0), row(3, "sotto", 600.0)]
    assert not usable(rows[4]) and not usable(rows[3]) and usable(rows[0])
    assert pairs(rows) == [(500.0, 1000.0), (600.0, 1200.0)]
    summary = summarize({"turns": rows, "config": {"target_ratio_p50": 0.8}, "floor": []})
    assert summary["ratio"]["pairs"] == 2 and summary["ratio"]["p50"] == 0.5
    assert summary["sotto"]["early"] == 1 and summary["sotto"]["ok"] == 2
    assert summary["pipecat"]["ok"] == 4


def test_the_verdict_wants_the_whole_interval_under_the_target() -> None:
    assert verdict(0.6, [0.5, 0.7], 0.8) == "met"
    assert verdict(0.75, [0.6, 0.9], 0.8).startswith("met at the p50")
    assert verdict(0.9, [0.8, 1.0], 0.8) == "NOT met"
    assert verdict(None, None, 0.8) == "no pairs"


def test_the_end_of_speech_is_where_the_words_stop_not_where_the_clip_does(tmp_path) -> None:
    from services.vad.loading import load_model

    words = speak("What is the capital of France?", "en-us", RATE, tmp_path).astype("<i2")
    pcm = (np.zeros(RATE // 2, "<i2").tobytes() + words.tobytes() + np.zeros(RATE, "<i2").tobytes())
    end = speech_end_s(pcm, load_model(None))
    spoken_until = 0.5 + len(words) / RATE
    assert spoken_until - 0.15 <= end <= spoken_until + 0.1


def test_the_pipecat_runner_imports_nothing_from_sotto() -> None:
    """It runs in Pipecat's venv (protobuf<7), where Sotto's stubs cannot load."""
    source = Path(__file__).parents[2] / "tools" / "bench" / "peers_pipecat.py"
    tree = ast.parse(source.read_text())
    modules = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in modules if m and m.split(".")[0] in ("services", "sotto", "tools")}
