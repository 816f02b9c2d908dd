"""Concurrent sessions: each level runs that many sessions at once, each a few typed turns, within a time bound.

Above the LLM's admission limit the gateway must refuse with a clean `busy` event; anything else (no
turn.done in time, a socket dropped, an `error`) is counted separately, so a bad refusal shows up.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

from tools.bench import stats
from tools.bench.fixtures import Case
from tools.bench.wsdriver import run_turn

OK = ("stop", "length", "degraded")


async def _session(url: str, case: Case, turns: int, timeout: float, stop_at: float) -> list:
    out = []
    for _ in range(turns):
        if time.monotonic() >= stop_at:
            break
        out.append(await run_turn(url, case, timeout=min(timeout, max(1.0, stop_at - time.monotonic()))))
    return out


async def level(url: str, case: Case, sessions: int, turns: int, bound_s: float, timeout: float) -> dict:
    started = time.monotonic()
    stop_at = started + bound_s
    results = await asyncio.gather(*(_session(url, case, turns, timeout, stop_at) for _ in range(sessions)))
    records = [r for rs in results for r in rs]
    outcomes = Counter(r.outcome for r in records)
    ok = [r for r in records if r.outcome in OK]
    return {"level": sessions, "turns": len(records), "ok": len(ok), "busy": outcomes.get("busy", 0),
            "errors": sum(v for k, v in outcomes.items() if k not in (*OK, "busy", "timeout", "dropped", "refused")),
            "refused_http": outcomes.get("refused", 0),
            "timeouts": outcomes.get("timeout", 0), "dropped": outcomes.get("dropped", 0),
            "wall_s": round(time.monotonic() - started, 1), "load_average": stats.load_average(),
            "ttfa_ms": stats.summary(r.client_ttfa_ms for r in ok),
            "llm_queue_ms": stats.summary(r.timings.get("llm_queue_ms") for r in ok),
            "error_messages": sorted({r.error for r in records if r.error})[:5]}


async def run_levels(url: str, case: Case, levels: list[int], turns: int, bound_s: float, timeout: float,
                     progress=None) -> list[dict]:
    rows = []
    for n in levels:
        rows.append(await level(url, case, n, turns, bound_s, timeout))
        if progress is not None:
            progress.update(1)
    return rows


def plot(rows: list[dict], path: Path, admission_limit: int) -> Path:
    """TTFA p50/p95/p99 against concurrent sessions, with refusals on a second axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    levels = [r["level"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for q, style in (("p50", "o-"), ("p95", "s--"), ("p99", "^:")):
        ax.plot(levels, [r["ttfa_ms"][q] for r in rows], style, label=f"TTFA {q}")
    ax.set_xscale("log", base=2)
    ax.set_xticks(levels, [str(n) for n in levels])
    ax.set_xlabel("concurrent sessions")
    ax.set_ylabel("time to first audio, ms (client)")
    ax.axvline(admission_limit, color="grey", lw=0.8, ls=":")
    ax2 = ax.twinx()
    ax2.bar(levels, [r["busy"] for r in rows], width=[n * 0.25 for n in levels], alpha=0.25, color="red",
            label="busy refusals")
    ax2.set_ylabel("busy refusals (count)")
    lines = ax.get_legend_handles_labels()
    bars = ax2.get_legend_handles_labels()
    ax.legend(lines[0] + bars[0], lines[1] + bars[1], loc="upper left", fontsize=8)
    ax.set_title(f"Sotto TTFA vs concurrency (LLM admission limit {admission_limit})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
