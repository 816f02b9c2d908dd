"""Pure helpers: summaries, the median's bootstrap interval, the machine a run happened on, and per-figure
diffs of two runs."""

from __future__ import annotations

import os
import platform
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats


def _values(values: Iterable[float | None]) -> np.ndarray:
    return np.array([v for v in values if v is not None], dtype=float)


def summary(values: Iterable[float | None]) -> dict[str, float | int | None]:
    """n, p50, p95, p99, mean, min and max (ms in, ms out), rounded to 0.1; None where there are no values."""
    data = _values(values)
    if not len(data):
        return {"n": 0} | dict.fromkeys(("p50", "p95", "p99", "mean", "min", "max"))
    p50, p95, p99 = np.percentile(data, (50, 95, 99))
    figures = {"p50": p50, "p95": p95, "p99": p99, "mean": data.mean(), "min": data.min(), "max": data.max()}
    return {"n": len(data)} | {k: round(float(v), 1) for k, v in figures.items()}


def median_ci(values: Iterable[float | None], level: float = 0.95) -> list[float] | None:
    """Bootstrap interval of the median, [low, high]: how far the p50 could move with other turns of the same
    run. A fixed seed, so the same turns always give the same interval; None below two turns."""
    data = _values(values)
    if len(data) < 2:
        return None
    result = scipy_stats.bootstrap((data,), np.median, confidence_level=level, n_resamples=4000,
                                   method="percentile", rng=np.random.default_rng(0))
    interval = result.confidence_interval
    return [round(float(interval.low), 1), round(float(interval.high), 1)]


def ratio_ci(a: Iterable[float], b: Iterable[float], q: float = 50.0,
             level: float = 0.95) -> tuple[float | None, list[float] | None]:
    """The q-th percentile of `a` over that of `b`, and its paired bootstrap interval [low, high]: `a[i]` and
    `b[i]` are one pair (the same clip, back to back), so pairs are resampled together and what the machine did
    to both at that moment stays in the pair. A fixed seed; no interval below two pairs, no ratio without pairs."""
    x, y = np.asarray(list(a), dtype=float), np.asarray(list(b), dtype=float)
    if len(x) != len(y):
        raise ValueError(f"paired samples must be as long as each other, got {len(x)} and {len(y)}")
    if not len(x):
        return None, None

    def ratio(u: np.ndarray, v: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.percentile(u, q, axis=axis) / np.percentile(v, q, axis=axis)

    value = round(float(ratio(x, y)), 3)
    if len(x) < 2:
        return value, None
    result = scipy_stats.bootstrap((x, y), ratio, paired=True, vectorized=True, confidence_level=level,
                                   n_resamples=4000, method="percentile", rng=np.random.default_rng(0))
    interval = result.confidence_interval
    return value, [round(float(interval.low), 3), round(float(interval.high), 3)]


def playback_gaps(chunks: Iterable[tuple[float, int]], rate: int) -> list[float]:
    """The silences (ms) a listener hears between audio chunks, from (arrival s, samples) in arrival order: a player
    that starts with the first chunk and plays on (the page's AudioWorklet, which keeps no buffer in reserve) runs
    dry whenever a chunk arrives after all the audio before it has played."""
    gaps, queued_until = [], None
    for arrival, samples in chunks:
        if queued_until is not None and arrival > queued_until:
            gaps.append(round((arrival - queued_until) * 1000, 1))
        queued_until = max(arrival, queued_until or arrival) + samples / rate
    return gaps


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    """CPU model, cores, memory, OS and Python, plus the load average right now."""
    model = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]
        model = names[0] if names else model
    return {"cpu": model, "cores": os.cpu_count(), "affinity_cores": len(os.sched_getaffinity(0)),
            "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
            "os": platform.platform(), "python": platform.python_version(), "load_average": load_average(),
            "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def commit() -> str | None:
    """The code a run measured: git's HEAD, with "-dirty" when tracked files differ (None outside a checkout)."""
    repo = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    return head.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")


def flatten(tree: object, prefix: str = "") -> dict[str, float]:
    """Every number in a nested dict/list as {"a.b.c": value} (strings, bools and None are skipped)."""
    out: dict[str, float] = {}
    if isinstance(tree, Mapping):
        for key, value in tree.items():
            out |= flatten(value, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            key = value.get("name", value.get("level", i)) if isinstance(value, Mapping) else i
            out |= flatten(value, f"{prefix}[{key}]")
    elif isinstance(tree, (int, float)) and not isinstance(tree, bool):
        out[prefix] = float(tree)
    return out


# Settings, counts of inputs and the machine are not measurements; single turns (`rows`) are noise.
_NOT_COMPARED = ("machine.", "config.", ".n", "started_at")


def compare(a: Mapping, b: Mapping) -> list[tuple[str, float, float, float, float | None]]:
    """(figure, a, b, b - a, relative change) for every number both runs have, in A's order."""
    fa, fb = flatten(a), flatten(b)
    rows = []
    for key, va in fa.items():
        if key not in fb or ".rows[" in key or any(key.startswith(p) or key.endswith(p) for p in _NOT_COMPARED):
            continue
        vb = fb[key]
        rows.append((key, va, vb, vb - va, (vb - va) / va if va else None))
    return rows


def format_compare(rows: list[tuple[str, float, float, float, float | None]], changed_only: bool = False) -> str:
    width = max((len(r[0]) for r in rows), default=10)
    lines = [f"{'figure':<{width}} {'A':>11} {'B':>11} {'B-A':>11} {'change':>8}"]
    for key, va, vb, diff, rel in rows:
        if changed_only and diff == 0:
            continue
        change = "" if rel is None else f"{rel * 100:+.1f}%"
        lines.append(f"{key:<{width}} {va:>11.2f} {vb:>11.2f} {diff:>+11.2f} {change:>8}")
    return "\n".join(lines)
