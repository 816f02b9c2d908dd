"""The llm service beside the raw engine: time to first token, decode speed and cancel latency through gRPC,
next to `litert_lm.Benchmark` on the same model, thread count and token counts.

    python -m services.llm.bench [--model FILE] [--threads 2] [--turns 15] [--decode 64] [--cancels 5] [--json OUT]

The service runs as its own process (`python -m services.llm.server`, greedy sampling so every turn decodes the
same reply) and is timed from the client: TTFT is call start -> first text delta, decode speed is the deltas'
rate after the first. Then the service is stopped and `litert_lm.Benchmark` runs in this process with exactly the
prefill and decode token counts the service's turns reported, so the rows do the same work; between the two, the
same turns on our engine adapter in this process (no gRPC) split the difference into what the service layer adds
and what LiteRT-LM's conversation API costs over its bare benchmark loop. Cancel latency is
the service's own `sotto_llm_cancel_seconds` (the call ends -> the engine is free), read from its metrics port.
Target: the service within 5 % of the raw engine on TTFT and decode speed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import config
from sotto.v1 import llm_pb2, llm_pb2_grpc

TARGET_OVERHEAD = 0.05
# A question whose greedy answer runs past --decode tokens, so every turn decodes exactly that many.
PROMPT = "Explain in detail how a bicycle works, part by part, from the pedals to the wheels."
START_TIMEOUT_S = 300


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _default_model() -> Path:
    return config.load_all({}).common.model_dir / "offline" / "smollm2-135m-instruct.litertlm"


class Service:
    """`python -m services.llm.server` on free loopback ports, greedy, with room for long replies."""

    def __init__(self, model: Path, threads: int) -> None:
        self.port, self.metrics_port = _free_port(), _free_port()
        env = {**os.environ, "SOTTO_LLM_MODEL": str(model), "SOTTO_LLM_THREADS": str(threads),
               "SOTTO_LLM_PORT": str(self.port), "SOTTO_LLM_METRICS_PORT": str(self.metrics_port),
               "SOTTO_LLM_TOP_K": "1", "SOTTO_LLM_MAX_INFERENCE_S": "120", "SOTTO_OFFLINE": "true",
               "SOTTO_LOG_LEVEL": "WARNING"}
        self.proc = subprocess.Popen([sys.executable, "-m", "services.llm.server"], env=env,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.channel = grpc.insecure_channel(f"127.0.0.1:{self.port}")
        self.stub = llm_pb2_grpc.LlmServiceStub(self.channel)

    def wait_serving(self) -> None:
        health = health_pb2_grpc.HealthStub(self.channel)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"the llm service exited with {self.proc.returncode} while loading")
            try:
                reply = health.Check(health_pb2.HealthCheckRequest(service="sotto.v1.LlmService"), timeout=1)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return
            except grpc.RpcError:
                pass
            time.sleep(0.2)
        raise SystemExit(f"the llm service was not SERVING within {START_TIMEOUT_S} s")

    def cancel_seconds(self) -> tuple[float, float]:
        """(sum, count) of sotto_llm_cancel_seconds."""
        text = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read().decode()
        found = dict(re.findall(r"^sotto_llm_cancel_seconds_(sum|count) (\S+)$", text, re.M))
        return float(found.get("sum", 0)), float(found.get("count", 0))

    def stop(self) -> None:
        self.channel.close()
        self.proc.terminate()
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _request(max_new_tokens: int) -> llm_pb2.GenerateRequest:
    return llm_pb2.GenerateRequest(session_id=uuid.uuid4().hex, user=llm_pb2.UserContent(text=PROMPT),
                                   sampling=llm_pb2.Sampling(max_new_tokens=max_new_tokens, top_k=1))


def service_turn(stub: llm_pb2_grpc.LlmServiceStub, decode: int) -> dict:
    started = time.perf_counter()
    stamps: list[float] = []
    done = None
    for event in stub.Generate(_request(decode), timeout=120):
        if event.HasField("text_delta"):
            stamps.append(time.perf_counter())
        else:
            done = event.done
    if done is None or not stamps:
        raise SystemExit("the service sent no text or no final event")
    t = done.timings
    # Deltas are detokenised pieces: count tokens from the final event, time them from the deltas.
    decode_s = stamps[-1] - stamps[0]
    return {"ttft_ms": (stamps[0] - started) * 1000, "prefill_tokens": t.prefill_tokens,
            "decode_tokens": t.decode_tokens,
            "decode_tokens_per_s": (t.decode_tokens - 1) / decode_s if decode_s > 0 else 0.0,
            "engine_ttft_ms": t.time_to_first_token_ms, "engine_decode_tokens_per_s": t.decode_tokens_per_s}


def cancel_turn(stub: llm_pb2_grpc.LlmServiceStub, after_deltas: int = 5) -> None:
    call = stub.Generate(_request(1024), timeout=120)
    seen = 0
    for event in call:
        seen += event.HasField("text_delta")
        if seen >= after_deltas:
            call.cancel()
            break


class InProcess:
    """The service's turns on services.llm.engine directly: the same adapter, no gRPC, no asyncio."""

    def __init__(self, model: Path, threads: int) -> None:
        from services.llm.engine import EngineConfig, LlmEngine

        self._cache = tempfile.TemporaryDirectory(prefix="sotto-llm-bench-")
        self.engine = LlmEngine(EngineConfig(model_path=str(model), cpu_threads=threads, time_limit_s=120,
                                             cache_dir=self._cache.name))

    def turn(self, decode: int) -> dict:
        from services.llm.engine import GenerateRequest, Sampling, TextDelta

        started, stamps, finished = time.perf_counter(), [], None
        request = GenerateRequest(text=PROMPT, sampling=Sampling.greedy(decode), session_id=uuid.uuid4().hex)
        for event in self.engine.generate(request):
            if isinstance(event, TextDelta):
                stamps.append(time.perf_counter())
            else:
                finished = event
        decode_s = stamps[-1] - stamps[0]
        return {"ttft_ms": (stamps[0] - started) * 1000, "prefill_tokens": finished.prefill_tokens,
                "decode_tokens": finished.decode_tokens,
                "decode_tokens_per_s": (finished.decode_tokens - 1) / decode_s if decode_s > 0 else 0.0}

    def close(self) -> None:
        self.engine.close()
        self._cache.cleanup()


def raw_engine(model: Path, threads: int, prefill: int, decode: int) -> dict:
    import litert_lm

    with tempfile.TemporaryDirectory(prefix="sotto-llm-bench-") as cache:  # else it caches beside the model
        bench = litert_lm.Benchmark(str(model), litert_lm.Backend.CPU(thread_count=threads), prefill_tokens=prefill,
                                    decode_tokens=decode, max_num_tokens=prefill + decode + 16, cache_dir=cache)
        info = bench.run()
    return {"ttft_ms": info.time_to_first_token_in_second * 1000, "prefill_tokens": info.last_prefill_token_count,
            "decode_tokens": info.last_decode_token_count, "decode_tokens_per_s": info.last_decode_tokens_per_second}


def _median(rows: list[dict], key: str) -> float:
    return round(statistics.median(r[key] for r in rows), 1)


def _over(measured: dict, reference: dict) -> dict:
    """How much slower `measured` is than `reference`: TTFT, and time per decoded token."""
    ttft = measured["ttft_ms"] / reference["ttft_ms"] - 1
    decode = reference["decode_tokens_per_s"] / measured["decode_tokens_per_s"] - 1
    return {"ttft": round(ttft, 4), "decode_time": round(decode, 4), "target": TARGET_OVERHEAD,
            "met": ttft <= TARGET_OVERHEAD and decode <= TARGET_OVERHEAD}


def _best(rows: list[dict]) -> dict:
    """Lowest TTFT and highest decode speed: interference on a shared machine only ever adds time."""
    return {"ttft_ms": round(min(r["ttft_ms"] for r in rows), 1),
            "decode_tokens_per_s": round(max(r["decode_tokens_per_s"] for r in rows), 1)}


def run(model: Path, threads: int, turns: int, decode: int, cancels: int) -> dict:
    """Rounds of one turn each way, interleaved, so a machine that drifts (a shared host) drifts for all three."""
    service = Service(model, threads)
    inproc = InProcess(model, threads)
    try:
        service.wait_serving()
        warm = service_turn(service.stub, decode)
        inproc.turn(decode)
        rows, direct, raws = [], [], []
        for _ in range(turns):
            rows.append(service_turn(service.stub, decode))
            direct.append(inproc.turn(decode))
            raws.append(raw_engine(model, threads, warm["prefill_tokens"], warm["decode_tokens"]))
        before = service.cancel_seconds()
        for _ in range(cancels):
            cancel_turn(service.stub)
            service_turn(service.stub, 1)  # waits for the engine: the next cancel starts from idle
        after = service.cancel_seconds()
    finally:
        inproc.close()
        service.stop()
    cancelled = after[1] - before[1]
    svc = {k: _median(rows, k) for k in ("ttft_ms", "decode_tokens_per_s", "engine_ttft_ms",
                                          "engine_decode_tokens_per_s", "prefill_tokens", "decode_tokens")}
    keys = ("ttft_ms", "decode_tokens_per_s", "prefill_tokens", "decode_tokens")
    raw = {k: _median(raws, k) for k in keys}
    local = {k: _median(direct, k) for k in keys}
    return {"model": model.name, "threads": threads, "turns": turns, "prompt": PROMPT,
            "service": svc, "in_process": local, "raw_engine": raw, "service_rows": rows, "in_process_rows": direct,
            "raw_rows": raws,
            "best": {"service": _best(rows), "in_process": _best(direct), "raw_engine": _best(raws)},
            "service_layer": _over(svc, local),
            "cancel_ms_mean": round((after[0] - before[0]) / cancelled * 1000, 1) if cancelled else None,
            "cancels": int(cancelled),
            "overhead": _over(svc, raw),
            "load_average": [round(x, 2) for x in os.getloadavg()], "cpus": os.cpu_count()}


def print_result(r: dict) -> None:
    s, d, raw, o, layer = r["service"], r["in_process"], r["raw_engine"], r["overhead"], r["service_layer"]
    print(f"{r['model']}, {r['threads']} threads, {r['turns']} turns each, medians "
          f"(load average {r['load_average'][0]} on {r['cpus']} CPUs)")
    print(f"{'':24}{'prefill':>8}{'decode':>8}{'TTFT ms':>10}{'decode tok/s':>14}")
    print(f"{'service (gRPC client)':24}{s['prefill_tokens']:>8.0f}{s['decode_tokens']:>8.0f}{s['ttft_ms']:>10.1f}"
          f"{s['decode_tokens_per_s']:>14.1f}")
    print(f"{'  engine inside it':24}{'':>16}{s['engine_ttft_ms']:>10.1f}{s['engine_decode_tokens_per_s']:>14.1f}")
    print(f"{'engine in this process':24}{d['prefill_tokens']:>8.0f}{d['decode_tokens']:>8.0f}{d['ttft_ms']:>10.1f}"
          f"{d['decode_tokens_per_s']:>14.1f}")
    print(f"{'litert_lm.Benchmark':24}{raw['prefill_tokens']:>8.0f}{raw['decode_tokens']:>8.0f}{raw['ttft_ms']:>10.1f}"
          f"{raw['decode_tokens_per_s']:>14.1f}")
    best = r["best"]
    print("best of each (least disturbed): TTFT " + ", ".join(f"{k} {v['ttft_ms']:.1f} ms" for k, v in best.items())
          + "; decode " + ", ".join(f"{k} {v['decode_tokens_per_s']:.1f}/s" for k, v in best.items()))
    print(f"service over litert_lm.Benchmark: TTFT {o['ttft']:+.1%}, decode time per token {o['decode_time']:+.1%} "
          f"(target <= {o['target']:.0%}: {'met' if o['met'] else 'NOT met'})")
    print(f"the service layer (gRPC, asyncio) over the same engine in process: TTFT {layer['ttft']:+.1%}, "
          f"decode time per token {layer['decode_time']:+.1%} ({'met' if layer['met'] else 'NOT met'}); the rest is "
          "LiteRT-LM's conversation API (chat template, tokenising) over its bare benchmark loop")
    print(f"cancel -> engine free: {r['cancel_ms_mean']} ms mean over {r['cancels']} cancels mid-decode")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, default=None, help="a .litertlm file (default: the offline SmolLM2)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--turns", type=int, default=15, help="rounds (one turn on each path per round)")
    parser.add_argument("--decode", type=int, default=64, help="tokens decoded per turn")
    parser.add_argument("--cancels", type=int, default=5)
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args(argv)
    model = args.model or _default_model()
    if not model.is_file():
        raise SystemExit(f"no model at {model}: make models-offline builds the offline one, or pass --model")
    result = run(model, args.threads, args.turns, args.decode, args.cancels)
    print_result(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
