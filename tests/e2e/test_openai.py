"""The OpenAI-compatible endpoints on the real stack, driven by the official openai SDK: Realtime with espeak-ng
speech in and Kokoro audio out, cancel and truncate; Chat Completions on the tiny multimodal model, with an image.

The tiny model's words are gibberish: these tests check the structure a client relies on, and the engine's own
counts (an image really prefilled), never the words.
"""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import openai
import pytest
from openai import AsyncOpenAI

from tests.e2e.test_turns import camera_jpeg, turn_log
from tests.helpers import closed_openai_clients, eventually, openai_client  # noqa: F401 - a fixture
from tools.speech import speak
from tools.stack import RealStack

TIMEOUT_S = 120

pytestmark = pytest.mark.usefixtures("closed_openai_clients")


@pytest.fixture(scope="module")
def question_24k(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """A spoken question at OpenAI's 24 kHz, then a second of silence for the vad to end it on."""
    speech = speak("What is the capital of France?", "en-us", 24000, tmp_path_factory.mktemp("speech24"))
    return speech.astype("<i2").tobytes() + bytes(2 * 24000)


def sdk(stack: RealStack) -> AsyncOpenAI:
    return openai_client(f"{stack.http_url}/v1", "local")


class Events:
    def __init__(self, conn) -> None:
        self.conn = conn
        self.all: list = []
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self.conn:
            self.all.append(event)

    async def wait_for(self, kind: str, count: int = 1):
        def nth():
            found = [e for e in self.all if e.type == kind]
            return found[count - 1] if len(found) >= count else None
        return await eventually(nth, TIMEOUT_S, f"{kind} #{count}", interval=0.05)

    async def wait(self, predicate: Callable[[Any], bool]):
        return await eventually(lambda: next((e for e in self.all if predicate(e)), None), TIMEOUT_S,
                                "an event", interval=0.05)

    def of(self, kind: str, response_id: str) -> list:
        return [e for e in self.all if e.type == kind and getattr(e, "response_id", None) == response_id]

    def after(self, event) -> list[str]:
        return [e.type for e in self.all[self.all.index(event) + 1:]]


@asynccontextmanager
async def realtime(stack: RealStack) -> AsyncIterator[Events]:
    async with sdk(stack).realtime.connect(model="sotto") as conn:
        events = Events(conn)
        await events.wait_for("session.created")
        yield events
        events._reader.cancel()


async def append(conn, pcm: bytes) -> None:
    for i in range(0, len(pcm), 4800):  # 100 ms pieces, as a microphone client sends them
        await conn.input_audio_buffer.append(audio=base64.b64encode(pcm[i:i + 4800]).decode())


def audio_of(events: Events, response_id: str) -> bytes:
    return b"".join(base64.b64decode(e.delta) for e in events.of("response.output_audio.delta", response_id))


async def spoken_answer(events: Events, ask: Callable[[], Awaitable[None]]):
    """The response.done of a request that `ask` makes, once one comes with words and audio. The random-weight model
    sometimes ends its turn at once (it samples at temperature 0.7): then it is asked again, at most four times."""
    for _ in range(4):
        count = sum(e.type == "response.done" for e in events.all) + 1
        await ask()
        done = await events.wait_for("response.done", count=count)
        if done.response.output[0].content[0].transcript.strip() and audio_of(events, done.response.id):
            return done
    raise AssertionError("four answers in a row were empty")


def typed(events: Events, text: str, max_output_tokens: int, image: bytes = b"") -> Callable[[], Awaitable[None]]:
    content = [{"type": "input_text", "text": text}]
    if image:
        url = "data:image/jpeg;base64," + base64.b64encode(image).decode()
        content.append({"type": "input_image", "image_url": url})

    async def ask() -> None:
        await events.conn.conversation.item.create(item={"type": "message", "role": "user", "content": content})
        await events.conn.response.create(response={"max_output_tokens": max_output_tokens})
    return ask


async def test_realtime_a_spoken_question_then_a_typed_one_with_an_image(real_stack: RealStack,
                                                                          question_24k: bytes) -> None:
    async with realtime(real_stack) as events:
        await events.conn.session.update(session={"type": "realtime", "max_output_tokens": 12})
        spoken = await spoken_answer(events, lambda: append(events.conn, question_24k))
        seen = await spoken_answer(events, typed(events, "And what is in this picture?", 12, camera_jpeg(3)))
    types = [e.type for e in events.all]
    for earlier, later in [("input_audio_buffer.speech_started", "input_audio_buffer.speech_stopped"),
                           ("input_audio_buffer.speech_stopped", "input_audio_buffer.committed"),
                           ("input_audio_buffer.committed", "response.created")]:
        assert types.index(earlier) < types.index(later), types
    for done in (spoken, seen):
        response_id = done.response.id
        assert done.response.status in ("completed", "incomplete"), done.response
        assert len(audio_of(events, response_id)) >= 2 * 2048, "not even one audio chunk arrived"
        deltas = "".join(e.delta for e in events.of("response.output_audio_transcript.delta", response_id))
        transcript = events.of("response.output_audio_transcript.done", response_id)[0].transcript
        assert transcript == deltas == done.response.output[0].content[0].transcript
        assert done.response.usage.output_tokens > 0
    heard = turn_log(real_stack, "llm", spoken.response.id.removeprefix("resp_"), "generate_request")
    assert heard["audio_bytes"] > 2 * 16000, heard  # over a second of the question, at 16 kHz
    looked = turn_log(real_stack, "llm", seen.response.id.removeprefix("resp_"), "generate_request")
    assert looked["images"] == 1 and looked["history_turns"] >= 2, looked


async def test_realtime_a_response_cancelled_mid_answer_sends_no_more_audio(real_stack: RealStack) -> None:
    async with realtime(real_stack) as events:
        ask = typed(events, "Tell me a long story about the sea.", 300)
        for _ in range(4):  # an answer that ends at once has no middle to cancel in: ask again then
            await ask()
            first = await events.wait(lambda e: e.type in ("response.output_audio.delta", "response.done"))
            if first.type == "response.output_audio.delta":
                break
            events.all.clear()
        await events.conn.response.cancel()
        cancelled = await events.wait_for("response.done")
        await asyncio.sleep(1.0)  # audio still queued or synthesised would arrive now
    assert cancelled.response.status == "cancelled", cancelled.response
    assert cancelled.response.status_details.reason == "client_cancelled"
    assert "response.output_audio.delta" not in events.after(cancelled)
    kept = cancelled.response.output[0].content[0].transcript
    deltas = "".join(e.delta for e in events.of("response.output_audio_transcript.delta", first.response_id))
    assert len(kept) < len(deltas), "the history keeps only what was sent as audio"


async def test_realtime_a_truncate_shortens_the_answer_in_the_history(real_stack: RealStack) -> None:
    async with realtime(real_stack) as events:
        done = await spoken_answer(events, typed(events, "Tell me about the weather today.", 16))
        full = done.response.output[0].content[0].transcript
        item_id = done.response.output[0].id
        sent_ms = len(audio_of(events, done.response.id)) // 2 * 1000 // 24000
        await events.conn.conversation.item.truncate(item_id=item_id, content_index=0, audio_end_ms=sent_ms // 3)
        await events.wait_for("conversation.item.truncated")
        await events.conn.conversation.item.retrieve(item_id=item_id)
        retrieved = await events.wait_for("conversation.item.retrieved")
        await typed(events, "Go on.", 4)()
        after = await events.wait_for("response.done", count=sum(e.type == "response.done" for e in events.all) + 1)
    heard = retrieved.item.content[0].transcript
    assert len(heard.split()) < len(full.split()) and heard.split() == full.split()[:len(heard.split())], (heard, full)
    request = turn_log(real_stack, "llm", after.response.id.removeprefix("resp_"), "generate_request")
    assert request["history_turns"] >= 2, request


async def test_chat_completions_with_an_image_streamed_and_not(real_stack: RealStack) -> None:
    client = sdk(real_stack)
    image = "data:image/jpeg;base64," + base64.b64encode(camera_jpeg(5)).decode()
    ask = [{"type": "text", "text": "What is in this picture?"}, {"type": "image_url", "image_url": {"url": image}}]
    plain = await client.chat.completions.create(model="sotto", max_tokens=12,
                                                 messages=[{"role": "user", "content": "What is in this picture?"}])
    seeing = await client.chat.completions.create(model="sotto", max_tokens=12,
                                                  messages=[{"role": "user", "content": ask}])
    for reply in (plain, seeing):
        assert reply.choices[0].finish_reason in ("stop", "length") and reply.choices[0].message.role == "assistant"
        assert isinstance(reply.choices[0].message.content, str) and 0 < reply.usage.completion_tokens <= 12
    assert seeing.usage.prompt_tokens > plain.usage.prompt_tokens + 25, "the image's tokens were not prefilled"
    stream = await client.chat.completions.create(model="sotto", max_tokens=12, stream=True,
                                                  stream_options={"include_usage": True},
                                                  messages=[{"role": "user", "content": ask}])
    chunks = [chunk async for chunk in stream]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and [c.choices[0].finish_reason for c in chunks if c.choices][-1] in ("stop", "length")
    assert chunks[-1].usage.prompt_tokens == seeing.usage.prompt_tokens  # the same prompt, prefilled again
    models = await client.models.list()
    assert [m.id for m in models.data] == [Path(real_stack.env["SOTTO_LLM_MODEL"]).stem]


async def test_chat_completions_bad_requests_on_the_real_stack(real_stack: RealStack) -> None:
    client = sdk(real_stack)
    not_a_picture = "data:image/jpeg;base64," + base64.b64encode(b"this is no JPEG").decode()
    with pytest.raises(openai.BadRequestError) as undecodable:
        await client.chat.completions.create(model="sotto", messages=[{"role": "user", "content": [
            {"type": "image_url", "image_url": {"url": not_a_picture}}]}])
    with pytest.raises(openai.BadRequestError) as refused_here:
        await client.chat.completions.create(model="sotto", messages=[{"role": "user", "content": "Hi"}],
                                             logprobs=True)
    assert "JPEG" in undecodable.value.message, undecodable.value.body  # decoded by the gateway on arrival
    assert refused_here.value.param == "logprobs"
