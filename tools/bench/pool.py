"""`python -m tools.bench pool A.json B.json ...`: the pipeline overhead over the turns of many runs.

One run's 40 page and typed turns give the overhead's p50 a 95 % interval about +-70 ms wide on a shared 2-core
host (the same first sentence's synthesis moves with the host's speed, on either path: one pair's difference has
a standard deviation of about 160 ms), so the verdict on the 10 ms target comes from the turns of many runs.
Runs are pooled only when they measured the same thing: the same code (`commit`) and the same settings that shape
a turn (`SAME_IN_POOL`); otherwise the command names what differs and pools nothing, unless told to mix them.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tools.bench.report import fmt, fmt_ci, print_overall
from tools.bench.overhead import overhead_by_client, overhead_of

# What a run's turns depend on besides the host: the code, the models, and the sampling that makes both paths
# decode the same reply.
SAME_IN_POOL = ("top_k", "llm_threads", "max_new_tokens", "spoken_max_new_tokens", "spoken_model", "typed_model")


class PoolError(ValueError):
    """The files cannot be pooled (none given, not bench results, or runs of different code or settings)."""


def _settings(result: dict) -> dict:
    config = result.get("config", {})
    return {"commit": result.get("commit")} | {key: config.get(key) for key in SAME_IN_POOL}


def pool(results: Sequence[dict], names: Sequence[str], mixed: bool = False) -> dict:
    """Every case's paired turns, merged across `results` (whose file names are `names`), and the overhead's
    figures over them: per case, over the page's and typed turns, and for a client without its own VAD."""
    if not results:
        raise PoolError("no result files given: pass the JSON files `python -m tools.bench run` saved")
    for name, result in zip(names, results):
        if not isinstance(result, dict) or "cases" not in result:
            raise PoolError(f"{name} holds no cases: only the results of `python -m tools.bench run` can be pooled")
    first = _settings(results[0])
    differ = sorted({key for r in results for key, value in _settings(r).items() if value != first[key]})
    if differ and not mixed:
        raise PoolError(f"the runs differ in {', '.join(differ)}, so their turns measured different things; "
                        "pool runs of one commit and one configuration, or pass --mixed to pool them anyway")
    merged: dict[str, dict] = {}
    for result in results:
        for case, c in result["cases"].items():
            into = merged.setdefault(case, {"rows": [], "summary": {"client": c["summary"]["client"]}})
            into["rows"].extend(c["rows"])
    runs = [{"file": name, "started_at": r.get("started_at"), "commit": r.get("commit"),
             "turns": r["overhead"]["all_turns_ms"]["n"], "overhead_p50_ms": r["overhead"]["all_turns_ms"]["p50"]}
            for name, r in zip(names, results)]
    return {"runs": runs, "settings": first if not differ else {"mixed": differ},
            "per_case": {case: overhead_of({case: c}) for case, c in merged.items()},
            "overhead": overhead_by_client(merged)}


def load_and_pool(paths: Sequence[Path], mixed: bool = False) -> dict:
    results = []
    for path in paths:
        try:
            results.append(json.loads(path.read_text()))
        except (OSError, json.JSONDecodeError) as err:
            raise PoolError(f"cannot read {path}: {err}") from err
    return pool(results, [str(p) for p in paths], mixed)


def print_pool(pooled: dict) -> None:
    runs = pooled["runs"]
    print(f"\n{len(runs)} runs pooled; settings {json.dumps(pooled['settings'])}")
    print("per run, overhead p50 over its page and typed turns (ms): "
          + ", ".join(f"{r['overhead_p50_ms']} ({r['turns']})" for r in runs))
    print(f"\n{'case':<20}{'turns':>6}{'ovh p50':>9}{'95% CI':>11}{'outside':>9}{'tts slower':>11}"
          f"{'engine gap':>11}{'hops':>7}{'core wait':>10}{'cost':>7}")
    for case, o in pooled["per_case"].items():
        print(f"{case:<20}{o['all_turns_ms']['n']:>6}{fmt(o['all_turns_ms']):>9}{fmt_ci(o['all_turns_p50_ci95_ms']):>11}"
              f"{fmt(o['outside_synthesis_all_turns_ms']):>9}{fmt(o['tts_slower_all_turns_ms']):>11}"
              f"{fmt(o['llm_engine_gap_all_turns_ms']):>11}{fmt(o['first_token_hops_all_turns_ms']):>7}"
              f"{fmt(o.get('tts_core_wait_diff_all_turns_ms')):>10}{fmt(o.get('pipeline_cost_all_turns_ms')):>7}")
    print()
    print_overall(pooled["overhead"])
