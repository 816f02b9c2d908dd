"""Command line: `run` (the whole benchmark), `peers` (Sotto beside a Pipecat pipeline of the same models),
`tts` (speech engines side by side), `units` (how long the first unit of speech may be) and
`compare A.json B.json`."""

from __future__ import annotations

import argparse
import json
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
    run.add_argument("--quick", action="store_true", help="few llm turns, small component sizes (the bench's test)")
    run.add_argument("--headline-rounds", type=int, default=2,
                     help="passes over the human-speech questions in the headline conversation (0: none)")
    run.add_argument("--headline-only", action="store_true", help="the headline conversation alone")
    run.add_argument("--keep-work", action="store_true",
                     help="keep the fixtures and the stacks' logs (kept anyway when the run fails)")
    peers = sub.add_parser("peers", help="Sotto and a Pipecat pipeline of the same models, on the same clips, "
                                         "turn by turn (make bench-peers)")
    peers.add_argument("--rounds", type=int, default=3, help="times each clip is heard by each side")
    peers.add_argument("--floor-rounds", type=int, default=2, help="component-floor measurements per clip")
    peers.add_argument("--timeout", type=float, default=20.0, help="longest wait for one turn's reply")
    peers.add_argument("--aligned", action="store_true",
                       help="Pipecat's Whisper greedy on every core, as Sotto's asr (default: Pipecat's settings)")
    peers.add_argument("--clips", type=lambda t: tuple(x for x in t.split(",") if x), default=(),
                       help="only these clips (names as printed), comma list")
    peers.add_argument("--set", action="append", default=[], metavar="SOTTO_X=VALUE",
                       help="a Sotto setting other than the product's default (labelled so in the results)")
    peers.add_argument("--out", type=Path, default=Path("bench/results"))
    peers.add_argument("--keep-work", action="store_true", help="keep the clips and the logs")
    tts = sub.add_parser("tts", help="first chunk and RTF of speech engines, alone, on the same answers")
    tts.add_argument("--engines", type=lambda t: tuple(x for x in t.split(",") if x), default=("onnx", "piper"),
                     help="SOTTO_TTS_ENGINE values, comma list")
    tts.add_argument("--repeat", type=int, default=5, help="runs per answer (the median is reported)")
    tts.add_argument("--out", type=Path, help="also save the figures as JSON here")
    units = sub.add_parser("units", help="first chunk vs the opening's length, and the silence at each kind of seam")
    units.add_argument("--engine", default="piper", help="a SOTTO_TTS_ENGINE value")
    units.add_argument("--repeat", type=int, default=5, help="runs per length (the median is reported)")
    cmp_ = sub.add_parser("compare", help="per-figure differences of two result files")
    cmp_.add_argument("a", type=Path)
    cmp_.add_argument("b", type=Path)
    cmp_.add_argument("--changed", action="store_true", help="only figures that differ")
    args = parser.parse_args(argv)

    if args.command == "compare":
        rows = stats.compare(json.loads(args.a.read_text()), json.loads(args.b.read_text()))
        print(stats.format_compare(rows, args.changed))
        return 0
    if args.command == "peers":
        from tools.bench.peers import run_peers

        changed = dict(item.split("=", 1) for item in args.set)
        if any(not k.startswith("SOTTO_") for k in changed):
            parser.error(f"--set takes SOTTO_NAME=VALUE (docs/settings.md), got {', '.join(args.set)}")
        run_peers(args.rounds, args.out, args.timeout, args.aligned, args.floor_rounds, args.keep_work, args.clips,
                  changed)
        return 0
    if args.command == "units":
        from tools.bench import components

        components.print_opening_units(components.opening_units(args.engine, args.repeat))
        print(f"load average {stats.load_average()}")
        return 0
    if args.command == "tts":
        from tools.bench import components

        rows = {"machine": stats.machine(), "engines": components.tts_engines(args.engines, args.repeat)}
        rows["machine"]["load_average_end"] = stats.load_average()
        components.print_tts_engines(rows["engines"])
        print(f"load average {rows['machine']['load_average']} (start) / {rows['machine']['load_average_end']} (end)")
        if args.out:
            args.out.write_text(json.dumps(rows, indent=1))
        return 0
    from tools.bench.run import run as run_bench  # loads the engines: not for `compare`

    run_bench(args.turns, args.levels, args.load_turns, args.load_bound_s, args.out, args.timeout,
              components_on=not args.no_components, spoken_on=not args.no_spoken, case_names=args.cases,
              quick=args.quick, keep_work=args.keep_work, headline_rounds=args.headline_rounds,
              headline_only=args.headline_only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
