"""The llm on the GPU beside the CPU, per model: load time, first token, decode speed, and whether the greedy answers
agree, with `litert_lm.Benchmark`'s own figures for the same model and backend beside them.

    python -m tools.bench.gpu MODEL.litertlm [MODEL ...] [--turns 5] [--tokens 64] [--json out.json]

Three configurations per model: the CPU (XNNPACK, the reference), the GPU with fp32 activations (the service's
default) and the GPU with fp16 activations (LiteRT-LM's own GPU default). Engines are loaded without the service's
self-check, so the load time is the engine's alone; `agree` compares each GPU configuration's greedy replies with the
CPU's, token for token (services/llm/selfcheck.py's rule over its first SOTTO_LLM_GPU_CHECK_TOKENS tokens, and how
far they agree over the whole reply). Needs a machine with a GPU (docs/gpu.md); prints a table and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from services.llm import gpu, selfcheck
from services.llm.engine import EngineConfig, GenerateRequest, LlmEngine, Sampling, TextDelta

# Questions whose greedy answers are compared; the last runs past the decoded length, so it times decoding.
PROMPTS = ("What is the capital of France?", "Name three colours.",
           "Explain in detail how a bicycle works, part by part, from the pedals to the wheels.")
CONFIGS = (("cpu", "fp32"), ("gpu", "fp32"), ("gpu", "fp16"))


def _turn(engine: LlmEngine, prompt: str, tokens: int) -> dict:
    started, stamps, done = time.perf_counter(), [], None
    for event in engine.generate(GenerateRequest(text=prompt, sampling=Sampling.greedy(tokens))):
        if isinstance(event, TextDelta):
            stamps.append(time.perf_counter())
        else:
            done = event
    return {"text": done.text, "ids": engine.tokenize(done.text), "ttft_ms": (stamps[0] - started) * 1000 if stamps
            else None, "decode_tokens": done.decode_tokens, "decode_tokens_per_s": done.decode_tokens_per_s,
            "prefill_tokens": done.prefill_tokens}


def _litert_benchmark(model: Path, backend: str, activations: str, prefill: int, decode: int) -> dict:
    import litert_lm

    kind = litert_lm.Backend.GPU() if backend == "gpu" else litert_lm.Backend.CPU()
    with tempfile.TemporaryDirectory(prefix="sotto-bench-gpu-") as cache:
        info = litert_lm.Benchmark(str(model), kind, prefill_tokens=prefill, decode_tokens=decode,
                                   max_num_tokens=prefill + decode + 16, cache_dir=cache,
                                   activation_data_type=litert_lm.ActivationDataType.from_str(activations)).run()
    return {"init_s": round(info.init_time_in_second, 3),
            "ttft_ms": round(info.time_to_first_token_in_second * 1000, 1),
            "prefill_tokens": info.last_prefill_token_count,
            "prefill_tokens_per_s": round(info.last_prefill_tokens_per_second, 1),
            "decode_tokens": info.last_decode_token_count,
            "decode_tokens_per_s": round(info.last_decode_tokens_per_second, 1)}


def measure_config(model: Path, backend: str, activations: str, turns: int, tokens: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="sotto-bench-gpu-") as cache:
        started = time.perf_counter()
        engine = LlmEngine(EngineConfig(model_path=str(model), backend=backend, gpu_activations=activations,
                                        gpu_check=False, cache_dir=cache))
        load_s = time.perf_counter() - started
        try:
            answers = [_turn(engine, prompt, tokens) for prompt in PROMPTS]  # the first turn also compiles shaders
            timed = [_turn(engine, PROMPTS[-1], tokens) for _ in range(turns)]
        finally:
            engine.close()
    row = {"backend": backend, "activations": activations if backend == "gpu" else "fp32 (XNNPACK)",
           "load_s": round(load_s, 3),
           "ttft_ms": round(statistics.median(t["ttft_ms"] for t in timed), 1),
           "decode_tokens_per_s": round(statistics.median(t["decode_tokens_per_s"] for t in timed), 1),
           "prefill_tokens": timed[0]["prefill_tokens"], "decode_tokens": timed[0]["decode_tokens"],
           "answers": [{"prompt": p, "text": a["text"], "ids": a["ids"]} for p, a in zip(PROMPTS, answers)]}
    try:
        row["litert_benchmark"] = _litert_benchmark(model, backend, activations, row["prefill_tokens"], tokens)
    except RuntimeError as exc:
        row["litert_benchmark"] = {"error": str(exc)}
    return row


def _agreement(reference: dict, row: dict, check_tokens: int) -> dict:
    per_prompt = []
    for ref, got in zip(reference["answers"], row["answers"]):
        same, _ = selfcheck.agreement(ref["ids"], got["ids"], check_tokens)
        whole = selfcheck.agreement(ref["ids"], got["ids"], max(len(ref["ids"]), len(got["ids"])))[1]
        per_prompt.append({"prompt": ref["prompt"], "check_passes": same, "agreed_tokens": whole,
                           "of": len(ref["ids"])})
    return {"all_pass": all(p["check_passes"] for p in per_prompt), "per_prompt": per_prompt}


def run(models: list[Path], turns: int, tokens: int) -> dict:
    found = gpu.probe()
    report = {"gpu": found.device if found.usable else None, "probe_reason": found.reason, "turns": turns,
              "tokens": tokens, "check_tokens": EngineConfig.gpu_check_tokens, "models": []}
    for model in models:
        rows = []
        for backend, activations in CONFIGS:
            if backend == "gpu" and not found.usable:
                continue
            print(f"[bench.gpu] {model.name}: {backend} {activations} ...", file=sys.stderr, flush=True)
            rows.append(measure_config(model, backend, activations, turns, tokens))
        for row in rows[1:]:
            row["agree"] = _agreement(rows[0], row, EngineConfig.gpu_check_tokens)
        report["models"].append({"model": model.name, "rows": rows})
    return report


def print_report(report: dict) -> None:
    print(f"\nllm on {report['gpu'] or 'no GPU'}: {report['turns']} timed turns of {report['tokens']} greedy tokens, "
          f"medians; agree = the first {report['check_tokens']} tokens of each of {len(PROMPTS)} replies "
          "equal the CPU's")
    head = f"{'model':34}{'backend':8}{'act.':6}{'load s':>8}{'TTFT ms':>9}{'dec tok/s':>10}{'agree':>7}"
    print(head + f"{'| Benchmark: TTFT ms':>20}{'prefill/s':>10}{'decode/s':>10}")
    for entry in report["models"]:
        for row in entry["rows"]:
            agree = row.get("agree", {}).get("all_pass")
            bench = row["litert_benchmark"]
            act = row["activations"] if row["backend"] == "gpu" else "fp32"
            print(f"{entry['model'][:33]:34}{row['backend']:8}{act:6}{row['load_s']:>8.2f}{row['ttft_ms']:>9.1f}"
                  f"{row['decode_tokens_per_s']:>10.1f}{'ref' if agree is None else 'yes' if agree else 'NO':>7}"
                  f"{bench.get('ttft_ms', float('nan')):>20.1f}{bench.get('prefill_tokens_per_s', float('nan')):>10.1f}"
                  f"{bench.get('decode_tokens_per_s', float('nan')):>10.1f}")
            for answer in row["answers"]:
                print(f"    {answer['prompt'][:30]!r:34} -> {answer['text'][:70]!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--json", type=Path, help="write the full report here")
    args = parser.parse_args(argv)
    report = run(args.models, args.turns, args.tokens)
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
