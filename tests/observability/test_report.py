"""tools/report.py (`make report`): a PNG from the gateway's log, or from its /metrics when there is no log."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from prometheus_client import CollectorRegistry, Histogram, Counter, generate_latest

from tests.observability.contract import ROOT
from tests.observability.synthetic import gateway_log
from tools import report


def assert_not_blank(png: Path) -> None:
    from PIL import Image

    pixels = np.asarray(Image.open(png).convert("L"), dtype=float)
    assert pixels.shape[0] > 300 and pixels.shape[1] > 800
    assert pixels.std() > 10, "the PNG is (nearly) one colour"
    assert (pixels < 128).mean() > 0.01, "too little ink: nothing was drawn"


def test_latest_run_only_and_tracebacks_skipped() -> None:
    lines = gateway_log(turns=12, runs=3).splitlines()
    assert len(report.turns_from_log(lines)) == 12
    assert len(report.turns_from_log(lines, all_runs=True)) == 36


def test_stages_add_up_to_ttfa() -> None:
    for turn in report.turns_from_log(gateway_log(turns=40).splitlines()):
        parts = report.stages_of(turn.timings)
        assert sum(parts.values()) == pytest.approx(turn.ttfa_ms, abs=0.5)
        assert ("endpoint" in parts) == (turn.source == "speech")


def test_bucket_quantile_matches_prometheus() -> None:
    # 10 observations in (0.5, 1]: Prometheus interpolates p95 to 0.5 + 0.5 * 0.95.
    assert report.bucket_quantile(0.95, [(0.5, 0), (1.0, 10), (float("inf"), 10)]) == pytest.approx(0.975)
    assert report.bucket_quantile(0.5, [(0.5, 0), (1.0, 0), (float("inf"), 4)]) == 1.0


def test_make_report_writes_a_png_from_the_log(tmp_path: Path) -> None:
    log = tmp_path / "logs" / "gateway.log"
    log.parent.mkdir()
    log.write_text(gateway_log(turns=50, runs=2))
    out = tmp_path / "report.png"
    run = subprocess.run([sys.executable, "-m", "tools.report", "--log", str(log), "--out", str(out),
                          "--metrics-url", "http://127.0.0.1:9/metrics"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert "50 turns" in run.stdout and "TTFA ms: p50" in run.stdout
    assert_not_blank(out)


def test_report_from_metrics_when_there_is_no_log(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    buckets = (0.05, 0.1, 0.5, 1, 2, 4)
    ttfa = Histogram("sotto_gateway_ttfa_seconds", "", ["source"], buckets=buckets, registry=registry)
    stage = Histogram("sotto_gateway_stage_seconds", "", ["stage"], buckets=buckets, registry=registry)
    turns = Counter("sotto_gateway_turns_total", "", ["source", "outcome"], registry=registry)
    for i in range(30):
        ttfa.labels("speech" if i % 2 else "text").observe(0.3 + i * 0.05)
        stage.labels("first_token").observe(0.2)
        stage.labels("endpoint").observe(0.45)
        turns.labels("speech", "stop").inc()
    parsed = report.report_from_metrics(generate_latest(registry).decode())
    assert sum(n for _, n in parsed.ttfa_buckets) == 30 and parsed.outcomes["stop"] == 30
    assert parsed.stage_quantiles["endpoint"][0] == pytest.approx(0.1 + 0.4 * (15 / 30))
    out = tmp_path / "metrics.png"
    report.render(parsed, out)
    assert_not_blank(out)


def test_no_turns_anywhere_is_a_clear_failure(tmp_path: Path, capsys) -> None:
    code = report.main(["--log", str(tmp_path / "none.log"), "--out", str(tmp_path / "x.png"),
                        "--metrics-url", "http://127.0.0.1:9/metrics"])
    assert code == 1 and "make up" in capsys.readouterr().err
    assert not (tmp_path / "x.png").exists()
