"""Latency report of the latest run as a PNG: `python -m tools.report` (`make report`).

Two sources, the first that has turns wins:
1. the gateway's JSON log (`run/logs/gateway.log`): one `turn_done` line per turn with its timings in ms, so the
   report shows every turn. The runner appends to the log across runs; only the turns after the gateway's last
   `listening` line (the latest start) are used unless `--all-runs`.
2. the gateway's `/metrics` histograms: bucket counts only, so the distribution is as coarse as the buckets and
   stages show as bucket-estimated quantiles.

The figure: the TTFA distribution with p50/p95/p99 and the 4 s alert line, each turn's TTFA split into its stages,
and the spread of each stage.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import urllib.request
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from services.common import config
from tools.runner import run_dir

TTFA_ALERT_S = 4.0
FETCH_TIMEOUT_S = 5.0
# The parts a turn's TTFA splits into, in time order (see `stages_of`).
STAGES = ("endpoint", "handoff", "first_token", "sentence", "tts_first_chunk")
STAGE_HELP = {
    "endpoint": "end of speech -> VAD endpoint",
    "handoff": "endpoint -> turn start",
    "first_token": "turn start -> first token",
    "sentence": "first token -> first sentence complete",
    "tts_first_chunk": "sentence -> its first audio",
}


@dataclass
class TurnRecord:
    ttfa_ms: float | None
    outcome: str
    source: str
    timings: dict[str, float]


@dataclass
class Report:
    """What the figure shows, from either source."""

    origin: str
    turns: list[TurnRecord] = field(default_factory=list)
    # From /metrics only: TTFA bucket upper bounds (s) -> count in that bucket (not cumulative), and stage
    # quantiles estimated from buckets: stage -> (p50 s, p95 s).
    ttfa_buckets: list[tuple[float, float]] = field(default_factory=list)
    stage_quantiles: dict[str, tuple[float, float]] = field(default_factory=dict)
    outcomes: Counter = field(default_factory=Counter)


# -- reading ---------------------------------------------------------------------------------------------------
def turns_from_log(lines: Iterable[str], all_runs: bool = False) -> list[TurnRecord]:
    """`turn_done` records of the latest gateway start (or of every start). Lines that are not JSON are skipped:
    a crash can leave a traceback in the log."""
    turns: list[TurnRecord] = []
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        if record.get("event") == "listening" and record.get("logger") == "services.gateway.server" and not all_runs:
            turns = []
        elif record.get("event") == "turn_done":
            timings = {k: float(v) for k, v in record.items() if k.endswith("_ms") and isinstance(v, (int, float))}
            turns.append(TurnRecord(timings.get("ttfa_ms"), str(record.get("outcome", "")),
                                    str(record.get("source", "")), timings))
    return turns


def stages_of(t: dict[str, float]) -> dict[str, float]:
    """Split a turn's TTFA (ms) into consecutive parts that add up to it. Turn-relative timings come from the
    gateway: first_token_ms and first_audio_ms count from turn start, tts_first_chunk_ms from the moment the first
    sentence was complete. Small negatives from rounding are clamped to 0."""
    ttfa, first_audio = t.get("ttfa_ms"), t.get("first_audio_ms")
    if ttfa is None or first_audio is None:
        return {}
    endpoint = t.get("endpoint_ms", 0.0)  # a typed turn has none
    first_token = min(t.get("first_token_ms", first_audio), first_audio)
    tts = min(t.get("tts_first_chunk_ms", 0.0), first_audio - first_token)
    parts = {"handoff": max(0.0, ttfa - endpoint - first_audio), "first_token": first_token,
             "sentence": max(0.0, first_audio - first_token - tts), "tts_first_chunk": max(0.0, tts)}
    return {"endpoint": endpoint, **parts} if "endpoint_ms" in t else parts


def report_from_metrics(text: str) -> Report:
    report = Report("gateway /metrics")
    ttfa_cumulative: dict[float, float] = {}
    stage_cumulative: dict[str, dict[float, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "sotto_gateway_ttfa_seconds_bucket":
                le = float(sample.labels["le"])
                ttfa_cumulative[le] = ttfa_cumulative.get(le, 0.0) + sample.value  # summed over sources
            elif sample.name == "sotto_gateway_stage_seconds_bucket":
                le = float(sample.labels["le"])
                stage_cumulative.setdefault(sample.labels["stage"], {})[le] = sample.value
            elif sample.name == "sotto_gateway_turns_total":
                report.outcomes[sample.labels["outcome"]] += int(sample.value)
    bounds = sorted(ttfa_cumulative)
    previous = 0.0
    for le in bounds:
        report.ttfa_buckets.append((le, ttfa_cumulative[le] - previous))
        previous = ttfa_cumulative[le]
    for stage, cumulative in stage_cumulative.items():
        buckets = sorted(cumulative.items())
        if buckets and buckets[-1][1] > 0:
            report.stage_quantiles[stage] = (bucket_quantile(0.5, buckets), bucket_quantile(0.95, buckets))
    return report


def bucket_quantile(q: float, cumulative: Sequence[tuple[float, float]]) -> float:
    """Prometheus' histogram_quantile for one histogram: linear interpolation inside the bucket that holds q."""
    total = cumulative[-1][1]
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for le, count in cumulative:
        if count >= rank:
            if math.isinf(le):
                return lower_bound  # as Prometheus does: the upper bound of the last finite bucket
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return lower_bound


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


# -- drawing ---------------------------------------------------------------------------------------------------
def render(report: Report, out: Path) -> None:
    try:
        import matplotlib
    except ImportError:
        sys.exit("tools.report needs matplotlib: pip install 'matplotlib>=3.8'")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5), gridspec_kw={"width_ratios": [1.1, 1.5, 1]})
    if report.turns:
        _draw_turns(report, axes)
    else:
        _draw_buckets(report, axes)
    fig.suptitle(_title(report), fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=100)
    plt.close(fig)


def _title(report: Report) -> str:
    outcomes = report.outcomes or Counter(t.outcome for t in report.turns)
    parts = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
    return f"Sotto latency report ({report.origin}): {sum(outcomes.values())} turns ({parts})"


def _draw_turns(report: Report, axes) -> None:
    timed = [t for t in report.turns if t.ttfa_ms is not None]
    ttfa_s = [t.ttfa_ms / 1000 for t in timed]
    ax = axes[0]
    if ttfa_s:
        ax.hist(ttfa_s, bins=min(40, max(5, len(ttfa_s) // 2)), color="#4c72b0")
        for q, style in ((0.5, "-"), (0.95, "--"), (0.99, ":")):
            value = percentile(ttfa_s, q)
            ax.axvline(value, color="black", linestyle=style, label=f"p{round(q * 100)} {value * 1000:.0f} ms")
    ax.axvline(TTFA_ALERT_S, color="red", label="alert 4 s")
    ax.set(title=f"Time to first audio ({len(ttfa_s)} turns with audio)", xlabel="seconds", ylabel="turns")
    ax.legend(fontsize=8)

    ax = axes[1]
    split = [stages_of(t.timings) for t in timed]
    bottom = [0.0] * len(split)
    for stage in STAGES:
        heights = [s.get(stage, 0.0) for s in split]
        ax.bar(range(len(split)), heights, bottom=bottom, width=1.0 if len(split) > 60 else 0.8,
               label=f"{stage}: {STAGE_HELP[stage]}")
        bottom = [b + h for b, h in zip(bottom, heights)]
    ax.axhline(TTFA_ALERT_S * 1000, color="red", linewidth=0.8)
    ax.set(title="Each turn's TTFA by stage", xlabel="turn (in order)", ylabel="ms")
    ax.legend(fontsize=7, loc="upper left")

    ax = axes[2]
    data = [[s[stage] for s in split if stage in s] for stage in STAGES]
    ax.boxplot(data, showfliers=True)
    ax.set_xticks(range(1, len(STAGES) + 1), STAGES, rotation=30, fontsize=8)
    ax.set(title="Stage spread", ylabel="ms")


def _draw_buckets(report: Report, axes) -> None:
    ax = axes[0]
    finite = [(le, n) for le, n in report.ttfa_buckets if not math.isinf(le)]
    overflow = sum(n for le, n in report.ttfa_buckets if math.isinf(le))
    labels = [f"≤{le:g}" for le, _ in finite] + (["+Inf"] if report.ttfa_buckets else [])
    ax.bar(range(len(labels)), [n for _, n in finite] + ([overflow] if report.ttfa_buckets else []),
           color="#4c72b0")
    ax.set_xticks(range(len(labels)), labels, rotation=60, fontsize=7)
    ax.set(title="Time to first audio (histogram buckets, s)", ylabel="turns")
    ax = axes[1]
    stages = sorted(report.stage_quantiles)
    ax.bar([i - 0.2 for i in range(len(stages))], [report.stage_quantiles[s][0] * 1000 for s in stages], 0.4,
           label="p50")
    ax.bar([i + 0.2 for i in range(len(stages))], [report.stage_quantiles[s][1] * 1000 for s in stages], 0.4,
           label="p95")
    ax.set_xticks(range(len(stages)), stages, rotation=20, fontsize=8)
    ax.set(title="Stage latency (estimated from buckets)", ylabel="ms")
    ax.legend(fontsize=8)
    axes[2].axis("off")
    lines = []
    if sum(n for _, n in report.ttfa_buckets):
        cumulative, running = [], 0.0
        for le, n in report.ttfa_buckets:
            running += n
            cumulative.append((le, running))
        lines = [f"TTFA p{round(q * 100)} ≈ {bucket_quantile(q, cumulative) * 1000:.0f} ms" for q in (0.5, 0.95, 0.99)]
    lines += ["", "(estimated from buckets, as Prometheus does)", "",
              "Per-turn detail needs the gateway log", "(run/logs/gateway.log, `make up`)."]
    axes[2].text(0, 0.5, "\n".join(lines), fontsize=10, va="center")


# -- entry point -------------------------------------------------------------------------------------------------
def load(log: Path, metrics_url: str, all_runs: bool) -> Report:
    if log.exists():
        with log.open(encoding="utf-8", errors="replace") as lines:
            turns = turns_from_log(lines, all_runs)
        if turns:
            return Report(f"{log}", turns=turns)
    with urllib.request.urlopen(metrics_url, timeout=FETCH_TIMEOUT_S) as response:
        return report_from_metrics(response.read().decode())


def summary(report: Report) -> str:
    ttfa = [t.ttfa_ms for t in report.turns if t.ttfa_ms is not None]
    if not ttfa:
        return _title(report)
    return (f"{_title(report)}\nTTFA ms: p50 {percentile(ttfa, 0.5):.0f}, p95 {percentile(ttfa, 0.95):.0f}, "
            f"p99 {percentile(ttfa, 0.99):.0f}, max {max(ttfa):.0f}")


def main(argv: Sequence[str] | None = None) -> int:
    run = run_dir()
    host = config.exit_on_error(lambda: config.load(config.CommonConfig)).host
    port = config.exit_on_error(lambda: config.load(config.GatewayConfig)).port
    parser = argparse.ArgumentParser(prog="python -m tools.report", description=__doc__.splitlines()[0])
    parser.add_argument("--log", type=Path, default=run / "logs" / "gateway.log", help="gateway JSON log")
    parser.add_argument("--metrics-url", default=f"http://{host}:{port}/metrics",
                        help="gateway metrics, used when the log has no turns")
    parser.add_argument("--out", type=Path, default=run / "report.png", help="PNG to write")
    parser.add_argument("--all-runs", action="store_true", help="every run in the log, not only the latest")
    args = parser.parse_args(argv)
    try:
        report = load(args.log, args.metrics_url, args.all_runs)
    except OSError as exc:
        print(f"no turns in {args.log} and {args.metrics_url} unreachable ({exc}); run `make up` and talk first",
              file=sys.stderr)
        return 1
    if not report.turns and not report.ttfa_buckets:
        print(f"no turns yet in {args.log} or {args.metrics_url}", file=sys.stderr)
        return 1
    render(report, args.out)
    print(summary(report))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
