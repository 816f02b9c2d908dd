"""POST /v1/chat/completions and GET /v1/models, driven by the official openai SDK against fake llm/vad/tts peers:
what reaches the llm service, what the client gets back, and every refusal in OpenAI's shape."""

from __future__ import annotations

import base64
import io

import aiohttp
import grpc
import openai
import pytest
from openai import AsyncOpenAI
from PIL import Image

from tests.gateway.conftest import Stack
from tests.helpers import closed_openai_clients, eventually, openai_client  # noqa: F401 - a fixture

pytestmark = pytest.mark.usefixtures("closed_openai_clients")


def client_for(stack: Stack, api_key: str = "unused") -> AsyncOpenAI:
    return openai_client(f"{stack.url}/v1", api_key)


def jpeg_url(color: str = "red") -> tuple[str, bytes]:
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), color).save(buf, "JPEG")
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode(), buf.getvalue()


async def test_a_completion_with_an_image_reaches_the_llm_and_reports_the_engines_usage(stack: Stack) -> None:
    url, jpeg = jpeg_url()
    reply = await client_for(stack).chat.completions.create(
        model="any", max_tokens=40, temperature=0.2, top_p=0.5, seed=7,
        messages=[{"role": "system", "content": "Be brief."},
                  {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
                  {"role": "user", "content": [{"type": "text", "text": "What is this?"},
                                               {"type": "image_url", "image_url": {"url": url}}]}])
    assert reply.choices[0].message.content == "Hello there. How are you?"
    assert reply.choices[0].finish_reason == "stop" and reply.object == "chat.completion"
    assert (reply.usage.prompt_tokens, reply.usage.completion_tokens, reply.usage.total_tokens) == (12, 5, 17)
    request = stack.llm.requests[-1]
    assert request.system_prompt == "Be brief." and request.user.text == "What is this?"
    assert [image.data for image in request.user.images] == [jpeg]
    assert [(t.role, t.text) for t in request.history] == [(1, "Hi"), (2, "Hello!")]
    s = request.sampling
    assert (s.max_new_tokens, round(s.temperature, 3), s.top_p, s.seed) == (40, 0.2, 0.5, 7)


async def test_a_streamed_completion_arrives_piece_by_piece_then_the_usage(stack: Stack) -> None:
    stream = await client_for(stack).chat.completions.create(
        model="any", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "user", "content": "Hi"}])
    chunks = [chunk async for chunk in stream]
    text = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert text == ["Hello", " there.", " How", " are", " you?"]
    assert chunks[0].choices[0].delta.role == "assistant"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5


async def test_a_stop_sequence_across_pieces_cuts_the_reply_and_cancels_the_generation(stack: Stack) -> None:
    stack.llm.delta_delay_s = 0.05
    stream = await client_for(stack).chat.completions.create(
        model="any", stream=True, stop=["re. H", "never"], messages=[{"role": "user", "content": "Hi"}])
    text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == "Hello the"
    await eventually(lambda: stack.llm.cancelled == 1, 5, "the llm call to be cancelled")
    reply = await client_for(stack).chat.completions.create(
        model="any", stop="How", messages=[{"role": "user", "content": "Hi"}])
    assert reply.choices[0].message.content == "Hello there. " and reply.choices[0].finish_reason == "stop"
    assert reply.usage is None  # the engine counts only a generation it finished


async def test_a_busy_llm_is_a_429_with_retry_after(stack: Stack) -> None:
    stack.llm.fail_with = grpc.StatusCode.RESOURCE_EXHAUSTED
    with pytest.raises(openai.RateLimitError) as caught:
        await client_for(stack).chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}])
    assert caught.value.response.headers["Retry-After"] == str(stack.settings.gateway.retry_after_s)
    assert caught.value.code == "model_busy"


@pytest.mark.parametrize(("extra", "param", "words"), [
    ({"messages": []}, "messages", "non-empty list"),
    ({"messages": [{"role": "assistant", "content": "Hi"}]}, "messages[0].role", "last message"),
    ({"messages": [{"role": "tool", "content": "x", "tool_call_id": "1"}]}, "messages[0].role", "accepted"),
    ({"n": 2}, "n", "accepted: null or 1"),
    ({"tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "not supported"),
    ({"temperature": 3}, "temperature", "between 0 and 2"),
    ({"max_tokens": 0}, "max_tokens", "at least 1"),
    ({"stop": ["a", "b", "c", "d", "e"]}, "stop", "1 to 4"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "https://example.invalid/cat.jpg"}}]}]},
     "messages[0].content[0].image_url.url", "data URL"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/gif;base64,R0lGOD"}}]}]},
     "messages[0].content[0].image_url.url", "image/jpeg, image/png"),
])
async def test_bad_requests_get_a_400_naming_the_parameter(stack: Stack, extra: dict, param: str, words: str) -> None:
    body = {"model": "any", "messages": [{"role": "user", "content": "Hi"}], **extra}
    with pytest.raises(openai.BadRequestError) as caught:
        await client_for(stack).chat.completions.create(**body)
    assert caught.value.param == param and words in caught.value.message, caught.value.body
    assert caught.value.body["type"] == "invalid_request_error"
    assert not stack.llm.requests


async def test_an_unknown_parameter_and_broken_json_are_refused(stack: Stack) -> None:
    with pytest.raises(openai.BadRequestError, match="Unrecognized request argument supplied: tempreture"):
        await client_for(stack).chat.completions.create(model="any", messages=[{"role": "user", "content": "Hi"}],
                                                        extra_body={"tempreture": 1})
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{stack.url}/v1/chat/completions", data=b"{nope") as response:
            assert response.status == 400
            assert "not valid JSON" in (await response.json())["error"]["message"]


@pytest.mark.parametrize("stack", [{"max_request_bytes": 2048}], indirect=True)
async def test_a_body_over_the_limit_is_a_413(stack: Stack) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        await client_for(stack).chat.completions.create(model="any",
                                                        messages=[{"role": "user", "content": "x" * 4000}])
    assert caught.value.status_code == 413 and "SOTTO_GATEWAY_MAX_REQUEST_BYTES" in caught.value.message


@pytest.mark.parametrize("stack", [{"max_messages_per_s": 2}], indirect=True)
async def test_requests_over_the_clients_rate_get_a_429(stack: Stack) -> None:
    client = client_for(stack)
    codes = []
    for _ in range(4):
        try:
            await client.models.list()
            codes.append(200)
        except openai.RateLimitError as exc:
            codes.append(exc.status_code)
            assert exc.response.headers["Retry-After"]
    assert codes[:2] == [200, 200] and 429 in codes[2:]


@pytest.mark.parametrize("stack", [{"token": "s3cret"}], indirect=True)
async def test_the_token_is_the_api_key(stack: Stack) -> None:
    with pytest.raises(openai.AuthenticationError):
        await client_for(stack, api_key="wrong").models.list()
    models = await client_for(stack, api_key="s3cret").models.list()
    assert [m.id for m in models.data] == ["fake"]


async def test_models_lists_the_llms_model_and_a_cross_site_page_is_refused(stack: Stack) -> None:
    client = client_for(stack)
    assert (await client.models.retrieve("fake")).owned_by == "sotto"
    with pytest.raises(openai.NotFoundError):
        await client.models.retrieve("gpt-4o")
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{stack.url}/v1/chat/completions", headers={"Origin": "https://evil.example"},
                             json={"model": "any", "messages": [{"role": "user", "content": "Hi"}]}) as response:
            assert response.status == 403
    assert not stack.llm.requests


@pytest.mark.parametrize("body", [b'{"model": "a", "messages": [{"role": "user", "content": "\\ud800 hi"}]}',
                                  b'{"model": "a", "a": ' + b"[" * 30000 + b"]" * 30000 + b"}",
                                  b'{"model": "a", "max_tokens": ' + b"9" * 5000 + b"}"],
                         ids=["lone surrogate", "deep nesting", "huge integer"])
async def test_hostile_json_is_a_400_like_on_the_websocket(stack: Stack, body: bytes) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.post(f"{stack.url}/v1/chat/completions", data=body) as response:
            assert response.status == 400
            assert "not valid JSON" in (await response.json())["error"]["message"]
    assert not stack.llm.requests
