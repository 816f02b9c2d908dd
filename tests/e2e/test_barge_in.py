"""Barge-in on the real stack, with answers long enough to still be running when the user cuts in.

Its own stack: the tiny model may write 400 tokens here, so both the llm and the tts calls are still busy when the
interrupt lands, and their services' metrics must show each call cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest

from services.gateway.client import GatewayClient
from tests.e2e.test_turns import turn_log
from tests.helpers import eventually
from tools.stack import RealStack, start_stack, stop_stack


@pytest.fixture(scope="module")
def long_answers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    stack = start_stack(tmp_path_factory.mktemp("barge"), SOTTO_LLM_MAX_NEW_TOKENS="400",
                        SOTTO_LLM_MAX_INFERENCE_S="30", SOTTO_LOG_CONTENT="true")
    yield stack
    stop_stack(stack)


def cancelled(stack: RealStack) -> tuple[float, float]:
    llm = stack.metric("llm", "sotto_llm_cancelled_total")
    tts = stack.metric("tts", "sotto_rpc_total", method="SynthesizeStream", code="CANCELLED")
    return llm, tts


async def _drain_until_done(client: GatewayClient, turn_id: str, cut_at: float) -> tuple[dict, int]:
    late = 0
    while True:
        item = await client.next_event(60)
        if isinstance(item, bytes):
            late += time.monotonic() - cut_at > 0.1
        elif item["type"] == "turn.done" and item["turn_id"] == turn_id:
            return item, late


async def test_interrupt_cancels_the_running_llm_and_tts_calls(long_answers: RealStack) -> None:
    llm_before, tts_before = cancelled(long_answers)
    async with GatewayClient(long_answers.ws_url) as client:
        await client.send(type="text", text="Tell me everything about the sea.")
        first = await client.expect("text.delta", timeout=60)  # decoding has begun; 400 tokens to go
        cut_at = time.monotonic()
        await client.send(type="interrupt", turn_id=first["turn_id"], played_samples=0)
        done, late = await _drain_until_done(client, first["turn_id"], cut_at)
        assert done["interrupted"] and done["heard_text"] == ""
        assert late == 0, f"{late} audio frames arrived more than 100 ms after the interrupt"
        follow = await client.text_turn("Never mind.", timeout=120)
    # each service counts the cancellation when its call unwinds, which may come after the next turn is done
    await eventually(lambda: cancelled(long_answers) == (llm_before + 1, tts_before + 1), 30,
                     "the llm and the tts service to count exactly one cancelled call each", interval=0.2)
    request = turn_log(long_answers, "llm", follow.done["turn_id"], "generate_request")
    assert request["history_turns"] == 2  # the cut turn is in the history, with only what was heard (nothing)


async def test_speaking_over_the_answer_stops_it(long_answers: RealStack, utterance) -> None:
    """Server-side barge-in: no `interrupt` message, just speech while the answer is being played. Piper may have
    synthesised the whole answer before the speech is heard (`turn.done` came, the client still plays it): then
    `turn.cut` tells the client where it was cut; either way the history keeps only what was heard."""
    speech = utterance("Wait, stop, I have another question.")
    async with GatewayClient(long_answers.ws_url) as client:
        await client.send(type="text", text="Tell me a long story about the sea.")
        start = await client.expect("audio.start", timeout=120)
        talking = asyncio.create_task(client.send_audio(speech + bytes(32000), realtime=True))
        heard_at, late, done, cut = None, 0, None, None
        while cut is None and not (done is not None and done["interrupted"]):
            item = await client.next_event(60)
            if isinstance(item, bytes):
                late += heard_at is not None and time.monotonic() - heard_at > 0.1
            elif item["type"] == "speech.started" and heard_at is None:
                heard_at = time.monotonic()
            elif item["type"] == "turn.done" and item["turn_id"] == start["turn_id"]:
                done = item
            elif item["type"] == "turn.cut" and item["turn_id"] == start["turn_id"]:
                cut = item
        assert heard_at is not None and done is not None, "the answer's turn ended without speech being heard"
        heard = cut["heard_text"] if cut is not None else done["heard_text"]
        assert heard != done["text"] and done["text"].startswith(heard), (heard, done["text"])
        await talking
        assert late == 0, f"{late} audio frames arrived more than 100 ms after the speech was heard"
        follow = await client.collect_turn(time.monotonic(), timeout=120)
        # The vad may end the cut-in at its pause ("Wait, stop, ..."): that turn is withdrawn as the user goes on
        # (turn.resumed) and the next one answers all of it.
        if any(e["type"] == "turn.resumed" and e["turn_id"] == follow.done["turn_id"] for e in follow.events):
            follow = await client.collect_turn(time.monotonic(), timeout=120)
    assert [e for e in follow.events if e["type"] == "turn.started"][-1]["source"] == "speech"
    request = turn_log(long_answers, "llm", follow.done["turn_id"], "generate_request")
    assert request["history"].endswith(f"| {heard}"), request["history"]  # only what was heard is remembered
