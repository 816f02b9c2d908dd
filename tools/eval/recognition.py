"""The asr service's word error rate, and what recognising while the user speaks saves at the end of speech.

Each clip reaches a real asr service (its own process, started here on free loopback ports) twice:
- whole: the utterance in one `Transcribe` call once it is over: what end-of-speech costs without streaming;
- streamed: paced like a live microphone (20 ms chunks), 300 ms of pre-roll before the speech and 400 ms of quiet
  after it (what the vad waits through before it ends the utterance), then `end` with the utterance's length;
  end-of-speech → words is timed from `end`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import grpc
import numpy as np

from services.asr.client import stream_utterance
from services.common import config
from sotto.v1 import asr_pb2, asr_pb2_grpc
from tools.bench.stats import summary
from tools.eval.corpus import SAMPLE_RATE, Clip, noise_floor, wer
from tools.stack import ROOT, free_port, grpc_serving, wait_until

PREROLL_S = 0.3
QUIET_AFTER_S = 0.4  # SOTTO_VAD_MIN_SILENCE_MS
PAD_S = 0.03         # SOTTO_VAD_SPEECH_PAD_MS: the utterance ends this long after the speech


@contextlib.contextmanager
def asr_service(partial_interval_ms: int, log: Path) -> Iterator[int]:
    """`python -m services.asr.server` on free ports, SERVING; yields its gRPC port."""
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, "SOTTO_ASR_PORT": str(port), "SOTTO_ASR_METRICS_PORT": str(metrics_port),
           "SOTTO_ASR_PARTIAL_INTERVAL_MS": str(partial_interval_ms),
           "SOTTO_OFFLINE": os.environ.get("SOTTO_OFFLINE", "true")}
    with open(log, "w") as out:
        proc = subprocess.Popen([sys.executable, "-m", "services.asr.server"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    try:
        def serving() -> bool:
            if proc.poll() is not None:
                raise RuntimeError("the asr service exited:\n" + log.read_text()[-4000:])
            return grpc_serving(f"127.0.0.1:{port}")
        wait_until(serving, 120, "the asr service to be SERVING", interval=0.5)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=30)


async def measure(clips: list[Clip], partial_interval_ms: int, workdir: Path) -> dict:
    cfg = config.load(config.AsrConfig, {**os.environ, "SOTTO_ASR_PARTIAL_INTERVAL_MS": str(partial_interval_ms)})
    rng = np.random.default_rng(54)
    rows = []
    with asr_service(partial_interval_ms, workdir / "asr.log") as port:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = asr_pb2_grpc.AsrServiceStub(channel)
            for clip in clips:
                rows.append(await _one(stub, clip, rng))
                print(f"  {rows[-1]['streamed_ms']:6.0f} ms streamed, {rows[-1]['whole_ms']:6.0f} ms whole: "
                      f"{rows[-1]['streamed']!r}", flush=True)
    references = [r["text"] for r in rows]
    return {
        "clips": len(rows), "partial_interval_ms": partial_interval_ms, "model": str(cfg.model or cfg.hf_repo),
        "threads": cfg.threads, "beam_size": cfg.beam_size,
        "wer_whole": wer(references, [r["whole"] for r in rows]),
        "wer_streamed": wer(references, [r["streamed"] for r in rows]),
        "wer_noisy": wer([r["text"] for r in rows if r["noisy"]], [r["whole"] for r in rows if r["noisy"]]),
        "wer_clean": wer([r["text"] for r in rows if not r["noisy"]], [r["whole"] for r in rows if not r["noisy"]]),
        "end_to_words_ms": {"whole": summary(r["whole_ms"] for r in rows),
                            "streamed": summary(r["streamed_ms"] for r in rows)},
        "covered_by_a_partial": sum(r["covered"] for r in rows),
        "partial_runs_per_clip": summary(r["partial_runs"] for r in rows),
        "rows": rows,
    }


async def _one(stub: asr_pb2_grpc.AsrServiceStub, clip: Clip, rng: np.random.Generator) -> dict:
    before, after = noise_floor(PREROLL_S, clip, rng), noise_floor(QUIET_AFTER_S, clip, rng)
    audio = np.concatenate([before, clip.speech, after]).astype("<i2")
    utterance_samples = len(before) + len(clip.speech) + int(PAD_S * SAMPLE_RATE)
    started = time.monotonic()
    whole = await stub.Transcribe(asr_pb2.TranscribeRequest(pcm16=audio[:utterance_samples].tobytes(),
                                                            sample_rate=SAMPLE_RATE), timeout=60)
    whole_ms = (time.monotonic() - started) * 1000
    await asyncio.sleep(0.2)
    ended: list[float] = []
    final = None
    pcm = audio.tobytes()
    async for event in stream_utterance(stub, pcm, realtime=True, on_sent=lambda: ended.append(time.monotonic()),
                                        utterance_samples=utterance_samples, timeout=60):
        if event.HasField("final"):
            final = event.final
    streamed_ms = (time.monotonic() - ended[0]) * 1000
    assert final is not None
    return {"text": clip.text, "voice": clip.voice, "speed": clip.speed, "noisy": clip.noisy,
            "audio_ms": round(len(clip.speech) / 16), "whole": whole.text, "whole_ms": round(whole_ms, 1),
            "streamed": final.text, "streamed_ms": round(streamed_ms, 1), "covered": final.covered,
            "partial_runs": final.partial_runs, "stable_chars": final.stable_chars}

