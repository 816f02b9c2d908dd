"""Synthetic gateway logs for the observability tests: the lines `turn_done` writes, with known timings."""

from __future__ import annotations

import json
import random


def turn_done_line(i: int, rng: random.Random, ts: float, outcome: str = "stop", source: str = "speech") -> str:
    endpoint = 0.0 if source == "text" else rng.uniform(380, 460)
    first_token = rng.uniform(250, 900)
    sentence = rng.uniform(80, 400)
    tts = rng.uniform(120, 600)
    first_audio = first_token + sentence + tts
    handoff = rng.uniform(0.5, 3)
    timings = {"first_token_ms": round(first_token, 1), "tts_first_chunk_ms": round(tts, 1),
               "first_audio_ms": round(first_audio, 1), "ttfa_ms": round(endpoint + handoff + first_audio, 1),
               "llm_queue_ms": round(rng.uniform(0, 20), 1), "llm_decode_tokens": 25,
               "total_ms": round(first_audio + rng.uniform(500, 3000), 1)}
    if source == "speech":
        timings["endpoint_ms"] = round(endpoint, 1)
    return json.dumps({"ts": ts, "level": "INFO", "service": "gateway", "logger": "services.gateway.conversation.turn",
                       "session_id": "s1", "turn_id": f"t{i}", "event": "turn_done", "outcome": outcome,
                       "source": source, "reply_chars": 40, "heard_chars": 40, **timings})


def gateway_log(turns: int, seed: int = 7, runs: int = 1) -> str:
    """`runs` gateway starts, each followed by `turns` turns (a few interrupted or typed) and a stray traceback."""
    rng = random.Random(seed)
    lines: list[str] = []
    ts = 1_790_000_000.0
    for run in range(runs):
        lines.append(json.dumps({"ts": ts, "level": "INFO", "service": "gateway", "logger": "services.gateway.server",
                                 "session_id": "", "turn_id": "", "event": "listening",
                                 "address": "http://127.0.0.1:8000"}))
        for i in range(turns):
            ts += 5
            outcome = "interrupted" if i % 7 == 3 else "stop"
            lines.append(turn_done_line(i, rng, ts, outcome, "text" if i % 5 == 4 else "speech"))
        lines.append("Traceback (most recent call last):")
    return "\n".join(lines) + "\n"
