"""Read the metrics contract (docs/metrics.md), the rules and the dashboard, and pull metric names out of PromQL.

Shared by the contract tests and the end-to-end Prometheus test.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "metrics.md"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "sotto.json"

_ROW = re.compile(r"^\|\s*`(?P<name>[a-zA-Z_:][\w:]*)`\s*\|(?P<rest>.*)\|\s*$")
_BUCKET_ROW = re.compile(r"^\|\s*`(?P<name>\w+)`\s*\|\s*(?P<bounds>[\d., ]+)\s*\|")
_PROMQL_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')
_PROMQL_GROUPING = re.compile(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
# An identifier that is whole (not part of a longer one or a number) and not a function call.
_PROMQL_IDENT = re.compile(r"(?<![\w:.])([a-zA-Z_:][\w:]*)(?![\w:])(?!\s*\()")
_PROMQL_WORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool", "and", "or",
                 "unless", "inf", "nan", "atan2"}


@dataclass(frozen=True)
class Metric:
    name: str          # as exposed: counters with _total, info with _info
    type: str          # gauge, counter, histogram, info
    labels: tuple[str, ...]
    buckets: str       # a bucket set name for histograms, else "—"
    status: str        # "live" or "planned …"

    def series(self) -> set[str]:
        """Sample names this metric puts on /metrics (the `_created` companions aside)."""
        if self.type == "histogram":
            return {f"{self.name}_bucket", f"{self.name}_sum", f"{self.name}_count"}
        return {self.name}


def parse_doc(text: str | None = None) -> dict[str, Metric]:
    """Every metric row of docs/metrics.md: `| `name` | type | unit | labels | buckets | status | meaning |`."""
    text = DOC.read_text() if text is None else text
    metrics: dict[str, Metric] = {}
    for line in text.splitlines():
        match = _ROW.match(line)
        if not match:
            continue
        cells = [c.strip() for c in match["rest"].split("|")]
        if len(cells) != 6:
            continue  # the bucket, process and rule tables have other shapes
        kind, _unit, labels, buckets, status, _meaning = cells
        assert match["name"] not in metrics, f"{match['name']} is listed twice in docs/metrics.md"
        metrics[match["name"]] = Metric(match["name"], kind, label_names(labels), buckets.strip("`"), status)
    return metrics


def label_names(cell: str) -> tuple[str, ...]:
    """`source` (`speech`, `text`), `outcome` (…) -> ("outcome", "source"): the backticked names outside brackets."""
    if cell in ("—", "-", ""):
        return ()
    outside = re.sub(r"\([^)]*\)", "", cell)
    return tuple(sorted(re.findall(r"`(\w+)`", outside)))


def parse_buckets(text: str | None = None) -> dict[str, tuple[float, ...]]:
    text = DOC.read_text() if text is None else text
    sets = {}
    for line in text.splitlines():
        if match := _BUCKET_ROW.match(line):
            sets[match["name"]] = tuple(float(b) for b in match["bounds"].split(","))
    return sets


def promql_metric_names(expr: str) -> set[str]:
    """Metric (and recording rule) names an expression reads. Strings, label matchers, ranges, groupings and
    function names are removed first, so `sum by (le) (rate(x_bucket{a="b"}[5m]))` gives {"x_bucket"}."""
    expr = _PROMQL_STRING.sub('""', expr)
    expr = re.sub(r"\{[^}]*\}", " ", expr)
    expr = re.sub(r"\[[^\]]*\]", " ", expr)
    expr = _PROMQL_GROUPING.sub(" ", expr)
    return {name for name in _PROMQL_IDENT.findall(expr) if name.lower() not in _PROMQL_WORDS}


def rules() -> list[dict]:
    data = yaml.safe_load((PROMETHEUS_DIR / "rules.yml").read_text())
    return [rule for group in data["groups"] for rule in group["rules"]]


def dashboard() -> dict:
    return json.loads(DASHBOARD.read_text())


def dashboard_queries(board: dict) -> list[tuple[str, str]]:
    """(panel title, expr) for every target of every panel, rows' nested panels included."""
    found = []
    for panel in board["panels"]:
        for inner in [panel, *panel.get("panels", [])]:
            for target in inner.get("targets", []):
                found.append((inner["title"], target["expr"]))
    return found
