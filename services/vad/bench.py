"""Cost of the VAD engine on this machine: per 512-sample window, single stream and batched,
and how many real-time 16 kHz streams one core sustains.

    python -m services.vad.bench [--streams 100] [--seconds 5] [--chunk-ms 20]

Everything runs on one thread (ORT intra-op threads = 1), so the figures are per core.
A real-time stream needs one window every 32 ms, hence streams per core = 32 ms / cost.
"""

from __future__ import annotations

import argparse
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
    began = time.perf_counter()
    for _ in range(calls):
        _, state = model.infer(frames, state, RATE)
    return (time.perf_counter() - began) * 1000 / (calls * batch)


def streams_one_by_one(model: SileroVad, streams: int, seconds: float, chunk_ms: float) -> float:
    """ms per window through ``VadStream.push`` (framing + endpointing included)."""
    audio = [_audio(seconds, seed) for seed in range(streams)]
    chunk = int(RATE * chunk_ms / 1000)
    vads = [model.open_stream() for _ in range(streams)]
    began = time.perf_counter()
    for offset in range(0, len(audio[0]), chunk):
        for vad, samples in zip(vads, audio):
            vad.push(samples[offset : offset + chunk], capture_ms=offset / 16)
    elapsed = time.perf_counter() - began
    for vad in vads:
        vad.close()
    return elapsed * 1000 / (streams * (len(audio[0]) // WINDOW))


def streams_batched(model: SileroVad, streams: int, seconds: float, chunk_ms: float) -> float:
    """ms per window through ``SileroVad.push_batch`` (all streams in one call per tick)."""
    audio = [_audio(seconds, seed) for seed in range(streams)]
    chunk = int(RATE * chunk_ms / 1000)
    vads = [model.open_stream() for _ in range(streams)]
    began = time.perf_counter()
    for offset in range(0, len(audio[0]), chunk):
        model.push_batch([(vad, samples[offset : offset + chunk], offset / 16) for vad, samples in zip(vads, audio)])
    elapsed = time.perf_counter() - began
    for vad in vads:
        vad.close()
    return elapsed * 1000 / (streams * (len(audio[0]) // WINDOW))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--streams", type=int, default=100)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--chunk-ms", type=float, default=20.0, help="size of each pushed chunk")
    args = parser.parse_args()

    model = SileroVad()
    model.warm_up()
    print(f"model {model.model_path}")
    print("bare model (InferenceSession.run), ms per window:")
    for batch in (1, 4, 8, 16, 32, 64):
        cost = model_only(model, batch)
        print(f"  batch {batch:>3}: {cost:.4f} ms  -> {WINDOW_MS / cost:6.0f} streams/core")
    print(f"{args.streams} streams x {args.seconds:g} s, {args.chunk_ms:g} ms chunks, ms per window incl. framing + endpointing:")
    for name, run in (("one by one (push)", streams_one_by_one), ("batched (push_batch)", streams_batched)):
        cost = run(model, args.streams, args.seconds, args.chunk_ms)
        print(f"  {name:<21}: {cost:.4f} ms  -> {WINDOW_MS / cost:6.0f} real-time streams/core")


if __name__ == "__main__":
    main()
