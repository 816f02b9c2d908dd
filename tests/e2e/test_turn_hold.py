"""The semantic end of turn on the real stack, for a client that keeps streaming held turns (`turn_hold`): the
real vad with the smart-turn model judges the utterance, the real gateway tells the client, the continuation joins
the same utterance, and the llm hears all of it in one turn."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator

from services.gateway.client import GatewayClient
from tests.e2e.test_turns import turn_log
from tools.stack import RealStack

RATE = 16000


@contextlib.asynccontextmanager
async def turn_hold_session(url: str) -> AsyncIterator[GatewayClient]:
    """A session of a client with its own VAD that keeps streaming an utterance the server holds open."""
    client = GatewayClient(url)
    try:
        await client.connect(client_vad=True, turn_hold=True)
        yield client
    finally:
        await client.close()


def silence(ms: int) -> bytes:
    return bytes(2 * RATE * ms // 1000)


def ms_of(pcm16: bytes) -> float:
    return len(pcm16) / 2 / RATE * 1000


async def test_a_filler_ended_fragment_is_held_and_its_continuation_makes_one_turn(real_stack: RealStack,
                                                                                 utterance) -> None:
    fragment, rest = utterance("So I was thinking, um, uh"), utterance("we could go to the beach tomorrow.")
    # More silence than SOTTO_VAD_MIN_SILENCE_MS: silence alone would end the turn here; the model holds it.
    pause = silence(600)
    async with turn_hold_session(real_stack.ws_url) as client:
        assert client.ready["turn"]["semantic"] is True, client.ready["turn"]
        ts0 = time.time() * 1000
        await client.send_audio(fragment + pause, ts0)
        await client.send(type="audio.end")
        seen = []
        while not seen or seen[-1] != "turn.hold":
            item = await client.next_event(60)
            if isinstance(item, dict) and item["type"] != "health":
                seen.append(item["type"])
        assert "speech.ended" not in seen and "turn.started" not in seen, seen
        await client.send_audio(rest + silence(800), ts0 + ms_of(fragment + pause))
        await client.send(type="audio.end")
        record = await client.collect_turn(time.monotonic(), timeout=120)
    types = [t for t in record.types if t not in ("health", "turn.hold")]
    assert types.count("speech.ended") == 1 and types.count("turn.started") == 1, types
    started = next(e for e in record.events if e["type"] == "turn.started")
    assert started["source"] == "speech" and started["audio_ms"] >= ms_of(fragment + pause + rest) - 100, started
    request = turn_log(real_stack, "llm", record.done["turn_id"], "generate_request")
    assert request["audio_bytes"] >= len(fragment + pause + rest) - 2 * RATE // 10, request  # the whole utterance


async def test_a_complete_question_ends_without_being_held(real_stack: RealStack, utterance) -> None:
    question = utterance("What is the capital of France?")
    async with turn_hold_session(real_stack.ws_url) as client:
        await client.send_audio(question + silence(300))
        await client.send(type="audio.end")
        record = await client.collect_turn(time.monotonic(), timeout=120)
    types = [t for t in record.types if t != "health"]
    assert "turn.hold" not in types and types.index("speech.ended") < types.index("turn.started"), types
