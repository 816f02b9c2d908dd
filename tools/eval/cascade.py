"""Spoken turns through the real stack (tools.stack): the cascade's time to first audio with its stages, and what
recognition costs beside a model that hears the audio itself.

- cascade: the offline SmolLM2 (text only), so each spoken turn is recognised, then answered. Stages, from the end
  of speech: `endpoint` (the vad's decision), `asr` (end of speech → words), the llm's first token, the first
  sentence's synthesis. Run with recognition while the user speaks and without it (SOTTO_ASR_PARTIAL_INTERVAL_MS=0).
- beside: the tiny multimodal Gemma fixture, which hears the WAV; the same turns with the asr service reachable and
  with the gateway pointed at a port where nothing listens (no recognition at all).
Turns are one conversation per run, spoken in real time (20 ms frames) with 0.8 s of silence after each, and timed
by the gateway.
"""

from __future__ import annotations

import asyncio
import tempfile
from pathlib import Path

import numpy as np

from services.gateway.client import GatewayClient
from services.llm.loading import OFFLINE_MODEL
from tools.bench.stats import summary
from tools.eval.corpus import Clip
from tools.stack import TINY_LLM, free_port, model_dir, start_stack, stop_stack

SMOLLM2 = model_dir() / "offline" / OFFLINE_MODEL
STAGES = ("ttfa_ms", "endpoint_ms", "asr_ms", "first_token_ms", "tts_first_chunk_ms", "first_audio_ms")


def run_turns(clips: list[Clip], **env: str) -> dict:
    """Start a stack with `env`, speak each clip as a turn in its own session, stop it; figures per stage."""
    with tempfile.TemporaryDirectory(prefix="sotto-eval-") as tmp:
        stack = start_stack(Path(tmp), **env)
        try:
            turns = asyncio.run(_speak_all(stack.ws_url, clips))
        finally:
            stop_stack(stack)
    stages = {stage: summary(t["timings"].get(stage) for t in turns) for stage in STAGES}
    # The llm's share of the first token, once the words are known (the cascade's first token waits for them).
    stages["llm_first_token_after_words_ms"] = summary(
        t["timings"]["first_token_ms"] - t["timings"].get("asr_ms", 0.0) for t in turns
        if "first_token_ms" in t["timings"] and env.get("SOTTO_LLM_MODEL") == str(SMOLLM2))
    return {"turns": len(turns), "answered": sum(1 for t in turns if "ttfa_ms" in t["timings"]),
            "stages": stages, "client_ttfa_ms": summary(t["client_ttfa_ms"] for t in turns),
            "heard": [t["heard"] for t in turns]}


async def _speak_all(url: str, clips: list[Clip]) -> list[dict]:
    """One conversation: each clip after the previous answer, with a second of quiet microphone in between."""
    out = []
    async with GatewayClient(url) as client:
        await client.connect()
        for clip in clips:
            await client.send_audio(np.zeros(16 * 1000, dtype="<i2").tobytes(), realtime=True)
            record = await client.spoken_turn(clip.speech.astype("<i2").tobytes(), realtime=True, timeout=120)
            heard = next((e.get("text") for e in record.events if e["type"] == "transcript"), None)
            out.append({"timings": record.done.get("timings", {}), "client_ttfa_ms": record.client_ttfa_ms,
                        "heard": heard, "finish": record.done.get("finish_reason")})
            print(f"  ttfa {out[-1]['timings'].get('ttfa_ms', '-')} ms, asr {out[-1]['timings'].get('asr_ms', '-')}"
                  f" ms: {heard!r}", flush=True)
    return out


def cascade(clips: list[Clip], partials: bool) -> dict:
    if not SMOLLM2.exists():
        raise FileNotFoundError(f"{SMOLLM2} is missing: `make models-offline` builds the offline SmolLM2")
    interval = {} if partials else {"SOTTO_ASR_PARTIAL_INTERVAL_MS": "0"}
    return {"model": SMOLLM2.name, "partials": partials,
            **run_turns(clips, SOTTO_LLM_MODEL=str(SMOLLM2), SOTTO_LLM_MAX_NEW_TOKENS="24", **interval)}


def beside(clips: list[Clip], recognition: bool) -> dict:
    off = {} if recognition else {"SOTTO_ASR_ADDR": f"127.0.0.1:{free_port()}"}  # nothing listens there
    return {"model": TINY_LLM.name, "recognition": recognition, **run_turns(clips, SOTTO_LLM_MODEL=str(TINY_LLM),
                                                                            **off)}
