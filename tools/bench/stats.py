"""Pure helpers: percentiles, summaries, the machine a run happened on, and per-figure diffs of two runs."""

from __future__ import annotations

import math
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear-interpolated percentile (q in 0..100) of the values, or None when there are none."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    pos = (len(data) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summary(values: Iterable[float]) -> dict[str, float | int | None]:
    """n, p50, p95, p99, mean, min and max (ms in, ms out), rounded to 0.1."""
    data = [v for v in values if v is not None]
    out: dict[str, float | int | None] = {"n": len(data)}
    for name, q in (("p50", 50), ("p95", 95), ("p99", 99)):
        out[name] = _round(percentile(data, q))
    out["mean"] = _round(statistics.fmean(data)) if data else None
    out["min"] = _round(min(data)) if data else None
    out["max"] = _round(max(data)) if data else None
    return out


def median_ci(values: Iterable[float], level: float = 0.95, resamples: int = 4000, seed: int = 0) -> list[float] | None:
    """Bootstrap confidence interval of the median, [low, high]: how far the p50 could move with other turns.

    A 10 ms target read off 40 turns whose first-sentence synthesis alone varies by +-50 ms needs this
    interval beside the p50, or a lucky run looks like a fix. (numpy draws the resamples; the percentile
    method, fixed seed, so a given set of turns always gives the same interval.)"""
    data = np.array([v for v in values if v is not None], dtype=float)
    if len(data) < 2:
        return None
    medians = np.median(np.random.default_rng(seed).choice(data, (resamples, len(data))), axis=1)
    tail = (1 - level) / 2 * 100
    return [round(float(np.percentile(medians, tail)), 1), round(float(np.percentile(medians, 100 - tail)), 1)]


def _round(value: float | None, digits: int = 1) -> float | None:
    return None if value is None else round(value, digits)


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def machine() -> dict:
    """CPU model, cores, memory, OS and Python, plus the load average right now."""
    model = platform.processor() or platform.machine()
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        memory_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (ValueError, OSError):
        memory_gb = None
    return {"cpu": model, "cores": os.cpu_count(), "affinity_cores": len(os.sched_getaffinity(0)),
            "memory_gb": memory_gb, "os": platform.platform(), "python": platform.python_version(),
            "load_average": load_average(), "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def commit() -> str | None:
    """The code a run measured: git's HEAD, with "-dirty" when tracked files differ from it (None outside a
    checkout). Runs are pooled only when this is the same (`tools.bench.pool`)."""
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


# Figures that are not measurements (settings, counts of inputs, the clock) and single turns (`rows`) are
# left out of a comparison.
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
