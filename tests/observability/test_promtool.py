"""deploy/prometheus passes promtool: the config and rules are valid, and the rules' unit tests pass."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from tests.observability.contract import PROMETHEUS_DIR


@pytest.fixture(scope="module")
def promtool() -> str:
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool not found: install Debian's prometheus package (apt-get install -y prometheus)")
    return path


@pytest.mark.parametrize("args", [["check", "config", "prometheus.yml"], ["check", "rules", "rules.yml"],
                                  ["test", "rules", "rules_test.yml"]], ids=lambda a: " ".join(a[:2]))
def test_promtool(promtool: str, args: list[str]) -> None:
    run = subprocess.run([promtool, *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "SUCCESS" in run.stdout + run.stderr


def test_rules_test_covers_every_alert(promtool: str) -> None:
    """Each alert appears in rules_test.yml both firing and quiet."""
    import yaml

    from tests.observability.contract import rules

    tests = yaml.safe_load((PROMETHEUS_DIR / "rules_test.yml").read_text())["tests"]
    cases = [case for test in tests for case in test.get("alert_rule_test", [])]
    for alert in (r["alert"] for r in rules() if "alert" in r):
        mine = [c for c in cases if c["alertname"] == alert]
        assert any(c["exp_alerts"] for c in mine), f"{alert} never shown firing"
        assert any(not c["exp_alerts"] for c in mine), f"{alert} never shown quiet"
