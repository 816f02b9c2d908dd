"""The llm service beside the engine it wraps: time to first token, decode speed and cancel latency through
gRPC, next to the same engine in this process and `litert_lm.Benchmark` on the same model and token counts.

Run on the text stack while it is otherwise idle. Rounds of one turn each way, interleaved, so a machine that
drifts drifts for all three. The service is timed from the client (call start -> first text delta; decode
speed from the deltas after the first); the in-process turns go through the same request translation
(`services.llm.wire`), so the two differ by the service layer (gRPC, asyncio, executor hop) and the
in-process engine differs from `litert_lm.Benchmark` by LiteRT-LM's conversation API (chat template,
tokenising). Cancel latency is the service's own `sotto_llm_cancel_seconds` (the call ends -> engine free).
"""

from __future__ import annotations

import statistics
import tempfile
import time

import grpc

from services.llm.engine import TextDelta
from services.llm.wire import to_engine_request
from sotto.v1 import llm_pb2, llm_pb2_grpc
from tools.bench.direct import DirectPath

# A question whose greedy answer runs past the decoded token count, so every turn decodes exactly that many.
PROMPT = "Explain in detail how a bicycle works, part by part, from the pedals to the wheels."


def _request(direct: DirectPath, decode: int) -> llm_pb2.GenerateRequest:
    return llm_pb2.GenerateRequest(system_prompt=direct.system_prompt, user=llm_pb2.UserContent(text=PROMPT),
                                   sampling=llm_pb2.Sampling(max_new_tokens=decode, top_k=1))


def _rates(started: float, stamps: list[float], prefill: int, decode: int) -> dict:
    """Deltas are detokenised pieces: tokens are counted by the engine, timed by the deltas."""
    decode_s = stamps[-1] - stamps[0]
    return {"ttft_ms": (stamps[0] - started) * 1000, "prefill_tokens": prefill, "decode_tokens": decode,
            "decode_tokens_per_s": (decode - 1) / decode_s if decode_s > 0 else 0.0}


def service_turn(stub: llm_pb2_grpc.LlmServiceStub, request: llm_pb2.GenerateRequest) -> dict:
    started, stamps, done = time.perf_counter(), [], None
    for event in stub.Generate(request, timeout=120):
        if event.HasField("text_delta"):
            stamps.append(time.perf_counter())
        else:
            done = event.done
    if done is None or not stamps:
        raise RuntimeError("the llm service sent no text or no final event")
    return _rates(started, stamps, done.timings.prefill_tokens, done.timings.decode_tokens)


def in_process_turn(direct: DirectPath, request: llm_pb2.GenerateRequest) -> dict:
    started, stamps, finished = time.perf_counter(), [], None
    for event in direct.llm.generate(to_engine_request(request, direct.defaults)):
        if isinstance(event, TextDelta):
            stamps.append(time.perf_counter())
        else:
            finished = event
    return _rates(started, stamps, finished.prefill_tokens, finished.decode_tokens)


def litert_benchmark(model: str, threads: int | None, prefill: int, decode: int) -> dict:
    import litert_lm

    with tempfile.TemporaryDirectory(prefix="sotto-bench-litert-") as cache:  # else it caches beside the model
        bench = litert_lm.Benchmark(model, litert_lm.Backend.CPU(thread_count=threads), prefill_tokens=prefill,
                                    decode_tokens=decode, max_num_tokens=prefill + decode + 16, cache_dir=cache)
        info = bench.run()
    return {"ttft_ms": info.time_to_first_token_in_second * 1000, "prefill_tokens": info.last_prefill_token_count,
            "decode_tokens": info.last_decode_token_count, "decode_tokens_per_s": info.last_decode_tokens_per_second}


def _cancel_turn(stub: llm_pb2_grpc.LlmServiceStub, request: llm_pb2.GenerateRequest, after_deltas: int = 5) -> None:
    call = stub.Generate(request, timeout=120)
    seen = 0
    for event in call:
        seen += event.HasField("text_delta")
        if seen >= after_deltas:
            call.cancel()
            break


def _over(measured: dict, reference: dict) -> dict:
    """How much slower `measured` is than `reference`: TTFT, and time per decoded token (fractions)."""
    return {"ttft": round(measured["ttft_ms"] / reference["ttft_ms"] - 1, 4),
            "decode_time": round(reference["decode_tokens_per_s"] / measured["decode_tokens_per_s"] - 1, 4)}


def measure(stack, direct: DirectPath, model: str, threads: int | None, turns: int = 8, decode: int = 64,
            cancels: int = 4) -> dict:
    """`stack`: the running text stack (its llm service serves `model`); `direct`: the same engine here."""
    request = _request(direct, decode)
    with grpc.insecure_channel(f"127.0.0.1:{stack.ports['SOTTO_LLM_PORT']}") as channel:
        stub = llm_pb2_grpc.LlmServiceStub(channel)
        warm = service_turn(stub, request)
        in_process_turn(direct, request)
        rows: dict[str, list[dict]] = {"service": [], "in_process": [], "litert_benchmark": []}
        for _ in range(turns):
            rows["service"].append(service_turn(stub, request))
            rows["in_process"].append(in_process_turn(direct, request))
            rows["litert_benchmark"].append(litert_benchmark(model, threads, warm["prefill_tokens"],
                                                             warm["decode_tokens"]))
        cancel = [stack.metric("llm", f"sotto_llm_cancel_seconds_{k}") for k in ("sum", "count")]
        for _ in range(cancels):
            _cancel_turn(stub, _request(direct, 1024))
            service_turn(stub, _request(direct, 1))  # waits for the engine: the next cancel starts from idle
        cancel = [stack.metric("llm", f"sotto_llm_cancel_seconds_{k}") - v for k, v in zip(("sum", "count"), cancel)]
    medians = {path: {k: round(statistics.median(r[k] for r in rs), 1) for k in rs[0]} for path, rs in rows.items()}
    return {"model": model.rsplit("/", 1)[-1], "threads": threads, "turns": turns, "prompt": PROMPT, **medians,
            "service_layer": _over(medians["service"], medians["in_process"]),
            "over_litert_benchmark": _over(medians["service"], medians["litert_benchmark"]),
            "cancels": int(cancel[1]), "cancel_ms_mean": round(cancel[0] / cancel[1] * 1000, 1) if cancel[1] else None}


def print_result(r: dict) -> None:
    print(f"\nLLM service vs engine ({r['model']}, {r['threads']} threads, {r['turns']} turns each, medians)")
    print(f"{'':24}{'prefill':>8}{'decode':>8}{'TTFT ms':>10}{'decode tok/s':>14}")
    for path, label in (("service", "service (gRPC client)"), ("in_process", "engine in this process"),
                        ("litert_benchmark", "litert_lm.Benchmark")):
        row = r[path]
        print(f"{label:24}{row['prefill_tokens']:>8.0f}{row['decode_tokens']:>8.0f}{row['ttft_ms']:>10.1f}"
              f"{row['decode_tokens_per_s']:>14.1f}")
    for key, label in (("service_layer", "the service over the same engine in process"),
                       ("over_litert_benchmark", "the service over litert_lm.Benchmark")):
        print(f"{label}: TTFT {r[key]['ttft']:+.1%}, decode time per token {r[key]['decode_time']:+.1%}")
    print(f"cancel -> engine free: {r['cancel_ms_mean']} ms mean over {r['cancels']} cancels mid-decode")
