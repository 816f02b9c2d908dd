"""`python -m tools.eval.answers`: how often each offline LLM answers the question set correctly, and how fast.

Each model runs in a real llm service (its own process on free loopback ports) and is asked every conversation of
tools.eval.questions over gRPC, with the gateway's system prompt and the history the gateway would send, at the
product's sampling defaults (temperature, top-p, top-k, reply cap) and one fixed seed per turn, so runs repeat.
Figures per model: accuracy overall and per category, time to first token p50/p95, decode speed, the service's peak
resident memory and the file size. Results are saved as bench/results/answers-<time>.json; docs/performance.md
summarises them.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import grpc

from services.common import config
from sotto.v1 import common_pb2, llm_pb2, llm_pb2_grpc
from tools.bench.stats import commit, machine, summary
from tools.eval.questions import CONVERSATIONS, Conversation, correct
from tools.stack import ROOT, free_port, grpc_serving, model_dir, wait_until

TURN_TIMEOUT_S = 60.0  # a generous deadline: a slow candidate is measured, not failed
SEED = 37


@contextlib.contextmanager
def llm_service(model: Path, log: Path, **extra: str) -> Iterator[tuple[str, int]]:
    """`python -m services.llm.server` with `model` on free ports, SERVING; yields (address, pid)."""
    port = free_port()
    env = {**os.environ, "SOTTO_LLM_PORT": str(port), "SOTTO_LLM_METRICS_PORT": str(free_port()),
           "SOTTO_LLM_MODEL": str(model), "SOTTO_OFFLINE": "true", **extra}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "services.llm.server"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        def serving() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"the llm service exited with {model.name}:\n" + log.read_text()[-4000:])
            return grpc_serving(f"127.0.0.1:{port}")
        wait_until(serving, 300, f"the llm service to be SERVING with {model.name}", interval=0.5)
        yield f"127.0.0.1:{port}", proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def peak_rss_mb(pid: int) -> float | None:
    """The process's peak resident memory (VmHWM), read before it stops."""
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    return None


def ask_conversation(stub: llm_pb2_grpc.LlmServiceStub, conversation: Conversation, system: str,
                     first_seed: int) -> list[dict]:
    """Ask the turns in order, each with the history so far; one row per turn."""
    session, history, rows = uuid.uuid4().hex, [], []
    for index, turn in enumerate(conversation.turns):
        request = llm_pb2.GenerateRequest(
            session_id=session, turn_id=f"t{index}", system_prompt=system, history=history,
            user=llm_pb2.UserContent(text=turn.ask), sampling=llm_pb2.Sampling(seed=first_seed + index))
        call = stub.Generate(request, timeout=TURN_TIMEOUT_S)
        text, done = [], None
        try:
            for event in call:
                if event.HasField("text_delta"):
                    text.append(event.text_delta)
                else:
                    done = event.done
        finally:
            call.cancel()
        answer = "".join(text).strip()
        history = [*history, common_pb2.Turn(role=common_pb2.Turn.ROLE_USER, text=turn.ask),
                   common_pb2.Turn(role=common_pb2.Turn.ROLE_ASSISTANT, text=answer)]
        timings = done.timings if done is not None else None
        rows.append({
            "category": conversation.category, "ask": turn.ask, "answer": answer,
            "scored": turn.accept is not None, "correct": correct(answer, turn) if turn.accept else None,
            "ttft_ms": round(timings.time_to_first_token_ms, 1) if timings else None,
            "decode_tokens_per_s": round(timings.decode_tokens_per_s, 1) if timings else None,
            "decode_tokens": timings.decode_tokens if timings else None,
            "finish": llm_pb2.FinishReason.Name(done.finish_reason).lower() if done is not None else None,
        })
        mark = {True: "ok ", False: "NO ", None: "   "}[rows[-1]["correct"]]
        print(f"  {mark} {turn.ask!r} -> {answer!r}", flush=True)
    return rows


def evaluate(model: Path, workdir: Path, max_inference_s: float | None = None) -> dict:
    """Every conversation against `model`; `max_inference_s` overrides the service's time limit per reply (the
    product's is SOTTO_LLM_MAX_INFERENCE_S), so a slow model's answers can be judged apart from its speed."""
    system = config.load(config.GatewayConfig).system_prompt
    llm = config.load(config.LlmConfig)
    rows: list[dict] = []
    started = time.monotonic()
    extra = {} if max_inference_s is None else {"SOTTO_LLM_MAX_INFERENCE_S": str(max_inference_s)}
    with llm_service(model, workdir / f"llm-{model.stem}.log", **extra) as (address, pid):
        with grpc.insecure_channel(address) as channel:
            stub = llm_pb2_grpc.LlmServiceStub(channel)
            for number, conversation in enumerate(CONVERSATIONS):
                rows += ask_conversation(stub, conversation, system, SEED + 10 * number)
        peak = peak_rss_mb(pid)
    scored = [r for r in rows if r["scored"]]
    by_category = {}
    for category in dict.fromkeys(r["category"] for r in scored):
        mine = [r for r in scored if r["category"] == category]
        by_category[category] = {"correct": sum(r["correct"] for r in mine), "of": len(mine)}
    return {
        "model": model.name, "bytes": model.stat().st_size, "peak_rss_mb": peak,
        "max_inference_s": max_inference_s or llm.max_inference_s,
        "degraded": sum(r["finish"] == "degraded" for r in rows),
        "sampling": {"temperature": llm.temperature, "top_p": llm.top_p, "top_k": llm.top_k,
                     "max_new_tokens": llm.max_new_tokens, "seed": SEED},
        "accuracy": round(sum(r["correct"] for r in scored) / len(scored), 3),
        "correct": sum(r["correct"] for r in scored), "scored": len(scored), "by_category": by_category,
        "ttft_ms": summary(r["ttft_ms"] for r in rows if r["ttft_ms"] is not None),
        "decode_tokens_per_s": summary(r["decode_tokens_per_s"] for r in rows if r["decode_tokens_per_s"]),
        "seconds": round(time.monotonic() - started, 1), "rows": rows,
    }


def rescore(path: Path) -> dict:
    """Judge a saved run's answers again by the current rules (after a rule is corrected), in place."""
    results = json.loads(path.read_text())
    turns = {t.ask: t for c in CONVERSATIONS for t in c.turns}
    for m in results["models"]:
        scored = [r for r in m["rows"] if r["scored"]]
        for row in scored:
            row["correct"] = correct(row["answer"], turns[row["ask"]])
        m["correct"] = sum(r["correct"] for r in scored)
        m["accuracy"] = round(m["correct"] / len(scored), 3)
        m["by_category"] = {c: {"correct": sum(r["correct"] for r in scored if r["category"] == c),
                                "of": sum(r["category"] == c for r in scored)}
                            for c in dict.fromkeys(r["category"] for r in scored)}
    path.write_text(json.dumps(results, indent=1))
    return results


def default_models() -> list[Path]:
    """The offline default and the candidates the kit can build, where they have been built."""
    from services.llm.loading import OFFLINE_MODEL

    found = [model_dir() / "offline" / OFFLINE_MODEL]
    found += sorted((model_dir() / "candidates").glob("*.litertlm"))
    return [m for m in found if m.is_file()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, action="append",
                        help="a .litertlm to score (repeatable; default: the offline SmolLM2 and built candidates)")
    parser.add_argument("--max-inference-s", type=float, default=None,
                        help="the llm's time limit per reply (default: the product's SOTTO_LLM_MAX_INFERENCE_S); "
                             "raise it to judge a slow model's answers apart from its speed")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    parser.add_argument("--rescore", type=Path, help="judge a saved answers-*.json again by the current rules")
    args = parser.parse_args()
    if args.rescore:
        print_summary(rescore(args.rescore))
        return
    models = args.model or default_models()
    if not models:
        parser.error("no model to score: `make models-offline` builds the offline SmolLM2")
    missing = [str(m) for m in models if not m.is_file()]
    if missing:
        parser.error(f"no such model file: {', '.join(missing)}")
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"answers-{time.strftime('%Y%m%d-%H%M%S')}.json"
    results: dict = {"machine": machine(), "commit": commit(), "models": []}
    workdir = Path(os.environ.get("TMPDIR", "/tmp"))
    for model in models:
        print(f"answers: {model.name}", flush=True)
        results["models"].append(evaluate(model, workdir, args.max_inference_s))
        path.write_text(json.dumps(results, indent=1))
    print_summary(results)
    print(f"saved {path}")


def print_summary(results: dict) -> None:
    for m in results["models"]:
        cats = ", ".join(f"{k} {v['correct']}/{v['of']}" for k, v in m["by_category"].items())
        print(f"{m['model']}: {m['correct']}/{m['scored']} correct ({m['accuracy']:.0%}; {cats}); first token "
              f"p50/p95 {m['ttft_ms']['p50']}/{m['ttft_ms']['p95']} ms; decode p50 "
              f"{m['decode_tokens_per_s']['p50']} tok/s; peak RSS {m['peak_rss_mb']} MB; {m['bytes'] / 1e6:.0f} MB; "
              f"{m.get('degraded', '?')} replies cut at the {m.get('max_inference_s', 5):g} s limit")


if __name__ == "__main__":
    main()
