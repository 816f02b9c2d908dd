"""One utterance stays one turn (fake peers): speech that resumes before any of the answer was sent joins the first
part, and a text-only model's words that stop mid-phrase hold the turn open for the rest."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from services.common import audio
from tests.gateway.conftest import silence, speech
from tests.gateway.test_hearing import TEXT_ONLY, ready_client

pytestmark = pytest.mark.timeout(60)
SLOW_LLM = {"llm": {"first_delay_s": 1.5}}


async def say(client, seconds: float, ts0: float) -> None:
    await client.send_audio(np.concatenate([silence(0.2), speech(seconds), silence(0.4)]), ts0=ts0)


@pytest.mark.parametrize("stack", [SLOW_LLM], indirect=True)
async def test_speech_resumed_before_the_answer_was_heard_joins_one_turn(stack, connect) -> None:
    client = await ready_client(connect, audio_input=True)
    await say(client, 1.0, ts0=5_000_000.0)
    first = await client.wait_for("turn.started")
    await say(client, 0.8, ts0=5_002_000.0)  # the user goes on while the model is still thinking
    done = await client.wait_for("turn.done", count=2)
    dropped = [e for e in client.events if e["type"] == "turn.done" and e["turn_id"] == first["turn_id"]][0]
    assert dropped["interrupted"] and dropped["heard_text"] == "" and done["finish_reason"] == "stop"
    resumed = [e for e in client.events if e["type"] == "turn.resumed"]
    assert resumed == [{"type": "turn.resumed", "turn_id": first["turn_id"]}]  # the client withdraws it
    assert client.audio_after("turn.started") == client.audio_after("audio.start")  # nothing of the first was sent
    joined = audio.read_wav(stack.llm.requests[-1].user.audio_wav)
    assert joined.duration_s >= 1.8  # both parts, heard as one

    await client.send(type="text", text="Thanks.")
    await client.wait_for("turn.done", count=3)
    history = stack.llm.requests[-1].history
    assert [h.role for h in history] == [history[0].ROLE_USER, history[0].ROLE_ASSISTANT]  # one user message
    assert history[0].text == stack.asr.words and history[1].text == "Hello there. How are you?"


async def stop_the_answer_and_go_on(connect, played_samples: int):
    """A page-like client: it speaks, stops the answer as its own VAD hears more speech (`interrupt`, saying how
    much of the answer it played), then sends that speech; returns once both turns are done, with the first's id."""
    client = await ready_client(connect, audio_input=True)
    await say(client, 1.0, ts0=5_000_000.0)
    first = await client.wait_for("turn.started")
    await client.send(type="interrupt", turn_id=first["turn_id"], played_samples=played_samples)
    await say(client, 0.8, ts0=5_002_000.0)
    await client.wait_for("turn.done", count=2)
    return client, first["turn_id"]


@pytest.mark.parametrize("stack", [SLOW_LLM], indirect=True)
async def test_a_client_that_stops_the_answer_itself_as_the_user_goes_on_gets_one_turn(stack, connect) -> None:
    """The page's own VAD sends `interrupt` as it confirms the speech, just before that speech's audio."""
    client, first = await stop_the_answer_and_go_on(connect, played_samples=0)
    assert [e["turn_id"] for e in client.events if e["type"] == "turn.resumed"] == [first]
    assert audio.read_wav(stack.llm.requests[-1].user.audio_wav).duration_s >= 1.8
    await client.send(type="text", text="Thanks.")
    await client.wait_for("turn.done", count=3)
    assert [h.text for h in stack.llm.requests[-1].history] == [stack.asr.words, "Hello there. How are you?"]


@pytest.mark.parametrize("stack", [SLOW_LLM], indirect=True)
async def test_a_client_that_says_it_played_some_of_the_answer_gets_a_barge_in_not_a_join(stack, connect) -> None:
    """The page's report of what it played decides, not the gateway's clock: its speech arrives only once its own
    VAD confirms it, so the gateway cannot tell when it began (the join withdrew heard answers in the page)."""
    client, _ = await stop_the_answer_and_go_on(connect, played_samples=4800)
    await client.flush()
    assert "turn.resumed" not in client.types()
    assert audio.read_wav(stack.llm.requests[-1].user.audio_wav).duration_s < 1.4  # the second utterance alone


async def test_speech_over_an_answer_already_playing_is_a_barge_in_not_a_join(stack, connect) -> None:
    stack.tts.chunks_per_sentence = 40
    stack.tts.chunk_delay_s = 0.02
    client = await ready_client(connect, audio_input=True)
    await say(client, 1.0, ts0=5_000_000.0)
    await client.wait_for("audio.start")
    await say(client, 0.8, ts0=5_002_000.0)
    await client.wait_for("turn.done", count=2)
    first, second = stack.llm.requests[0], stack.llm.requests[-1]
    assert audio.read_wav(second.user.audio_wav).duration_s < 1.4  # the second part alone
    assert len(second.history) == 2 and second.history[1].interrupted and first.user.audio_wav


@pytest.mark.parametrize("stack", [TEXT_ONLY], indirect=True)
async def test_words_that_stop_on_and_hold_the_turn_for_the_rest(stack, connect) -> None:
    stack.asr.words = "I went to the shop and"
    client = await ready_client(connect, audio_input=False)
    await say(client, 1.0, ts0=5_000_000.0)
    await client.wait_for("speech.ended")
    await asyncio.sleep(0.3)  # a pause, well within the hold
    assert "turn.started" not in client.types()
    await say(client, 0.8, ts0=5_002_000.0)
    await client.wait_for("turn.done")
    await client.flush()
    assert client.types().count("turn.started") == 1 and "error" not in client.types()
    assert len(stack.llm.requests) == 1
    assert stack.llm.requests[0].user.text == "I went to the shop and I went to the shop and"


@pytest.mark.parametrize("stack", [TEXT_ONLY], indirect=True)
async def test_a_held_phrase_is_answered_when_the_user_says_no_more(stack, connect) -> None:
    stack.asr.words = "Tell me about the"
    client = await ready_client(connect, audio_input=False)
    await say(client, 1.0, ts0=5_000_000.0)
    done = await client.wait_for("turn.done")
    assert done["finish_reason"] == "stop" and stack.llm.requests[0].user.text == "Tell me about the"


@pytest.mark.parametrize("stack", [TEXT_ONLY], indirect=True)
async def test_a_complete_sentence_is_not_held(stack, connect) -> None:
    client = await ready_client(connect, audio_input=False)
    await say(client, 1.0, ts0=5_000_000.0)
    await client.wait_for("audio.start")  # answered without waiting for more: the next speech is a barge-in
    await say(client, 0.8, ts0=5_002_000.0)
    await client.wait_for("turn.done", count=2)
    assert [r.user.text for r in stack.llm.requests] == [stack.asr.words, stack.asr.words]


@pytest.mark.parametrize("stack", [TEXT_ONLY], indirect=True)
async def test_words_slower_than_the_hold_do_not_fail_the_turn(stack, connect) -> None:
    """The hold waits for the words only as long as it could last; the turn then waits for them as usual."""
    stack.asr.words, stack.asr.delay_s = "I went to the shop and", 2.5  # hold 1.5 s, words deadline 2 s
    client = await ready_client(connect, audio_input=False)
    await say(client, 1.0, ts0=5_000_000.0)
    done = await client.wait_for("turn.done")
    assert done["finish_reason"] == "stop" and "error" not in client.types(), client.events
    assert stack.llm.requests[0].user.text == "I went to the shop and"
