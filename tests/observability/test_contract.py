"""docs/metrics.md is the contract: the code registers exactly what it lists, with its labels and buckets, and every
query of the dashboard and the Prometheus rules reads a live series it lists."""

from __future__ import annotations

import importlib
import json
import re
import warnings

import pytest
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics import MetricWrapperBase

from services.common import hardware
from tests.observability import contract
from tests.observability.fakes import FakeNvml

# Every module that registers metrics at import. A service that adds a metrics module adds it here.
METRIC_MODULES = ("services.common.metrics", "services.gateway.metrics", "services.vad.metrics", "services.llm.metrics",
                  "services.tts.metrics", "services.asr.metrics")
EXTERNAL = {"up"}  # written by Prometheus per target, not by Sotto


def exposed_name(name: str, kind: str) -> str:
    """The name a family is documented under: prometheus_client keeps counters' and infos' names bare."""
    return {"counter": f"{name}_total", "info": f"{name}_info"}.get(kind, name)


@pytest.fixture(scope="module")
def registered() -> dict[str, str]:
    """Exposed name -> type, for everything the default registry would put on /metrics in any process, plus what
    the hardware collector yields with an NVIDIA GPU or without /proc (macOS)."""
    for module in METRIC_MODULES:
        importlib.import_module(module)
    hardware.register()  # serve_metrics does this in the services; the gateway calls it at start
    found = {exposed_name(m.name, m.type): m.type for m in REGISTRY.collect()}
    other_platforms = CollectorRegistry()
    other_platforms.register(hardware.HardwareCollector(nvml=FakeNvml(), process_fallback=True))
    for m in other_platforms.collect():
        found.setdefault(exposed_name(m.name, m.type), m.type)
    return found


@pytest.fixture(scope="module")
def documented() -> dict[str, contract.Metric]:
    return contract.parse_doc()


def wrappers() -> dict[str, MetricWrapperBase]:
    """The Counter/Gauge/Histogram/Info objects of the default registry, by exposed name."""
    out = {}
    for collector in list(REGISTRY._collector_to_names):  # no public way to list collectors
        if isinstance(collector, MetricWrapperBase):
            out[exposed_name(collector._name, collector._type)] = collector
    return out


def test_every_registered_metric_is_documented(registered, documented) -> None:
    missing = sorted(set(registered) - set(documented))
    assert not missing, f"registered in code but not in docs/metrics.md: {missing}"


def test_every_live_documented_metric_is_registered(registered, documented) -> None:
    live = {n for n, m in documented.items() if m.status == "live"} - EXTERNAL
    assert not sorted(live - set(registered)), "docs/metrics.md lists as live what no code registers"
    for name, metric in documented.items():
        assert metric.status == "live" or metric.status.startswith("planned"), f"{name}: status {metric.status!r}"
        if metric.status != "live" and name in registered:
            warnings.warn(f"{name} is registered now: mark it live in docs/metrics.md", stacklevel=1)


def test_types_labels_and_buckets_match(registered, documented) -> None:
    buckets = contract.parse_buckets()
    for name, kind in registered.items():
        assert documented[name].type == kind, f"{name}: docs say {documented[name].type}, code says {kind}"
    for name, wrapper in wrappers().items():
        doc = documented[name]
        if doc.type != "info":  # an Info's labels are whatever the service's load() returned
            assert tuple(sorted(wrapper._labelnames)) == doc.labels, f"{name}: labels differ"
        if doc.type == "histogram":
            assert doc.buckets in buckets, f"{name}: unknown bucket set {doc.buckets!r}"
            assert tuple(wrapper._upper_bounds[:-1]) == buckets[doc.buckets], f"{name}: buckets differ from docs"


def test_planned_histograms_name_a_bucket_set(documented) -> None:
    buckets = contract.parse_buckets()
    for name, metric in documented.items():
        if metric.type == "histogram":
            assert metric.buckets in buckets, name
            assert name.endswith("_seconds") or metric.buckets == "rtf", f"{name}: a latency is in seconds"


def test_common_latency_buckets_are_the_documented_ones() -> None:
    from services.common import metrics
    from services.gateway import metrics as gateway_metrics

    documented = contract.parse_buckets()
    assert metrics.LATENCY_BUCKETS == documented["latency"] == gateway_metrics.MS_BUCKETS
    assert gateway_metrics.TURN_BUCKETS == documented["turn"]
    assert 4.0 in documented["latency"], "the TTFA alert threshold must be a bucket edge"


@pytest.mark.parametrize(("expr", "names"), [
    ('histogram_quantile(0.95, sum by (le) (rate(sotto_gateway_ttfa_seconds_bucket{source="speech"}[5m]))) > 4',
     {"sotto_gateway_ttfa_seconds_bucket"}),
    ('sum(rate(a_total{code=~"x|y"}[$__rate_interval])) / sum without (b) (rate(c_total[5m] offset 1m))',
     {"a_total", "c_total"}),
    ("up{job=\"sotto\"} == 0 or sotto_service_serving == 0", {"up", "sotto_service_serving"}),
    ("sotto:gateway_server_errors:rate5m / 0.65 * max(x_bytes) - 1e3", {"sotto:gateway_server_errors:rate5m",
                                                                          "x_bytes"}),
])
def test_promql_names_parser(expr, names) -> None:
    assert contract.promql_metric_names(expr) == names


def _valid_series(documented: dict[str, contract.Metric]) -> set[str]:
    """What a query may read: the series of `live` metrics (a planned one would only draw an empty panel)."""
    series = set().union(*(m.series() for m in documented.values() if m.status == "live"))
    return series | {r["record"] for r in contract.rules() if "record" in r}


def test_rules_read_only_documented_series(documented) -> None:
    valid = _valid_series(documented)
    for rule in contract.rules():
        names = contract.promql_metric_names(rule["expr"])
        assert names, f"{rule}: no metric found"
        assert names <= valid, f"{rule.get('record') or rule.get('alert')}: unknown {sorted(names - valid)}"


def test_recording_rule_names_follow_the_convention() -> None:
    for rule in contract.rules():
        if "record" in rule:
            assert re.fullmatch(r"sotto:[a-z0-9_]+:[a-z0-9_]+", rule["record"]), rule["record"]


def test_dashboard_is_valid_and_reads_only_documented_series(documented) -> None:
    board = contract.dashboard()
    json.dumps(board)  # round-trips
    assert board["uid"] and board["title"] and board["panels"]
    ids = [p["id"] for p in board["panels"]]
    assert len(ids) == len(set(ids)), "panel ids must be unique"
    valid = _valid_series(documented)
    queries = contract.dashboard_queries(board)
    assert len(queries) >= 20
    for title, expr in queries:
        names = contract.promql_metric_names(expr)
        assert names, f"panel {title!r}: no metric in {expr!r}"
        assert names <= valid, f"panel {title!r}: {sorted(names - valid)} not in docs/metrics.md"
    for panel in board["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"]["uid"] == "sotto-prometheus", panel["title"]
            assert all(k in panel["gridPos"] for k in "xywh"), panel["title"]


def test_dashboard_covers_what_the_issue_asks(documented) -> None:
    """TTFA p50/p95/p99, per-stage latency, turns per second, error rate, queue depth, memory, GPU."""
    exprs = " ".join(e for _, e in contract.dashboard_queries(contract.dashboard()))
    for needle in ("histogram_quantile(0.50, sum by (le) (rate(sotto_gateway_ttfa_seconds_bucket",
                   "histogram_quantile(0.95, sum by (le) (rate(sotto_gateway_ttfa_seconds_bucket",
                   "histogram_quantile(0.99, sum by (le) (rate(sotto_gateway_ttfa_seconds_bucket",
                   "sotto_gateway_stage_seconds_bucket", "rate(sotto_gateway_turns_total", "sotto_gateway_errors_total",
                   "sotto_llm_queue_depth", "process_resident_memory_bytes", "sotto_gpu_utilization_ratio",
                   "sotto_gpu_memory_used_bytes", "sotto_gpu_temperature_celsius", "sotto_gpu_info"):
        assert needle in exprs, needle


def test_grafana_provisioning_points_at_the_dashboard_datasource() -> None:
    import yaml

    grafana = contract.ROOT / "deploy" / "grafana" / "provisioning"
    sources = yaml.safe_load((grafana / "datasources" / "sotto.yml").read_text())["datasources"]
    assert [s["uid"] for s in sources] == ["sotto-prometheus"] and sources[0]["type"] == "prometheus"
    providers = yaml.safe_load((grafana / "dashboards" / "sotto.yml").read_text())["providers"]
    assert providers[0]["type"] == "file" and providers[0]["options"]["path"]
