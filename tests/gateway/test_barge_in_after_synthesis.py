"""Barge-in by speech alone over an answer whose synthesis is over but which is still playing (by the playback
estimate), on /ws and on /v1/realtime: the client is told, and the history keeps only what was heard."""

from __future__ import annotations

import pytest

from tests.gateway.conftest import silence, speech
from tests.gateway.test_openai_realtime import append, realtime, text_item, tone_24k

pytestmark = pytest.mark.timeout(60)
FULL = "Hello there. How are you?"


# SOTTO_GATEWAY_BACKCHANNEL=false: any speech cuts at once (tests/gateway/test_backchannel_session.py: on)
@pytest.mark.parametrize("stack", [{"backchannel": False}], indirect=True)
async def test_speech_over_a_finished_answer_still_playing_cuts_it(stack, connect) -> None:
    stack.tts.chunks_per_sentence = 40  # about 3.4 s a sentence: synthesised at once, played for seconds
    client = await connect()
    await client.send(type="text", text="Tell me a story.")
    done = await client.wait_for("turn.done")
    assert not done["interrupted"] and done["text"] == FULL
    await client.send_audio(speech(0.3))  # no interrupt message: the server's VAD hears the user
    cut = await client.wait_for("turn.cut")
    assert cut["turn_id"] == done["turn_id"] and cut["played_samples"] < 2 * 40 * 2048
    assert cut["heard_text"] != FULL and FULL.startswith(cut["heard_text"])
    await client.send_audio(silence(0.4))
    await client.wait_for("turn.done", count=2)
    answer = stack.llm.requests[1].history[-1]
    assert (answer.text, answer.interrupted) == (cut["heard_text"], True)


async def test_speech_after_the_answer_was_played_cuts_nothing(stack, connect) -> None:
    client = await connect()
    await client.send(type="text", text="Hi")
    done = await client.wait_for("turn.done")
    await client.send(type="playback", turn_id=done["turn_id"], played_samples=2 * 2 * 2048)  # all of it heard
    await client.flush()
    await client.send_audio(speech(0.3))
    await client.send_audio(silence(0.4))
    await client.wait_for("turn.done", count=2)
    assert "turn.cut" not in client.types()
    answer = stack.llm.requests[1].history[-1]
    assert (answer.text, answer.interrupted) == (FULL, False)


# SOTTO_GATEWAY_BACKCHANNEL=false: any speech cuts at once (tests/gateway/test_backchannel_session.py: on)
@pytest.mark.parametrize("stack", [{"backchannel": False}], indirect=True)
async def test_realtime_speech_over_a_finished_answer_truncates_it(stack) -> None:
    stack.tts.chunks_per_sentence = 40
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Tell me a story"))
        await events.conn.response.create()
        done = await events.wait_for("response.done")
        assert done.response.status == "completed"
        await append(events.conn, tone_24k(0.3))
        truncated = await events.wait_for("conversation.item.truncated")
        await append(events.conn, bytes(48 * 400))
        await events.wait_for("response.done", count=2)
    assert truncated.item_id == done.response.output[0].id and truncated.audio_end_ms < 6800
    answer = stack.llm.requests[1].history[-1]
    assert answer.interrupted and answer.text != FULL and FULL.startswith(answer.text)
