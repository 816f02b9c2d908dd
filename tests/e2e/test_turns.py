"""End to end over /ws on the real stack: spoken turns with a camera frame, typed turns, barge-in."""

from __future__ import annotations

import io
import time

import numpy as np
from PIL import Image

from services.gateway.client import GatewayClient
from tools.stack import RealStack


def camera_jpeg(seed: int = 0) -> bytes:
    rng = np.random.default_rng(seed)
    pixels = rng.integers(0, 255, (240, 320, 3), dtype=np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG")
    return buf.getvalue()


def turn_log(stack: RealStack, service: str, turn_id: str, event: str) -> dict:
    lines = [e for e in stack.log_events(service) if e.get("turn_id") == turn_id and e["event"] == event]
    assert lines, f"no '{event}' log line for turn {turn_id} in the {service} log"
    return lines[-1]


async def test_spoken_turn_with_a_camera_frame(real_stack: RealStack, utterance) -> None:
    speech = utterance("What do you see in front of me right now?")
    async with GatewayClient(real_stack.ws_url) as client:
        record = await client.spoken_turn(speech, [camera_jpeg(1)], timeout=120)
    types = [t for t in record.types if t != "health"]
    for earlier, later in [("speech.started", "speech.ended"), ("speech.ended", "turn.started"),
                           ("turn.started", "text.delta"), ("audio.start", "audio.done"),
                           ("audio.done", "turn.done")]:
        assert types.index(earlier) < types.index(later), types
    assert len(record.audio) >= 2048 * 2, "no audio chunk arrived"
    done = record.done
    assert done["finish_reason"] in ("stop", "length", "degraded"), done
    assert done["timings"]["ttfa_ms"] > 0 and done["timings"]["endpoint_ms"] >= 0
    request = turn_log(real_stack, "llm", done["turn_id"], "generate_request")
    assert request["images"] == 1, request  # the frame sent during the utterance reached the model
    assert request["audio_bytes"] > 2 * 16000, request  # about a second or more of the utterance
    generated = turn_log(real_stack, "llm", done["turn_id"], "generated")
    assert generated["prefill_tokens"] > 25, generated  # audio and image tokens were really prefilled


async def test_a_page_turn_starts_at_its_audio_end_not_after_silence(real_stack: RealStack, utterance) -> None:
    """The page's own VAD stops the audio when the user stops talking and sends audio.end: the server's VAD,
    which has heard only 100 ms of silence (it needs 400), ends the utterance on it, and all of it reaches the
    model."""
    speech = utterance("What time is it where you are?")
    async with GatewayClient(real_stack.ws_url) as client:
        await client.send_audio(speech + bytes(2 * 16 * 100))
        await client.send(type="audio.end")
        record = await client.collect_turn(time.monotonic(), timeout=120)
    types = [t for t in record.types if t != "health"]
    assert types.index("speech.ended") < types.index("turn.started") < types.index("turn.done"), types
    assert record.done["finish_reason"] in ("stop", "length", "degraded") and record.audio
    request = turn_log(real_stack, "llm", record.done["turn_id"], "generate_request")
    # the utterance with its 300 ms pre-roll, cut at the last sample received at the latest
    assert 0.8 * len(speech) < request["audio_bytes"] <= len(speech) + 2 * 16 * (300 + 100) + 44, request


async def test_typed_turn_works_the_same_way(real_stack: RealStack) -> None:
    async with GatewayClient(real_stack.ws_url) as client:
        record = await client.text_turn("Hello, who are you?", timeout=120)
        second = await client.text_turn("And what can you do?", timeout=120)
    types = record.types
    assert types.index("turn.started") < types.index("text.delta") < types.index("turn.done")
    assert record.audio and record.sample_rate == 24000
    audio_s = len(record.audio) / 2 / record.sample_rate
    assert 0.2 < audio_s < 60
    request = turn_log(real_stack, "llm", second.done["turn_id"], "generate_request")
    assert request["history_turns"] == 2 and request["images"] == 0 and request["audio_bytes"] == 0

