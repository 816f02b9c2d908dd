"""The user's words through the gateway (fake peers): the `transcript` event, the history, the cascade for
text-only models, and what happens without the asr service."""

from __future__ import annotations

import asyncio
import hashlib

import grpc
import numpy as np
import pytest

from tests.gateway.conftest import silence, speech

TEXT_ONLY = {"llm": {"audio_input": False}}
WORDS = "What is the capital of France?"
pytestmark = pytest.mark.timeout(60)


async def ready_client(connect, audio_input: bool):
    """A session opened once the gateway knows the model's modalities (asked when the llm reports SERVING)."""
    for _ in range(100):
        client = await connect()
        if client.events[0].get("model", {}).get("audio_input") is audio_input:
            return client
        await client.close()
        await asyncio.sleep(0.05)
    raise AssertionError("the gateway never learnt the model's modalities")


async def speak(client, ts0: float = 5_000_000.0) -> None:
    await client.send_audio(np.concatenate([silence(0.3), speech(1.2), silence(0.5)]), ts0=ts0)


async def test_a_model_that_hears_gets_the_audio_and_the_page_and_history_get_the_words(stack, connect):
    client = await ready_client(connect, audio_input=True)
    await speak(client)
    done = await client.wait_for("turn.done")
    transcript = client.events[[e["type"] for e in client.events].index("transcript")]
    assert transcript == {"type": "transcript", "turn_id": done["turn_id"], "text": WORDS,
                          "recognition_ms": transcript["recognition_ms"]}
    types = client.types()
    assert types.index("audio.start") < types.index("transcript")  # recognised once the reply's audio is out
    spoken = stack.llm.requests[0].user
    assert spoken.audio_wav and not spoken.text
    assert stack.asr.clips == [spoken.audio_wav] and stack.asr.streamed == []
    assert done["timings"]["asr_ms"] >= 0

    await client.send(type="text", text="And Germany?")
    await client.wait_for("turn.done", count=2)
    user = stack.llm.requests[1].history[0]
    assert user.text == WORDS and user.audio_sha256 == hashlib.sha256(spoken.audio_wav).digest()


@pytest.mark.parametrize("stack", [TEXT_ONLY], indirect=True)
async def test_a_text_only_model_gets_the_words_as_the_message(stack, connect):
    client = await ready_client(connect, audio_input=False)
    await speak(client)
    done = await client.wait_for("turn.done")
    assert done["finish_reason"] == "stop" and client.audio_after("audio.start") > 0
    types = client.types()
    assert types.index("turn.started") < types.index("transcript") < types.index("text.delta")
    user = stack.llm.requests[0].user
    assert user.text == WORDS and not user.audio_wav
    # streamed while spoken, from the pre-roll on; told where the utterance ends
    assert len(stack.asr.streamed) == 1 and stack.asr.clips == []
    assert 1.2 * 16000 <= stack.asr.streamed[0] <= stack.asr.received[0]

    await client.send(type="text", text="And Germany?")
    await client.wait_for("turn.done", count=2)
    user = stack.llm.requests[1].history[0]
    assert user.text == WORDS and user.audio_sha256 == b""  # the model read the words: no audio to match


async def test_without_the_asr_a_model_that_hears_goes_on_and_the_page_is_told_once(stack, connect):
    stack.asr.fail_with = grpc.StatusCode.UNAVAILABLE
    client = await ready_client(connect, audio_input=True)
    await speak(client)
    await client.wait_for("turn.done")
    await speak(client, ts0=6_000_000.0)
    done = await client.wait_for("turn.done", count=2)
    assert done["finish_reason"] == "stop"
    notices = [e for e in client.events if e["type"] == "transcript"]
    assert len(notices) == 1 and notices[0]["text"] is None and "unavailable" in notices[0]["error"]
    assert [h.text for h in stack.llm.requests[1].history][0] == ""


@pytest.mark.parametrize("stack", [TEXT_ONLY], indirect=True)
async def test_without_the_asr_a_text_only_model_refuses_spoken_turns_and_typed_ones_work(stack, connect):
    stack.asr.fail_with = grpc.StatusCode.UNAVAILABLE
    client = await ready_client(connect, audio_input=False)
    await speak(client)
    error = await client.wait_for("error")
    assert error["code"] == "unavailable" and "recognition service is unavailable (" in error["message"]
    assert "could not be heard" in error["message"]
    assert stack.llm.requests == []
    await client.send(type="text", text="Hello?")
    done = await client.wait_for("turn.done", count=2)
    assert done["finish_reason"] == "stop" and stack.llm.requests[0].user.text == "Hello?"


@pytest.mark.parametrize("stack", [TEXT_ONLY], indirect=True)
async def test_a_text_only_model_is_not_asked_when_no_words_were_heard(stack, connect):
    stack.asr.words = ""
    client = await ready_client(connect, audio_input=False)
    await speak(client)
    error = await client.wait_for("error")
    assert error["code"] == "not_heard" and stack.llm.requests == []


@pytest.mark.parametrize("stack", [{"request_timeout_ms": 300}], indirect=True)
async def test_a_recogniser_slower_than_the_request_timeout_gives_later_words_not_an_error(stack, connect):
    """A loaded machine: the words of a 2 s utterance take longer than one request timeout. The words deadline
    grows with the utterance, so the page still gets them and the history keeps them."""
    stack.asr.delay_s = 0.9
    client = await ready_client(connect, audio_input=True)
    await speak(client)
    await client.wait_for("turn.done")
    transcript = client.events[client.types().index("transcript")]
    assert transcript["text"] == WORDS and "error" not in transcript
    await client.send(type="text", text="And Germany?")
    await client.wait_for("turn.done", count=2)
    assert stack.llm.requests[1].history[0].text == WORDS


@pytest.mark.parametrize("stack", [{**TEXT_ONLY, "request_timeout_ms": 300}], indirect=True)
async def test_a_slow_recogniser_delays_a_text_only_models_answer_without_an_error(stack, connect):
    stack.asr.delay_s = 0.9
    client = await ready_client(connect, audio_input=False)
    await speak(client)
    done = await client.wait_for("turn.done")
    assert done["finish_reason"] == "stop" and "error" not in client.types()
    assert stack.llm.requests[0].user.text == WORDS
