"""Each model service over gRPC against the same engine in this process, on tiny inputs, alternating.

With model compute kept small (a one-token reply, a two-word sentence), the difference per pair is the
service's own cost (gRPC, servicer, executor hop) at millisecond resolution, which whole turns cannot give
on a busy machine: there synthesis of a first sentence varies by hundreds of ms from turn to turn.
"""

from __future__ import annotations

import asyncio
import time

import grpc

from tools.bench import stats
from tools.bench.direct import DirectPath
from services.llm.engine import TextDelta
from sotto.v1 import llm_pb2, llm_pb2_grpc, tts_pb2, tts_pb2_grpc

PROMPT = "Say hi."
SENTENCE = "Hi there."


async def _service_llm(stub, system_prompt: str) -> float:
    request = llm_pb2.GenerateRequest(session_id="", system_prompt=system_prompt,
                                      user=llm_pb2.UserContent(text=PROMPT),
                                      sampling=llm_pb2.Sampling(max_new_tokens=1))
    started = time.perf_counter()
    first = None
    async for event in stub.Generate(request, timeout=30):
        if first is None and event.text_delta:
            first = time.perf_counter()
    return (first - started) * 1000 if first else float("nan")


async def _service_tts(stub, voice: str) -> float:
    started = time.perf_counter()
    call = stub.Synthesize(tts_pb2.SynthesizeRequest(text=SENTENCE, config=tts_pb2.VoiceConfig(voice=voice)),
                           timeout=30)
    await call.read()
    elapsed = (time.perf_counter() - started) * 1000
    call.cancel()
    return elapsed


def _direct_llm(direct: DirectPath) -> float:
    request = direct.request(text=PROMPT)
    request = type(request)(**{**request.__dict__, "sampling": type(request.sampling)(
        **{**request.sampling.__dict__, "max_new_tokens": 1})})
    started = time.perf_counter()
    first = None
    for event in direct.llm.generate(request):
        if first is None and isinstance(event, TextDelta):
            first = time.perf_counter()
    return (first - started) * 1000 if first else float("nan")


def _direct_tts(direct: DirectPath) -> float:
    started = time.perf_counter()
    chunks = direct.tts.synthesize(SENTENCE, direct.voice)
    next(chunks)
    elapsed = (time.perf_counter() - started) * 1000
    chunks.close()
    return elapsed


def measure(ports: dict[str, int], direct: DirectPath, pairs: int = 6) -> dict:
    """`pairs` alternating (service, engine) calls per model; the first pair of each is a warm-up."""
    async def service(fn, *args):
        port = ports[f"SOTTO_{fn.__name__.split('_')[-1].upper()}_PORT"]
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = (llm_pb2_grpc.LlmServiceStub if fn is _service_llm else tts_pb2_grpc.TtsServiceStub)(channel)
            return await fn(stub, *args)

    out = {}
    for name, svc, svc_args, eng in (("llm_ttft", _service_llm, (direct.system_prompt,), _direct_llm),
                                     ("tts_first_chunk", _service_tts, (direct.voice,), _direct_tts)):
        rows = []
        for i in range(pairs + 1):
            s = asyncio.run(service(svc, *svc_args))
            d = eng(direct)
            if i:
                rows.append((s, d))
        out[name] = {"service_ms": stats.summary(s for s, _ in rows), "engine_ms": stats.summary(d for _, d in rows),
                     "overhead_ms": stats.summary(s - d for s, d in rows)}
    out["note"] = (f"tiny inputs ({PROMPT!r}, one token; {SENTENCE!r}); each service call opens its own channel, "
                   "so channel setup is included")
    return out
