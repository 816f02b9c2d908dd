"""The pipeline overhead's figures over a set of paired turns, and the verdict on its target.

Pure functions of the saved rows, apart from the run that made them, so `pool` can recompute them over many
result files without loading the engines the run needs.
"""

from __future__ import annotations

import statistics

from tools.bench import stats

TARGET_OVERHEAD_MS = 10.0
TARGET_OVERHEAD_RATIO = 0.05


def outside_synthesis(row: dict) -> float | None:
    """The overhead minus the first sentence's synthesis-time difference: the hops (request, relay of the
    text, first chunk back to the client), without the synthesis noise that dominates a single turn."""
    slowdown = row.get("tts_synthesis_slowdown_ms")
    return None if slowdown is None else round(row["overhead_ms"] - slowdown, 1)


def pipeline_cost(row: dict) -> float | None:
    """The overhead with the synthesis's own speed left out and its waits kept: outside synthesis plus how
    much longer the synthesis's threads waited for a core in the tts service than in process (the kernel's
    count). What is left out, the same work running at a different speed on the two paths, is the host's
    speed: it moves one pair's synthesis by about 160 ms (SD) and averages out, so the raw p50 needs
    thousands of turns to be pinned to a few ms where this needs tens. The LLM engine's own speed stays in (its
    first-token difference, "engine gap", is part of outside synthesis), which widens the typed turns' figure."""
    outside, wait = outside_synthesis(row), row.get("tts_core_wait_diff_ms")
    return None if outside is None or wait is None else round(outside + wait, 1)


def overhead_by_client(cases: dict) -> dict:
    """The overhead over the product's own clients (the page's spoken turns and typed turns), and the same
    figures for a client without its own VAD, apart: it streams the microphone to the server while the answer
    is prepared, which the page does not."""
    raw = {name: c for name, c in cases.items() if c["summary"]["client"] == "raw"}
    out = overhead_of({name: c for name, c in cases.items() if name not in raw})
    if raw:
        out["raw_client"] = overhead_of(raw)
    return out


def overhead_of(cases: dict) -> dict:
    """The overhead's figures over every paired turn of `cases` ({name: {"rows": [...]}}), with the verdict."""
    paired = [r for c in cases.values() for r in c["rows"] if "overhead_ms" in r]
    values = [r["overhead_ms"] for r in paired]
    ttfa = [r["stack"]["client_ttfa_ms"] for r in paired]
    p50 = stats.percentile(values, 50)
    ratio = round(p50 / statistics.median(ttfa), 4) if values else None
    outside = [outside_synthesis(r) for r in paired]
    slower = [r.get("tts_synthesis_slowdown_ms") for r in paired]
    core_wait = [r.get("tts_core_wait_diff_ms") for r in paired]
    # What the pipeline cost leaves out, to be seen centred on 0 rather than assumed to be
    host_speed = [None if s is None or w is None else round(s - w, 1) for s, w in zip(slower, core_wait)]
    split = {k: stats.summary(r.get(k) for r in paired) for k in ("llm_engine_gap_ms", "first_token_hops_ms")}
    ci = stats.median_ci(values)
    cost = [pipeline_cost(r) for r in paired]
    cost_p50, cost_ci = stats.percentile(cost, 50), stats.median_ci(cost)
    cost_ratio = round(cost_p50 / statistics.median(ttfa), 4) if cost_p50 is not None else None
    return {"cases": sorted(cases), "all_turns_ms": stats.summary(values), "all_turns_p50_ci95_ms": ci,
            "ratio_p50": ratio, "cpu_all_turns_ms": stats.summary(r.get("cpu_overhead_ms") for r in paired),
            "outside_synthesis_all_turns_ms": stats.summary(outside),
            "outside_synthesis_p50_ci95_ms": stats.median_ci(outside),
            "tts_slower_all_turns_ms": stats.summary(slower),
            "tts_slower_p50_ci95_ms": stats.median_ci(slower),
            "tts_core_wait_diff_all_turns_ms": stats.summary(core_wait),
            "tts_core_wait_diff_p50_ci95_ms": stats.median_ci(core_wait),
            "tts_host_speed_all_turns_ms": stats.summary(host_speed),
            "tts_host_speed_p50_ci95_ms": stats.median_ci(host_speed),
            "pipeline_cost_all_turns_ms": stats.summary(cost), "pipeline_cost_p50_ci95_ms": cost_ci,
            "pipeline_cost_ratio_p50": cost_ratio,
            "llm_engine_gap_all_turns_ms": split["llm_engine_gap_ms"],
            "first_token_hops_all_turns_ms": split["first_token_hops_ms"],
            "met": bool(values) and p50 <= TARGET_OVERHEAD_MS and ratio <= TARGET_OVERHEAD_RATIO,
            # The verdict the turns support: met or missed even at the far end of the p50's interval.
            "met_at_ci_high": bool(values) and ci is not None and ci[1] <= TARGET_OVERHEAD_MS
                              and ratio <= TARGET_OVERHEAD_RATIO,
            "missed_at_ci_low": ci is not None and ci[0] > TARGET_OVERHEAD_MS,
            # The same target on the pipeline's cost, whose interval the host's speed does not widen.
            "cost_met_at_ci_high": cost_ci is not None and cost_ci[1] <= TARGET_OVERHEAD_MS
                                   and cost_ratio <= TARGET_OVERHEAD_RATIO}
