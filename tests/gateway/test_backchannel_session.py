"""Speech over an answer being heard, through the wires with fake peers (the rule: conversation/backchannel.py): a
backchannel or a noise lowers the answer and it goes on whole; a real cut-in stops it."""

from __future__ import annotations

import numpy as np
import pytest

from services.gateway.wires.protocol import HEADER_BYTES
from tests.gateway.conftest import Client, silence, speech
from tests.gateway.test_openai_realtime import append, realtime, text_item, tone_24k

pytestmark = pytest.mark.timeout(60)
FULL = "Hello there. How are you?"


def _slow_answer(stack) -> None:
    stack.tts.chunks_per_sentence = 20
    stack.tts.chunk_delay_s = 0.04  # about 1.7 s of audio a sentence, sent over 0.8 s: still running when spoken over


async def _answer_playing(stack, connect, words: str, words_delay_s: float = 0.0) -> Client:
    """A /ws session whose typed question's answer is playing (slowly) when the user speaks; the recogniser will
    hear `words`."""
    _slow_answer(stack)
    stack.asr.words, stack.asr.delay_s = words, words_delay_s
    client = await connect()
    await client.send(type="text", text="Tell me a story.")
    await client.wait_for("audio.start")
    return client


def _peaks(client: Client, after: str, before: str) -> list[int]:
    """The loudest sample of each audio frame that arrived between two events."""
    i, j = client.arrivals.index(after), client.arrivals.index(before)
    frames = iter(data for _, data in client.frames)
    peaks = []
    for k, kind in enumerate(client.arrivals):
        if kind == "audio":
            payload = next(frames)[HEADER_BYTES:]
            if i < k < j:
                peaks.append(int(np.abs(np.frombuffer(payload, dtype="<i2")).max()))
    return peaks


def _samples(client: Client) -> int:
    return sum((len(data) - HEADER_BYTES) // 2 for _, data in client.frames)


async def test_a_backchannel_ducks_the_answer_which_then_goes_on_whole(stack, connect) -> None:
    # the answer plays on, ducked, while the words come
    client = await _answer_playing(stack, connect, "Uh-huh.", words_delay_s=0.3)
    await client.send_audio(speech(0.3))
    await client.send_audio(silence(0.4))
    duck = await client.wait_for("turn.duck")
    unduck = await client.wait_for("turn.unduck")
    done = await client.wait_for("turn.done")
    await client.flush()
    assert duck["turn_id"] == unduck["turn_id"] == done["turn_id"] and duck["gain_db"] == -15.0
    assert not done["interrupted"] and done["heard_text"] == FULL
    audio_done = next(e for e in client.events if e["type"] == "audio.done")
    assert _samples(client) == audio_done["samples"] == 2 * 20 * 2048  # all of it went out
    ducked = _peaks(client, "turn.duck", "turn.unduck")
    assert ducked and min(ducked) < 8000 * 10 ** (-14 / 20)  # lowered by the duck gain while undecided
    assert max(_peaks(client, "turn.unduck", "turn.done")[-3:]) > 7000  # and back to full gain after
    # Not a turn: nothing answered it, nothing said it was heard as speech, no error
    assert client.types().count("turn.started") == 1 and len(stack.llm.requests) == 1
    assert not {"speech.started", "speech.ended", "turn.cut", "error"} & set(client.types())


async def test_a_cough_with_no_words_ducks_and_resumes(stack, connect) -> None:
    client = await _answer_playing(stack, connect, "")
    await client.send_audio(speech(0.25))
    await client.send_audio(silence(0.4))
    await client.wait_for("turn.unduck")
    done = await client.wait_for("turn.done")
    await client.flush()
    assert not done["interrupted"] and len(stack.llm.requests) == 1
    assert not {"speech.started", "error"} & set(client.types())


async def test_speech_longer_than_a_backchannel_cuts_the_answer_before_it_ends(stack, connect) -> None:
    client = await _answer_playing(stack, connect, "Yeah, wait, what colour is the cup?")
    await client.send_audio(speech(1.2))
    done = await client.wait_for("turn.done")  # the user is still speaking: no end of speech yet
    assert done["interrupted"] and "speech.ended" not in client.types()
    assert client.types().index("turn.duck") < client.types().index("speech.started")
    await client.send_audio(silence(0.4))
    await client.wait_for("turn.done", count=2)
    assert len(stack.llm.requests) == 2 and stack.llm.requests[1].history[-1].interrupted


async def test_a_short_cut_in_with_real_words_cuts_the_answer_at_its_end(stack, connect) -> None:
    client = await _answer_playing(stack, connect, "Stop.")
    await client.send_audio(speech(0.3))
    await client.send_audio(silence(0.4))
    done = await client.wait_for("turn.done")
    assert done["interrupted"] and "turn.unduck" not in client.types()
    types = client.types()
    assert types.index("turn.duck") < types.index("speech.started") < types.index("speech.ended")
    await client.wait_for("turn.done", count=2)
    assert len(stack.llm.requests) == 2


async def test_a_backchannel_over_a_finished_answer_still_playing_does_not_cut_it(stack, connect) -> None:
    stack.tts.chunks_per_sentence = 40  # synthesised at once, played for seconds
    stack.asr.words = "Mm-hmm."
    client = await connect()
    await client.send(type="text", text="Tell me a story.")
    done = await client.wait_for("turn.done")
    await client.send_audio(speech(0.3))
    await client.send_audio(silence(0.4))
    await client.wait_for("turn.unduck")
    await client.flush()
    assert "turn.cut" not in client.types()
    await client.send(type="text", text="Go on.")
    await client.wait_for("turn.done", count=2)
    answer = stack.llm.requests[1].history[-1]
    assert (answer.text, answer.interrupted) == (done["text"], False)


async def test_realtime_a_backchannel_does_not_tell_the_client_speech_started(stack) -> None:
    _slow_answer(stack)
    stack.asr.words = "Yeah."
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Tell me a story"))
        await events.conn.response.create()
        await events.wait_for("response.output_audio.delta")
        await append(events.conn, tone_24k(0.3))
        await append(events.conn, bytes(48 * 400))
        done = await events.wait_for("response.done")
    assert done.response.status == "completed"
    assert "input_audio_buffer.speech_started" not in events.types() and len(stack.llm.requests) == 1


async def test_realtime_a_real_cut_in_tells_speech_started_and_cancels(stack) -> None:
    _slow_answer(stack)
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Tell me a story"))
        await events.conn.response.create()
        await events.wait_for("response.output_audio.delta")
        await append(events.conn, tone_24k(1.2))
        done = await events.wait_for("response.done")
    assert done.response.status == "cancelled" and done.response.status_details.reason == "turn_detected"
    assert "input_audio_buffer.speech_started" in events.types()
