"""Each component alone, in this process: VAD cost per window, LLM time to first token and decode speed
(our engine beside litert_lm.Benchmark), TTS first chunk and real-time factor, and gRPC cost per message."""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc

from sotto.v1 import tts_pb2


def vad(calls: int = 2000, streams: int = 20, seconds: float = 3.0) -> dict:
    """Silero per 512-sample window (CPU ms of one thread): bare model, batched, and through VadStream."""
    from services.vad import bench
    from services.vad.engine import SileroVad

    model = SileroVad()
    single = bench.model_only(model, 1, calls)
    batched = bench.model_only(model, 8, calls)
    stream = bench.streams_one_by_one(model, streams, seconds, 20)
    return {"model_ms_per_window": round(single, 4), "model_batch8_ms_per_window": round(batched, 4),
            "stream_ms_per_window": round(stream, 4), "window_ms": bench.WINDOW_MS,
            "realtime_streams_per_core": round(bench.WINDOW_MS / stream) if stream else None}


def llm(model_path: str, threads: int | None, prefill_tokens: int = 64, decode_tokens: int = 64,
        engine_rows: list[dict] | None = None) -> dict:
    """litert_lm.Benchmark on the model (fixed prefill/decode token counts) beside what our engine measured."""
    import litert_lm

    with tempfile.TemporaryDirectory(prefix="sotto-bench-litert-") as cache:  # else it caches beside the model
        bench = litert_lm.Benchmark(model_path, litert_lm.Backend.CPU(thread_count=threads),
                                    prefill_tokens=prefill_tokens, decode_tokens=decode_tokens,
                                    max_num_tokens=prefill_tokens + decode_tokens + 16, cache_dir=cache)
        info = bench.run()
    out = {"model": Path(model_path).name, "threads": threads,
           "litert_benchmark": {"prefill_tokens": info.last_prefill_token_count,
                                "decode_tokens": info.last_decode_token_count,
                                "ttft_ms": round(info.time_to_first_token_in_second * 1000, 1),
                                "prefill_tokens_per_s": round(info.last_prefill_tokens_per_second, 1),
                                "decode_tokens_per_s": round(info.last_decode_tokens_per_second, 1),
                                "init_s": round(info.init_time_in_second, 2)}}
    if engine_rows:
        out["engine"] = {
            "ttft_ms_p50": round(statistics.median(r["first_token_ms"] for r in engine_rows), 1),
            "decode_tokens_per_s_p50": round(statistics.median(r["decode_tokens_per_s"] for r in engine_rows), 1),
            "prefill_tokens_p50": statistics.median(r["prefill_tokens"] for r in engine_rows),
            "decode_tokens_p50": statistics.median(r["decode_tokens"] for r in engine_rows),
            "turns": len(engine_rows)}
    return out


def tts(engine, voice: str, repeat: int = 2, answers: tuple[str, ...] = ("short", "medium")) -> dict:
    """Kokoro ONNX first chunk and RTF (services/tts/bench.py), plus Kokoro MLX where it can run."""
    from services.tts import bench

    rows = bench.bench(engine, voice, list(answers), repeat)
    out = {"onnx": {r["answer"]: {k: round(v, 3) if isinstance(v, float) else v for k, v in r.items()
                                  if k not in ("engine", "answer")} for r in rows}}
    out["mlx"] = _mlx()
    return out


def _mlx(timeout_s: float = 120.0) -> dict:
    """MLX is for Apple Silicon; on a Linux CPU it is far slower than real time, so: one tiny sentence at most."""
    if importlib.util.find_spec("mlx") is None or importlib.util.find_spec("kokoro_mlx") is None:
        return {"skipped": "mlx / kokoro-mlx are not installed here (the tts-mlx extra); MLX targets Apple "
                           "Silicon and is far slower than real time on a Linux CPU"}
    code = ("import time,os;from pathlib import Path;from services.tts.engine import KokoroMlx;"
            "k=Path(os.environ.get('SOTTO_MODEL_DIR',Path.home()/'.cache/sotto/models'))/'kokoro-kit'/'mlx';"
            "e=KokoroMlx(k);t=time.perf_counter();n=sum(c.samples for c in e.synthesize('Hi there.', 'jf_alpha'));"
            "w=time.perf_counter()-t;print(w, n/24000)")
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
        wall, audio = map(float, done.stdout.split()[-2:])
    except subprocess.TimeoutExpired:
        return {"skipped": f"a tiny sentence did not finish within {timeout_s:.0f} s on this CPU"}
    except ValueError:
        return {"skipped": "kokoro-mlx failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]}
    return {"text": "Hi there.", "total_s": round(wall, 2), "audio_s": round(audio, 2), "rtf": round(wall / audio, 2)}


def _identity(b: bytes) -> bytes:
    return b


async def _grpc_echo(messages: int, payload: bytes) -> dict:
    """A loopback grpc.aio bidi echo: ping-pong round trips, and a one-way server stream like TTS audio."""
    async def echo(request_iterator, context):
        async for item in request_iterator:
            yield item

    async def stream(request, context):
        for _ in range(messages):
            yield payload

    handler = grpc.method_handlers_generic_handler("bench.Echo", {
        "Echo": grpc.stream_stream_rpc_method_handler(echo, _identity, _identity),
        "Stream": grpc.unary_stream_rpc_method_handler(stream, _identity, _identity)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handler,))
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream("/bench.Echo/Echo", _identity, _identity)(timeout=120)
            for _ in range(50):
                await call.write(payload)
                await call.read()
            rtts = []
            for _ in range(messages):
                t = time.perf_counter()
                await call.write(payload)
                await call.read()
                rtts.append((time.perf_counter() - t) * 1e6)
            await call.done_writing()
            t = time.perf_counter()
            count = 0
            async for _ in channel.unary_stream("/bench.Echo/Stream", _identity, _identity)(b"", timeout=120):
                count += 1
            streamed = (time.perf_counter() - t) * 1e6 / max(1, count)
    finally:
        await server.stop(1)
    rtts.sort()
    return {"payload_bytes": len(payload), "messages": messages,
            "round_trip_us_p50": round(rtts[len(rtts) // 2], 1),
            "round_trip_us_p95": round(rtts[int(len(rtts) * 0.95)], 1),
            "server_stream_us_per_message": round(streamed, 1)}


def grpc_cost(messages: int = 2000) -> dict:
    """Cost per streamed message with a real TTS AudioOut (2048 samples) as the payload."""
    chunk = tts_pb2.AudioOut(pcm16=bytes(4096), sample_rate=24000, sentence_text="Hello there.")
    return asyncio.run(_grpc_echo(messages, chunk.SerializeToString()))
