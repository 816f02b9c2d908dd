"""A held turn ended early on complete words (fake peers): when the vad's turn model holds a pause, a text-only
model's turn begins as soon as the recogniser's words so far are a complete sentence, not when the hold runs out;
unfinished or unsure words leave the hold alone; speech that goes on before the answer is heard joins the turn."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from tests.gateway.conftest import silence, speech
from tests.gateway.test_hearing import TEXT_ONLY, ready_client

pytestmark = pytest.mark.timeout(60)
EARLY_END = {**TEXT_ONLY, "early_end": True}  # SOTTO_GATEWAY_EARLY_END (off by default)
HOLD_MS = 1500  # the fake vad holds a pause for this much silence, as the real one does by default


async def held_utterance(stack, connect, words: str, audio_input: bool = False, seconds: float = 1.0):
    """A client whose utterance the vad now holds: speech, then less silence than the hold."""
    stack.vad.turn_hold_ms = HOLD_MS
    stack.asr.words = words
    client = await ready_client(connect, audio_input=audio_input)
    await client.send_audio(np.concatenate([silence(0.2), speech(seconds), silence(0.4)]), ts0=5_000_000.0)
    await client.wait_for("turn.hold")
    return client


@pytest.mark.parametrize("stack", [EARLY_END], indirect=True)
async def test_a_held_turn_whose_words_are_a_sentence_begins_before_the_hold_is_out(stack, connect) -> None:
    client = await held_utterance(stack, connect, "What is the capital of France?")
    done = await client.wait_for("turn.done")  # only 0.4 s of silence was ever sent: the hold is not out
    assert done["finish_reason"] == "stop" and "error" not in client.types()
    assert stack.vad.held_ends == [True] and stack.asr.asked_so_far == 1
    assert [r.user.text for r in stack.llm.requests] == ["What is the capital of France?"]
    assert client.types().count("speech.ended") == 1


@pytest.mark.parametrize("stack", [EARLY_END], indirect=True)
@pytest.mark.parametrize("words", ["I went to the shop and", "Tell me about the", "the weather in Paris today",
                                   "Agent logged in."])
async def test_unfinished_or_unsure_words_leave_the_hold_to_run_out(stack, connect, words: str) -> None:
    client = await held_utterance(stack, connect, words)
    await asyncio.sleep(0.8)  # words, if they could end it, would have by now
    assert "speech.ended" not in client.types() and "turn.started" not in client.types()
    assert stack.asr.asked_so_far == 1 and stack.vad.held_ends == []
    await client.send_audio(silence(1.3), ts0=5_001_600.0)  # the rest of the hold: the vad ends the turn
    done = await client.wait_for("turn.done")
    assert done["finish_reason"] == "stop" and [r.user.text for r in stack.llm.requests] == [words]


@pytest.mark.parametrize("stack", [EARLY_END], indirect=True)
async def test_speech_that_resumes_while_the_words_come_is_not_cut(stack, connect) -> None:
    """The vad ends the utterance only while it still holds it: the user went on meanwhile."""
    stack.asr.so_far_delay_s = 0.6
    client = await held_utterance(stack, connect, "Hi there.")
    await client.send_audio(speech(1.0), ts0=5_001_600.0)  # still speaking when the words come
    await asyncio.sleep(0.8)
    assert stack.vad.held_ends == [False] and "speech.ended" not in client.types()
    assert "turn.started" not in client.types()
    await client.send_audio(silence(2.0), ts0=5_002_600.0)
    await client.wait_for("turn.done")
    assert client.types().count("turn.started") == 1 and len(stack.llm.requests) == 1


@pytest.mark.parametrize("stack", [{"llm": {"audio_input": False, "first_delay_s": 1.5}, "early_end": True}],
                         indirect=True)
async def test_a_sentence_pause_cut_early_is_joined_when_the_user_goes_on(stack, connect) -> None:
    """ "Hi there." … "Can you tell me what a rainbow is?": the turn begins at the pause, and the rest, said before
    any of its answer was heard, makes one turn of both."""
    client = await held_utterance(stack, connect, "Hi there.")
    first = await client.wait_for("turn.started")
    stack.asr.words = "Can you tell me what a rainbow is?"
    await client.send_audio(np.concatenate([speech(1.0), silence(0.4)]), ts0=5_001_600.0)  # ended by its words
    done = await client.wait_for("turn.done", count=2)
    assert done["finish_reason"] == "stop" and "error" not in client.types(), client.events
    assert [e["turn_id"] for e in client.events if e["type"] == "turn.resumed"] == [first["turn_id"]]
    assert stack.llm.requests[-1].user.text == "Hi there. Can you tell me what a rainbow is?"
    await client.send(type="text", text="Thanks.")
    await client.wait_for("turn.done", count=3)
    history = stack.llm.requests[-1].history
    assert [h.text for h in history] == ["Hi there. Can you tell me what a rainbow is?", "Hello there. How are you?"]


@pytest.mark.parametrize("stack", [TEXT_ONLY], indirect=True)
async def test_at_the_defaults_the_hold_runs_out(stack, connect) -> None:
    client = await held_utterance(stack, connect, "What is the capital of France?")
    await asyncio.sleep(0.8)
    assert "turn.started" not in client.types() and stack.asr.asked_so_far == 0


@pytest.mark.parametrize("stack", [{"early_end": True}], indirect=True)
async def test_a_model_that_hears_the_audio_is_not_ended_by_words(stack, connect) -> None:
    """Its words come after the answer starts (the recogniser must not slow the reply): the vad's hold stands."""
    client = await held_utterance(stack, connect, "What is the capital of France?", audio_input=True)
    await asyncio.sleep(0.8)
    assert "turn.started" not in client.types() and stack.asr.asked_so_far == 0
