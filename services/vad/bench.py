"""Cost of the VAD engine on this machine: per 512-sample window, single stream and batched,
and how many real-time 16 kHz streams one core sustains.

    python -m services.vad.bench [--streams 100] [--seconds 5] [--chunk-ms 20]
    python -m services.vad.bench --service [--streams 50] [--seconds 10]

Engine figures run on one thread (ORT intra-op threads = 1, which runs in the calling thread)
and count that thread's CPU time, so they are per core and hold on a busy machine: a real-time
stream needs one window every 32 ms, hence streams per core = 32 ms / cost. ``--service``
starts ``services.vad.server`` on free loopback ports, drives real-time paced gRPC streams at it
and reports the server process's CPU per stream (gRPC included).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time

import numpy as np

from services.vad.engine import SileroVad

RATE = 16000
WINDOW = 512
WINDOW_MS = WINDOW * 1000 / RATE


def _audio(seconds: float, seed: int) -> np.ndarray:
    """Speech-like load: a voiced tone with noise, amplitude-modulated like syllables."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t + seed)
    signal = envelope * (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(len(t)))
    return (signal * 32767).astype(np.int16)


def model_only(model: SileroVad, batch: int, calls: int = 2000) -> float:
    """ms per window for bare InferenceSession.run calls of ``batch`` windows."""
    frames = (np.random.default_rng(0).standard_normal((batch, 64 + WINDOW)) * 0.1).astype(np.float32)
    state = np.zeros((2, batch, 128), dtype=np.float32)
    for _ in range(20):
        _, state = model.infer(frames, state, RATE)
    calls = max(100, calls // batch)
    began = time.thread_time()
    for _ in range(calls):
        _, state = model.infer(frames, state, RATE)
    return (time.thread_time() - began) * 1000 / (calls * batch)


def streams_one_by_one(model: SileroVad, streams: int, seconds: float, chunk_ms: float) -> float:
    """ms per window through ``VadStream.push`` (framing + endpointing included)."""
    audio = [_audio(seconds, seed) for seed in range(streams)]
    chunk = int(RATE * chunk_ms / 1000)
    vads = [model.open_stream() for _ in range(streams)]
    began = time.thread_time()
    for offset in range(0, len(audio[0]), chunk):
        for vad, samples in zip(vads, audio):
            vad.push(samples[offset : offset + chunk], capture_ms=offset / 16)
    elapsed = time.thread_time() - began
    for vad in vads:
        vad.close()
    return elapsed * 1000 / (streams * (len(audio[0]) // WINDOW))


def streams_batched(model: SileroVad, streams: int, seconds: float, chunk_ms: float) -> float:
    """ms per window through ``SileroVad.push_batch`` (all streams in one call per tick)."""
    audio = [_audio(seconds, seed) for seed in range(streams)]
    chunk = int(RATE * chunk_ms / 1000)
    vads = [model.open_stream() for _ in range(streams)]
    began = time.thread_time()
    for offset in range(0, len(audio[0]), chunk):
        model.push_batch([(vad, samples[offset : offset + chunk], offset / 16) for vad, samples in zip(vads, audio)])
    elapsed = time.thread_time() - began
    for vad in vads:
        vad.close()
    return elapsed * 1000 / (streams * (len(audio[0]) // WINDOW))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def _paced_stream(stub, audio: bytes, chunk_ms: float) -> int:
    from sotto.v1 import vad_pb2

    chunk_bytes = int(RATE * chunk_ms / 1000) * 2

    async def requests():
        yield vad_pb2.VadRequest(settings=vad_pb2.VadSettings())
        began = time.monotonic()
        for sequence, offset in enumerate(range(0, len(audio), chunk_bytes)):
            yield vad_pb2.VadRequest(audio=vad_pb2.AudioChunk(
                pcm16=audio[offset : offset + chunk_bytes], sample_rate=RATE, sequence=sequence,
                capture_ts_ms=1 + round(sequence * chunk_ms)))
            await asyncio.sleep(max(0.0, began + (sequence + 1) * chunk_ms / 1000 - time.monotonic()))

    call = stub.StreamAudio(requests(), timeout=len(audio) / 2 / RATE + 60)
    try:
        return len([event async for event in call])
    finally:
        call.cancel()


async def _drive_service(address: str, server_pid: int, streams: int, seconds: float, chunk_ms: float) -> None:
    import grpc
    import psutil

    from sotto.v1 import vad_pb2_grpc

    server = psutil.Process(server_pid)
    audio = [_audio(seconds, seed).tobytes() for seed in range(streams)]
    cpu_before, began = sum(server.cpu_times()[:2]), time.monotonic()
    async with grpc.aio.insecure_channel(address) as channel:
        stub = vad_pb2_grpc.VadServiceStub(channel)
        await asyncio.gather(*(_paced_stream(stub, samples, chunk_ms) for samples in audio))
    wall, cpu = time.monotonic() - began, sum(server.cpu_times()[:2]) - cpu_before
    per_stream = cpu / wall / streams
    if wall > seconds * 1.1:
        print(f"  warning: the load generator fell {wall - seconds:.1f} s behind real time (CPU-starved?); "
              "the per-stream figure below understates the cost")
    print(f"  {streams} paced streams x {seconds:g} s in {chunk_ms:g} ms chunks: wall {wall:.2f} s "
          f"(lag {wall - seconds:+.2f} s), server CPU {cpu / wall:.0%} of a core, "
          f"{per_stream:.2%} per stream -> {1 / per_stream:.0f} real-time streams/core")


def service_bench(streams: int, seconds: float, chunk_ms: float) -> None:
    port, metrics_port = _free_port(), _free_port()
    env = {**os.environ, "SOTTO_VAD_PORT": str(port), "SOTTO_VAD_METRICS_PORT": str(metrics_port),
           "SOTTO_VAD_MAX_STREAMS": str(max(streams, 64)), "SOTTO_LOG_LEVEL": "WARNING"}
    server = subprocess.Popen([sys.executable, "-m", "services.vad.server"], env=env)
    try:
        import grpc
        from grpc_health.v1 import health_pb2, health_pb2_grpc

        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 30
            while True:
                try:
                    reply = health.Check(health_pb2.HealthCheckRequest(), timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.RpcError:
                    pass
                if time.monotonic() > deadline or server.poll() is not None:
                    raise SystemExit("vad server did not reach SERVING within 30 s")
                time.sleep(0.1)
        print(f"service (python -m services.vad.server, pid {server.pid}):")
        asyncio.run(_drive_service(f"127.0.0.1:{port}", server.pid, streams, seconds, chunk_ms))
    finally:
        server.terminate()
        server.wait(10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--chunk-ms", type=float, default=20.0, help="size of each pushed chunk")
    parser.add_argument("--service", action="store_true", help="measure the gRPC service instead of the engine")
    args = parser.parse_args()
    if args.service:
        service_bench(args.streams, args.seconds, args.chunk_ms)
        return

    model = SileroVad()
    model.warm_up()
    print(f"model {model.model_path}")
    print("bare model (InferenceSession.run), ms per window:")
    for batch in (1, 4, 8, 16, 32, 64):
        cost = model_only(model, batch)
        print(f"  batch {batch:>3}: {cost:.4f} ms  -> {WINDOW_MS / cost:6.0f} streams/core")
    print(f"{args.streams} streams x {args.seconds:g} s, {args.chunk_ms:g} ms chunks, "
          "ms per window incl. framing + endpointing:")
    for name, run in (("one by one (push)", streams_one_by_one), ("batched (push_batch)", streams_batched)):
        cost = run(model, args.streams, args.seconds, args.chunk_ms)
        print(f"  {name:<21}: {cost:.4f} ms  -> {WINDOW_MS / cost:6.0f} real-time streams/core")


if __name__ == "__main__":
    main()
