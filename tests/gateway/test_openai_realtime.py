"""/v1/realtime driven by the official openai SDK against fake llm/vad/tts peers: the translation of OpenAI Realtime
events to and from the session and turn pipeline, barge-in (cancel, truncate, speech) and the refusals."""

from __future__ import annotations

import asyncio
import base64
import io
import wave
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import grpc
import numpy as np
import pytest
from openai import AsyncOpenAI
from PIL import Image

from tests.gateway.conftest import Stack
from tests.helpers import eventually


class Events:
    """Every server event of one connection, read in the background."""

    def __init__(self, conn) -> None:
        self.conn = conn
        self.all: list = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.conn:
            self.all.append(event)

    def types(self) -> list[str]:
        return [e.type for e in self.all]

    async def wait_for(self, kind: str, count: int = 1, timeout: float = 10.0):
        def nth():
            found = [e for e in self.all if e.type == kind]
            return found[count - 1] if len(found) >= count else None
        return await eventually(nth, timeout, f"{kind} #{count}")

    def after(self, event) -> list[str]:
        return [e.type for e in self.all[self.all.index(event) + 1:]]


@asynccontextmanager
async def realtime(stack: Stack) -> AsyncIterator[Events]:
    async with AsyncOpenAI(base_url=f"{stack.url}/v1", api_key="unused", max_retries=0) as client, \
            client.realtime.connect(model="sotto") as conn:
        events = Events(conn)
        await events.wait_for("session.created")
        yield events
        events._reader.cancel()


def tone_24k(seconds: float, amplitude: int = 8000) -> bytes:
    t = np.arange(int(seconds * 24000)) / 24000
    return (np.sin(2 * np.pi * 220 * t) * amplitude).astype("<i2").tobytes()


async def append(conn, pcm: bytes, chunk_ms: int = 100) -> None:
    step = 48 * chunk_ms
    for i in range(0, len(pcm), step):
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + step]).decode())


def text_item(text: str, image_url: str | None = None) -> dict:
    content = [{"type": "input_text", "text": text}]
    if image_url:
        content.append({"type": "input_image", "image_url": image_url})
    return {"type": "message", "role": "user", "content": content}


def wav_seconds(data: bytes) -> tuple[int, float]:
    with wave.open(io.BytesIO(data)) as w:
        return w.getframerate(), w.getnframes() / w.getframerate()


async def test_a_typed_item_with_an_image_gets_a_spoken_answer_and_its_transcript(stack: Stack) -> None:
    buf = io.BytesIO()
    Image.new("RGB", (16, 16), "blue").save(buf, "PNG")
    url = "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()
    async with realtime(stack) as events:
        await events.conn.session.update(session={"type": "realtime", "instructions": "Be brief.",
                                                  "max_output_tokens": 64})
        await events.wait_for("session.updated")
        await events.conn.conversation.item.create(item=text_item("What colour is this?", url))
        await events.conn.response.create()
        done = await events.wait_for("response.done")
    types = events.types()
    for earlier, later in [("conversation.item.done", "response.created"),
                           ("response.created", "response.output_item.added"),
                           ("response.content_part.added", "response.output_audio_transcript.delta"),
                           ("response.output_audio.delta", "response.output_audio.done"),
                           ("response.output_audio_transcript.done", "response.done")]:
        assert types.index(earlier) < types.index(later), types
    audio = b"".join(base64.b64decode(e.delta) for e in events.all if e.type == "response.output_audio.delta")
    assert len(audio) == 2 * 2048 * 2 * 2  # two sentences, two 2048-sample chunks each, PCM16 at 24 kHz
    transcript = next(e for e in events.all if e.type == "response.output_audio_transcript.done").transcript
    assert transcript == "Hello there. How are you?"
    assert done.response.status == "completed" and done.response.output[0].content[0].transcript == transcript
    assert (done.response.usage.input_tokens, done.response.usage.output_tokens) == (12, 5)
    request = stack.llm.requests[-1]
    assert request.user.text == "What colour is this?" and request.user.images[0].data == buf.getvalue()
    assert request.system_prompt == "Be brief." and request.sampling.max_new_tokens == 64


async def test_server_vad_commits_24khz_speech_at_16khz_and_answers_it(stack: Stack) -> None:
    async with realtime(stack) as events:
        await append(events.conn, tone_24k(1.0) + bytes(2 * 24000 // 2))
        started = await events.wait_for("input_audio_buffer.speech_started")
        stopped = await events.wait_for("input_audio_buffer.speech_stopped")
        committed = await events.wait_for("input_audio_buffer.committed")
        await events.wait_for("response.done")
    assert started.item_id == stopped.item_id == committed.item_id
    assert started.audio_start_ms < 50 and 950 < stopped.audio_end_ms < 1100
    user_item = next(e.item for e in events.all if e.type == "conversation.item.added")
    assert user_item.role == "user" and user_item.content[0].type == "input_audio"
    rate, seconds = wav_seconds(stack.llm.requests[-1].user.audio_wav)
    assert rate == 16000 and 0.9 < seconds < 1.5  # the speech (and the pre-roll), resampled


async def test_with_turn_detection_off_the_client_commits_and_asks_for_the_response(stack: Stack) -> None:
    async with realtime(stack) as events:
        await events.conn.session.update(session={"type": "realtime", "audio": {"input": {
            "turn_detection": None, "format": {"type": "audio/pcm", "rate": 24000}}}})
        await events.wait_for("session.updated")
        await events.conn.input_audio_buffer.commit()
        empty = await events.wait_for("error")
        await append(events.conn, tone_24k(0.6))
        await events.conn.input_audio_buffer.commit()
        await events.wait_for("input_audio_buffer.committed")
        await events.conn.response.create()
        await events.wait_for("response.done")
    assert empty.error.code == "input_audio_buffer_commit_empty"
    assert "input_audio_buffer.speech_started" not in events.types()
    rate, seconds = wav_seconds(stack.llm.requests[-1].user.audio_wav)
    assert rate == 16000 and abs(seconds - 0.6) < 0.02


async def test_a_cancelled_response_ends_cancelled_and_sends_no_more_audio(stack: Stack) -> None:
    stack.tts.chunk_delay_s = 0.2
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Tell me a story"))
        await events.conn.response.create()
        first = await events.wait_for("response.output_audio.delta")
        await events.conn.response.cancel(response_id=first.response_id)
        done = await events.wait_for("response.done")
        await asyncio.sleep(0.5)  # anything still queued would arrive now
    assert done.response.status == "cancelled" and done.response.status_details.reason == "client_cancelled"
    assert "response.output_audio.delta" not in events.after(done)
    assert events.types().count("response.output_audio.delta") < 8
    await eventually(lambda: stack.tts.cancelled == 1, 5, "the tts call to be cancelled")


# SOTTO_GATEWAY_BACKCHANNEL=false: any speech cuts at once (tests/gateway/test_backchannel_session.py: on)
@pytest.mark.parametrize("stack", [{"backchannel": False}], indirect=True)
async def test_speech_over_the_answer_cancels_it_as_turn_detected(stack: Stack) -> None:
    stack.tts.chunk_delay_s = 0.2
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Tell me a story"))
        await events.conn.response.create()
        await events.wait_for("response.output_audio.delta")
        await append(events.conn, tone_24k(0.3))
        done = await events.wait_for("response.done")
    assert done.response.status == "cancelled" and done.response.status_details.reason == "turn_detected"
    assert "response.output_audio.delta" not in events.after(done)


async def test_a_truncate_keeps_only_the_heard_words_in_the_history(stack: Stack) -> None:
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Hi"))
        await events.conn.response.create()
        done = await events.wait_for("response.done")
        item_id = done.response.output[0].id
        # 100 ms of the 170 ms first sentence "Hello there." was heard: its first word
        await events.conn.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=100)
        truncated = await events.wait_for("conversation.item.truncated")
        await events.conn.conversation.item.retrieve(item_id=item_id)
        retrieved = await events.wait_for("conversation.item.retrieved")
        await events.conn.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=60_000)
        beyond = await events.wait_for("error")
        await events.conn.conversation.item.create(item=text_item("And then?"))
        await events.conn.response.create()
        await events.wait_for("response.done", count=2)
    assert truncated.audio_end_ms == 100 and retrieved.item.content[0].transcript == "Hello"
    assert beyond.error.param == "audio_end_ms" and "beyond" in beyond.error.message
    answer = stack.llm.requests[-1].history[-1]
    assert (answer.text, answer.interrupted) == ("Hello", True)


async def test_a_busy_llm_fails_the_response(stack: Stack) -> None:
    stack.llm.fail_with = grpc.StatusCode.RESOURCE_EXHAUSTED
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Hi"))
        await events.conn.response.create()
        done = await events.wait_for("response.done")
    assert done.response.status == "failed" and done.response.status_details.error.code == "model_busy"


@pytest.mark.parametrize(("event", "words"), [
    ({"type": "conversation.item.delete", "item_id": "x"}, "not supported"),
    ({"type": "transcription_session.update", "session": {}}, "supported: session.update"),
    ({"type": "session.update", "session": {"type": "realtime", "audio": {"output": {"voice": "alloy"}}}},
     "accepted: af_heart"),
    ({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"transcription": {
        "model": "whisper-1"}}}}}, "asr service"),
    ({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"turn_detection": {
        "type": "semantic_vad", "eagerness": "eager"}}}}}, "low, medium, high, auto"),
    ({"type": "session.update", "session": {"type": "realtime", "audio": {"input": {"format": {
        "type": "audio/pcmu"}}}}}, '"audio/pcm"'),
    ({"type": "session.update", "session": {"type": "realtime", "tools": [{"type": "function", "name": "f"}]}},
     "no function calling"),
    ({"type": "response.create"}, "nothing to respond to"),
    ({"type": "response.cancel"}, "no response in progress"),
    ({"type": "input_audio_buffer.append", "audio": "not base64!"}, "not valid base64"),
    ({"type": "conversation.item.create", "item": {"type": "message", "role": "system", "content": [
        {"type": "input_text", "text": "x"}]}}, "accepted: user, assistant"),
    ({"type": "conversation.item.create", "item": text_item("x", "https://example.invalid/a.jpg")}, "data URL"),
])
async def test_refused_events_get_an_error_naming_what_is_accepted(stack: Stack, event: dict, words: str) -> None:
    async with realtime(stack) as events:
        await events.conn.send({**event, "event_id": "evt_1"})
        error = await events.wait_for("error")
        await events.conn.session.update(session={"type": "realtime"})
        await events.wait_for("session.updated")  # the session goes on
    assert words in error.error.message and error.error.event_id == "evt_1", error
    assert error.error.type == "invalid_request_error"
    assert not stack.llm.requests


async def test_a_binary_frame_is_refused_and_the_session_goes_on(stack: Stack) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{stack.url}/v1/realtime") as ws:
        assert (await ws.receive_json())["type"] == "session.created"
        await ws.send_bytes(b"\x01\x02")
        error = await ws.receive_json()
        await ws.send_json({"type": "session.update", "session": {"type": "realtime"}})
        assert (await ws.receive_json())["type"] == "session.updated"
    assert error["type"] == "error" and "input_audio_buffer.append" in error["error"]["message"]


@pytest.mark.parametrize("text", ['{"type": "\\ud800"}', '{"type": "x", "a": ' + "[" * 30000 + "]" * 30000 + "}",
                                  '{"type": "response.cancel", "n": ' + "9" * 5000 + "}"],
                         ids=["lone surrogate", "deep nesting", "huge integer"])
async def test_hostile_json_is_an_error_and_the_session_goes_on(stack: Stack, text: str) -> None:
    async with aiohttp.ClientSession() as http, http.ws_connect(f"{stack.url}/v1/realtime") as ws:
        assert (await ws.receive_json())["type"] == "session.created"
        await ws.send_str(text)
        error = await ws.receive_json()
        await ws.send_json({"type": "session.update", "session": {"type": "realtime"}})
        assert (await ws.receive_json())["type"] == "session.updated"
    assert error["type"] == "error" and "not valid JSON" in error["error"]["message"]


async def test_the_asr_services_words_become_the_user_items_transcript(stack: Stack) -> None:
    async with realtime(stack) as events:
        await append(events.conn, tone_24k(1.0) + bytes(2 * 24000 // 2))
        committed = await events.wait_for("input_audio_buffer.committed")
        heard = await events.wait_for("conversation.item.input_audio_transcription.completed")
        await events.wait_for("response.done")
    assert heard.item_id == committed.item_id and heard.content_index == 0
    assert heard.transcript == stack.asr.words
