"""Command line: `run` (everything), `load` (the load levels only), `compare A.json B.json`, `pool A.json ...`."""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path

from tools.bench import stats


def _levels(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(",") if x)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.bench", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="start the stack, run every case, the load levels and the components")
    run.add_argument("--turns", type=int, default=8, help="recorded turns per case (after one warm-up turn)")
    run.add_argument("--levels", type=_levels, default=(1, 2, 4, 8), help="concurrent sessions, comma list")
    run.add_argument("--load-turns", type=int, default=2, help="turns per session at each load level")
    run.add_argument("--load-bound-s", type=float, default=60.0, help="time bound of each load level")
    run.add_argument("--timeout", type=float, default=60.0, help="longest wait for one turn")
    run.add_argument("--out", type=Path, default=Path("bench/results"))
    run.add_argument("--no-components", action="store_true")
    run.add_argument("--no-spoken", action="store_true", help="typed case and load only")
    run.add_argument("--cases", type=lambda t: tuple(x for x in t.split(",") if x), default=(),
                     help="only these spoken cases (spoken_short, spoken_short_camera, spoken_long, "
                          "spoken_long_camera, spoken_short_raw); the typed case always runs")
    run.add_argument("--quick-components", action="store_true", help="small component sizes (the bench's test)")
    run.add_argument("--keep-work", action="store_true",
                     help="keep the fixtures and the stacks' logs (kept anyway when the run fails)")
    load = sub.add_parser("load", help="only the load levels (typed turns on the text stack)")
    load.add_argument("--levels", type=_levels, default=(1, 2, 4, 8))
    load.add_argument("--load-turns", type=int, default=2)
    load.add_argument("--load-bound-s", type=float, default=60.0)
    load.add_argument("--timeout", type=float, default=60.0)
    load.add_argument("--out", type=Path, default=Path("bench/results"))
    cmp_ = sub.add_parser("compare", help="per-figure differences of two result files")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    cmp_.add_argument("--changed", action="store_true", help="only figures that differ")
    pool = sub.add_parser("pool", help="the overhead over the turns of many runs of the same code")
    pool.add_argument("results", type=Path, nargs="+")
    pool.add_argument("--mixed", action="store_true", help="pool runs of different commits or settings anyway")
    pool.add_argument("--out", type=Path, help="also save the pooled figures as JSON here")
    args = parser.parse_args(argv)

    if args.command == "compare":
        rows = stats.compare(json.loads(args.a.read_text()), json.loads(args.b.read_text()))
        print(stats.format_compare(rows, args.changed))
        return 0
    if args.command == "pool":
        return _pool(args)
    from tools.bench import run as bench_run

    if args.command == "run":
        bench_run.run(args.turns, args.levels, args.load_turns, args.load_bound_s, args.out, args.timeout,
                      components_on=not args.no_components, spoken_on=not args.no_spoken,
                      case_names=args.cases, quick_components=args.quick_components, keep_work=args.keep_work)
        return 0
    return _load_only(args)


def _load_only(args: argparse.Namespace) -> int:
    from tools.stack import start_stack, stop_stack
    from tools.bench.fixtures import LOAD_QUESTION, Case
    from tools.bench.load import plot, run_levels
    from tools.bench.run import LOAD_ENV, instruct_model

    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    args.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sotto-bench-load-"))
    stack = start_stack(work, SOTTO_LLM_MODEL=str(instruct_model()), SOTTO_LLM_TOP_K="1", SOTTO_LLM_THREADS="1",
                        **LOAD_ENV)
    try:
        asyncio.run(_warm(stack.ws_url))
        rows = asyncio.run(run_levels(stack.ws_url, Case("load", "text", LOAD_QUESTION), list(args.levels),
                                      args.load_turns, args.load_bound_s, args.timeout))
        limit = int(stack.env.get("SOTTO_LLM_MAX_CONCURRENT", 2))
    finally:
        stop_stack(stack)
    png = plot(rows, args.out / f"{stamp}-load.png", limit)
    result = {"started_at": stamp, "machine": stats.machine(), "command": "python -m tools.bench load",
              "load": {"admission_limit": limit, "question": LOAD_QUESTION, "levels": rows, "plot": str(png)}}
    path = args.out / f"{stamp}-load.json"
    path.write_text(json.dumps(result, indent=1))
    for row in rows:
        print(json.dumps({k: row[k] for k in ("level", "turns", "ok", "busy", "errors", "timeouts", "dropped",
                                               "refused_http")}
                         | {"ttfa_ms": row["ttfa_ms"]}))
    print(f"saved {path} and {png}")
    return 0


def _pool(args: argparse.Namespace) -> int:
    from tools.bench.pool import PoolError, load_and_pool, print_pool

    try:
        pooled = load_and_pool(args.results, args.mixed)
    except PoolError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print_pool(pooled)
    if args.out:
        args.out.write_text(json.dumps(pooled, indent=1))
        print(f"saved {args.out}")
    return 0


async def _warm(url: str) -> None:
    from tools.bench.fixtures import typed_case
    from tools.bench.wsdriver import run_turn

    await run_turn(url, typed_case())


if __name__ == "__main__":
    raise SystemExit(main())
