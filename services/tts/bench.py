"""Benchmark the TTS engines: time to first chunk and real-time factor for short/medium/long answers.

    python -m services.tts.bench [--kit DIR] [--engines onnx,mlx] [--repeat 3] [--voice jf_alpha]
        [--threads N] [--mlx-all]

RTF = synthesis wall time / audio duration (below 1 is faster than real time). Targets here with
ONNX: first chunk of a short first clause <= 0.5 s, RTF <= 0.5. MLX on a CPU is far slower than
real time, so it runs the short answer only unless --mlx-all is given.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

from services.tts.engine import SAMPLE_RATE, KokoroMlx, KokoroOnnx

ANSWERS = {
    "short": "Sure, I can help with that.",
    "medium": ("The capital of France is Paris. It sits on the Seine, and about two million people "
               "live in the city itself."),
    "long": ("Well, that depends on what you mean by fast, because a cheetah can sprint at over one "
             "hundred kilometres an hour for a short distance. Over longer runs, pronghorn antelopes "
             "keep up high speeds for much longer. Among birds, the peregrine falcon dives at more "
             "than three hundred kilometres an hour. So the answer changes with the question!"),
}
TARGET_FIRST_CHUNK_S = 0.5
TARGET_RTF = 0.5


def measure(engine, text: str, voice: str) -> tuple[float, float, float, float, float]:
    """(first chunk s, total s, audio s, CPU s to first chunk, CPU s total) for one synthesis.

    CPU seconds (all threads of this process) say what the work costs when other processes
    compete for the cores and wall time says little.
    """
    started, cpu_started = time.perf_counter(), time.process_time()
    first = cpu_first = None
    samples = 0
    for chunk in engine.synthesize(text, voice):
        if first is None:
            first, cpu_first = time.perf_counter() - started, time.process_time() - cpu_started
        samples += chunk.samples
    return (first or 0.0, time.perf_counter() - started, samples / SAMPLE_RATE, cpu_first or 0.0,
            time.process_time() - cpu_started)


def bench(engine, voice: str, names: list[str], repeat: int) -> list[dict]:
    rows = []
    for name in names:
        runs = [measure(engine, ANSWERS[name], voice) for _ in range(repeat)]
        first = statistics.median(r[0] for r in runs)
        total = statistics.median(r[1] for r in runs)
        audio = runs[0][2]
        cpu_first = statistics.median(r[3] for r in runs)
        cpu_total = statistics.median(r[4] for r in runs)
        rows.append({"engine": engine.name, "answer": name, "chars": len(ANSWERS[name]),
                     "first_chunk_s": first, "total_s": total, "audio_s": audio, "rtf": total / audio,
                     "cpu_first_s": cpu_first, "cpu_rtf": cpu_total / audio})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="TTS engine benchmark (time to first chunk, RTF)")
    default_kit = Path(os.environ.get("SOTTO_MODEL_DIR", Path.home() / ".cache/sotto/models")) / "kokoro-kit"
    parser.add_argument("--kit", type=Path, default=default_kit, help="kit from tools.models.kokoro_kit")
    parser.add_argument("--engines", default="onnx", help="comma list of onnx, mlx")
    parser.add_argument("--voice", default="jf_alpha")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="ONNX Runtime intra-op threads")
    parser.add_argument("--mlx-all", action="store_true", help="run every answer on MLX too (slow on CPU)")
    args = parser.parse_args(argv)

    rows = []
    for name in args.engines.split(","):
        started = time.perf_counter()
        if name == "onnx":
            engine, answers = KokoroOnnx.from_folder(args.kit / "onnx", threads=args.threads), list(ANSWERS)
        elif name == "mlx":
            engine = KokoroMlx(args.kit / "mlx")
            answers = list(ANSWERS) if args.mlx_all else ["short"]
        else:
            parser.error(f"unknown engine {name!r}")
        loaded = time.perf_counter() - started
        engine.warmup()
        print(f"{engine.name}: load {loaded:.2f} s, warm-up {time.perf_counter() - started - loaded:.2f} s")
        rows += bench(engine, args.voice, answers, 1 if name == "mlx" else args.repeat)

    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores (wall times need an idle machine)")
    print(f"{'engine':<12} {'answer':<7} {'chars':>5} {'first chunk s':>13} {'total s':>8} "
          f"{'audio s':>8} {'RTF':>6} {'CPU first s':>11} {'CPU RTF':>8}")
    for r in rows:
        print(f"{r['engine']:<12} {r['answer']:<7} {r['chars']:>5} {r['first_chunk_s']:>13.3f} "
              f"{r['total_s']:>8.2f} {r['audio_s']:>8.2f} {r['rtf']:>6.2f} {r['cpu_first_s']:>11.3f} "
              f"{r['cpu_rtf']:>8.2f}")
    onnx = [r for r in rows if r["engine"] == "kokoro-onnx"]
    if onnx:
        short = next(r for r in onnx if r["answer"] == "short")
        worst = max(r["rtf"] for r in onnx)
        print(f"targets (onnx): first chunk of a short clause {short['first_chunk_s']:.3f} s "
              f"(<= {TARGET_FIRST_CHUNK_S}), worst RTF {worst:.2f} (<= {TARGET_RTF})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
