"""Hostile input on /v1/chat/completions and /v1/realtime against fake model services: each attack is refused at
the wire's edge, in OpenAI's error shape, before the llm hears of it, and a client that leaves stops its generation.

The real-stack counterparts (the same attacks against the real llm) are in tests/e2e/test_openai_hostile.py.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import io
import os
import struct
import sys
import zlib
from pathlib import Path

import aiohttp
import pytest
from PIL import Image

from sotto.v1 import llm_pb2_grpc
from tests.gateway.conftest import Stack
from tests.gateway.fakes import FakeLlm, start_fake
from tests.gateway.test_openai_realtime import realtime, text_item
from tests.helpers import eventually
from tools.stack import free_port

ROOT = Path(__file__).resolve().parents[2]

HI = [{"role": "user", "content": "Hi"}]
UINT32_MAX = 2**32 - 1


def jpeg(width: int = 32, height: int = 24) -> bytes:
    """A real JPEG whose header then claims `width` x `height`: a decompression bomb costs a few hundred bytes."""
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), "red").save(buf, "JPEG")
    data = bytearray(buf.getvalue())
    sof = data.index(b"\xff\xc0")
    data[sof + 5:sof + 9] = struct.pack(">HH", height, width)
    return bytes(data)


def png(width: int = 32, height: int = 24) -> bytes:
    """A real PNG whose IHDR then claims `width` x `height` (its checksum made right again)."""
    buf = io.BytesIO()
    Image.new("RGB", (32, 24), "blue").save(buf, "PNG")
    data = bytearray(buf.getvalue())
    data[16:24] = struct.pack(">II", width, height)
    data[29:33] = struct.pack(">I", zlib.crc32(bytes(data[12:29])))
    return bytes(data)


def data_url(data: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64," + base64.b64encode(data).decode()


BAD_IMAGES = {
    "text labelled as a JPEG": (data_url(b"this is plain text, not an image"), "not a decodable"),
    "a 65000x65000 JPEG bomb": (data_url(jpeg(65000, 65000)), "pixel limit"),
    "a 30000x30000 PNG bomb": (data_url(png(30000, 30000), "image/png"), "pixel limit"),
    "a 5000x5000 JPEG over the gateway's limit": (data_url(jpeg(5000, 5000)), "5000x5000 pixels"),
    "a truncated JPEG": (data_url(jpeg()[:200]), "not a decodable"),
    "a PNG labelled as a JPEG": (data_url(png()), "holds a PNG"),
}


def huge_requests() -> dict[str, dict]:
    """The shapes an attack run sent: many messages, megabytes of text with and without spaces, many parts."""
    words = "lorem ipsum " * (2 * 1024 * 1024 // 12)
    return {
        "10,000 messages": {"messages": [{"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i}"}
                                         for i in range(10001)]},
        "2 MB of text": {"messages": [{"role": "user", "content": words}]},
        "7.5 MB of text": {"messages": [{"role": "system", "content": words * 3},
                                        {"role": "user", "content": words[:1_500_000]}]},
        "1 MB without spaces": {"messages": [{"role": "user", "content": "x" * (1024 * 1024)}]},
        "10,000 text parts": {"messages": [{"role": "user", "content": [{"type": "text", "text": "word"}] * 10000}]},
    }


async def post(stack: Stack, body: dict, **kwargs) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as http, \
            http.post(f"{stack.url}/v1/chat/completions", json=body, **kwargs) as response:
        return response.status, await response.json(content_type=None)


async def ask(http: aiohttp.ClientSession, url: str, stream: bool) -> None:
    async with http.post(f"{url}/v1/chat/completions",
                         json={"model": "any", "messages": HI, "stream": stream}) as response:
        await response.read()


def assert_openai_error(body: dict) -> dict:
    assert set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    assert isinstance(body["error"]["message"], str) and body["error"]["message"]
    return body["error"]


# -- 1. token counts beyond what the llm's request carries -------------------------------------------------------
@pytest.mark.parametrize("value", [2**32, 10**12, 2**63 - 1, 2**63])
@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("stream", [False, True])
async def test_a_token_count_beyond_the_protos_range_is_a_400_naming_the_range(
        stack: Stack, value: int, name: str, stream: bool) -> None:
    status, body = await post(stack, {"model": "any", "messages": HI, name: value, "stream": stream})
    error = assert_openai_error(body)
    assert status == 400 and error["param"] == name
    assert f"at least 1 and at most {UINT32_MAX}" in error["message"]
    assert not stack.llm.requests


async def test_the_largest_token_count_the_proto_carries_reaches_the_llm(stack: Stack) -> None:
    status, _ = await post(stack, {"model": "any", "messages": HI, "max_tokens": UINT32_MAX})
    assert status == 200 and stack.llm.requests[-1].sampling.max_new_tokens == UINT32_MAX


# -- 2. requests too large for any model work --------------------------------------------------------------------
@pytest.mark.parametrize("shape", list(huge_requests()))
async def test_a_request_too_large_to_fit_is_a_400_before_the_llm_hears_of_it(stack: Stack, shape: str) -> None:
    status, body = await post(stack, {"model": "any", **huge_requests()[shape]})
    error = assert_openai_error(body)
    assert status == 400 and error["code"] == "context_length_exceeded", error
    assert "SOTTO_GATEWAY_MAX_" in error["message"]
    assert not stack.llm.requests


# -- 3. a client that leaves stops its generation ----------------------------------------------------------------
@pytest.mark.parametrize("stack", [{"request_timeout_ms": 60000}], indirect=True)  # no deadline ends it first
@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_leaves_cancels_its_generation(stack: Stack, stream: bool) -> None:
    stack.llm.first_delay_s = 30.0  # the generation would hold the llm for half a minute

    async with aiohttp.ClientSession() as http:
        request = asyncio.create_task(ask(http, stack.url, stream))
        await eventually(lambda: stack.llm.requests, 5, "the llm to get the request")
        request.cancel()  # the client drops the connection
        await asyncio.gather(request, return_exceptions=True)
    await eventually(lambda: stack.llm.cancelled == 1, 5, "the generation to be cancelled")


@pytest.mark.parametrize("stream", [False, True])
async def test_the_gateway_process_cancels_the_generation_of_a_client_that_leaves(tmp_path, stream: bool) -> None:
    """As `make up` runs it (python -m services.gateway.server), not aiohttp's test server, which cancels a
    departed client's handler by default and so cannot show whether the real server does."""
    llm = FakeLlm(first_delay_s=30.0)  # the generation would hold the llm for half a minute
    server, address = await start_fake(llm, llm_pb2_grpc.add_LlmServiceServicer_to_server, "sotto.v1.LlmService")
    port = free_port()
    env = {**os.environ, "SOTTO_GATEWAY_PORT": str(port), "SOTTO_LLM_ADDR": address,
           "SOTTO_REQUEST_TIMEOUT_MS": "60000", "SOTTO_RUN_DIR": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(sys.executable, "-m", "services.gateway.server", cwd=ROOT, env=env,
                                                stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
    try:
        async with aiohttp.ClientSession() as http:
            async def up() -> bool:
                with contextlib.suppress(aiohttp.ClientError):
                    async with http.get(f"http://127.0.0.1:{port}/v1/models") as response:
                        return response.status == 200
                return False
            for _ in range(300):
                if await up():
                    break
                await asyncio.sleep(0.1)
            request = asyncio.create_task(ask(http, f"http://127.0.0.1:{port}", stream))
            await eventually(lambda: llm.requests, 10, "the llm to get the request")
            request.cancel()  # the client drops the connection
            await asyncio.gather(request, return_exceptions=True)
        await eventually(lambda: llm.cancelled == 1, 5, "the generation to be cancelled")
    finally:
        proc.terminate()
        await proc.wait()
        await server.stop(0)


# -- 4. stream_options.include_usage -----------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["yes", 1, None, {}])
async def test_include_usage_must_be_a_boolean(stack: Stack, value: object) -> None:
    status, body = await post(stack, {"model": "any", "messages": HI, "stream": True,
                                      "stream_options": {"include_usage": value}})
    error = assert_openai_error(body)
    assert status == 400 and error["param"] == "stream_options.include_usage" and "boolean" in error["message"]
    assert not stack.llm.requests


# -- 5 and 6. Realtime fields of the wrong type ------------------------------------------------------------------
@pytest.mark.parametrize(("event", "param"), [
    ({"type": "response.create", "response": {"instructions": 123}}, "response.instructions"),
    ({"type": "response.create", "response": {"instructions": ["Be brief."]}}, "response.instructions"),
    ({"type": "response.create", "response": {"audio": [{"output": {}}]}}, "response.audio"),
    ({"type": "response.create", "response": {"audio": {"output": "af_heart"}}}, "response.audio.output"),
    ({"type": "session.update", "session": {"type": "realtime", "audio": {"input": []}}}, "session.audio.input"),
    ({"type": "session.update", "session": {"type": "realtime", "audio": {"output": ""}}}, "session.audio.output"),
    ({"type": "session.update", "session": {"type": "realtime", "audio": []}}, "session.audio"),
])
async def test_a_realtime_field_of_the_wrong_type_is_an_error_and_changes_nothing(
        stack: Stack, event: dict, param: str) -> None:
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Hi"))
        await events.wait_for("conversation.item.added")
        await events.conn.send({**event, "event_id": "evt_bad"})
        error = await events.wait_for("error")
        await events.conn.session.update(session={"type": "realtime"})
        await events.wait_for("session.updated")  # the session goes on
        assert "response.created" not in events.types()
        assert [e.type for e in events.all].count("session.updated") == 1  # the bad update did not apply
    assert error.error.param == param and error.error.event_id == "evt_bad", error
    assert "must be" in error.error.message
    assert not stack.llm.requests


# -- 7. images decoded and bounded on arrival, on every wire -----------------------------------------------------
@pytest.mark.parametrize("image", list(BAD_IMAGES))
async def test_a_bad_realtime_image_is_refused_when_it_arrives(stack: Stack, image: str) -> None:
    url, words = BAD_IMAGES[image]
    async with realtime(stack) as events:
        await events.conn.send({"type": "conversation.item.create", "item": text_item("What is this?", url)})
        error = await events.wait_for("error")
        await events.conn.response.create()
        nothing = await events.wait_for("error", 2)  # the refused item left nothing to answer
        assert "conversation.item.added" not in events.types()
    assert error.error.param == "item.content[1].image_url" and words in error.error.message, error
    assert "nothing to respond to" in nothing.error.message
    assert not stack.llm.requests


@pytest.mark.parametrize("image", list(BAD_IMAGES))
async def test_a_bad_chat_image_is_a_400(stack: Stack, image: str) -> None:
    url, words = BAD_IMAGES[image]
    status, body = await post(stack, {"model": "any", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "What is this?"}, {"type": "image_url", "image_url": {"url": url}}]}]})
    error = assert_openai_error(body)
    assert status == 400 and error["param"] == "messages[0].content[1].image_url.url" and words in error["message"]
    assert not stack.llm.requests


async def test_realtime_images_held_for_one_answer_are_bounded(stack: Stack) -> None:
    limit = stack.settings.gateway.max_images
    async with realtime(stack) as events:
        for _ in range(limit):
            await events.conn.conversation.item.create(item=text_item("and this", data_url(jpeg())))
        await events.wait_for("conversation.item.added", limit)
        await events.conn.send({"type": "conversation.item.create", "item": text_item("and this", data_url(jpeg()))})
        error = await events.wait_for("error")
    assert "SOTTO_GATEWAY_MAX_IMAGES" in error.error.message


@pytest.mark.parametrize("event", [
    {"type": "session.update", "session": {"type": "realtime", "instructions": "Be brief. " * 10000}},
    {"type": "response.create", "response": {"instructions": "Be brief. " * 10000}},
    {"type": "conversation.item.create", "item": {"type": "message", "role": "assistant", "content": [
        {"type": "output_text", "text": "Sure. " * 20000}]}},
], ids=["session instructions", "response instructions", "an assistant item"])
async def test_realtime_text_beyond_the_prompt_limit_is_refused(stack: Stack, event: dict) -> None:
    async with realtime(stack) as events:
        await events.conn.conversation.item.create(item=text_item("Hi"))
        await events.wait_for("conversation.item.added")
        await events.conn.send(event)
        error = await events.wait_for("error")
        assert not any(e.type in ("response.created", "session.updated") for e in events.all)
        assert [e.type for e in events.all].count("conversation.item.added") == 1
    assert error.error.code == "context_length_exceeded" and "SOTTO_GATEWAY_MAX_PROMPT_CHARS" in error.error.message


# -- the error shape of everything under /v1/ --------------------------------------------------------------------
@pytest.mark.parametrize(("method", "path", "headers", "status"), [
    ("GET", "/v1/chat/completions", {}, 405),
    ("DELETE", "/v1/models", {}, 405),
    ("GET", "/v1/no/such/endpoint", {}, 404),
    ("GET", "/v1", {}, 404),
    ("POST", "/v1/embeddings", {}, 404),
    ("GET", "/v1/models", {"Host": "rebound.example"}, 421),
    ("GET", "/v1/realtime", {}, 400),  # aiohttp's own refusal of a WebSocket handshake without its headers
])
async def test_every_answer_under_v1_is_in_openais_error_shape(
        stack: Stack, method: str, path: str, headers: dict, status: int) -> None:
    async with aiohttp.ClientSession() as http, http.request(method, f"{stack.url}{path}", headers=headers) as response:
        assert response.status == status
        assert response.content_type == "application/json"
        error = assert_openai_error(await response.json())
        if status == 405:
            assert response.headers["Allow"] and response.headers["Allow"] in error["message"]
    assert error["type"] == "invalid_request_error"


async def test_the_page_keeps_its_plain_answers(stack: Stack) -> None:
    async with aiohttp.ClientSession() as http, http.get(f"{stack.url}/no-such-page") as response:
        assert response.status == 404 and response.content_type == "text/plain"
