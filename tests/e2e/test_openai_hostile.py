"""The attack run's holes, replayed against the real stack (real gateway process, real llm on the tiny multimodal
model): each hostile request is refused in OpenAI's error shape before the llm does any work, and a client that
leaves frees the llm at once, on every wire and in every mode.

The same refusals against fake peers, case by case, are in tests/gateway/test_openai_hostile.py. Timings are
printed (run with -s), not asserted: the assertions are the engine's own counters.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Iterator

import aiohttp
import pytest

from tests.e2e.test_openai import realtime
from tests.gateway.test_openai_hostile import BAD_IMAGES, assert_openai_error, huge_requests
from tests.helpers import eventually
from tools.stack import RealStack, start_stack, stop_stack

# The random-weight model, sampling greedily, answers this with no end of turn: it decodes until its length limit
# (one to two seconds here), long enough for a client to leave in the middle. Greedy by default (SOTTO_LLM_TEMPERATURE),
# so that a Realtime answer, which cannot set a temperature, is as long.
LONG = {"role": "user", "content": "a"}
LONG_REPLY = {"max_tokens": 1900}


@pytest.fixture(scope="module")
def real_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    stack = start_stack(tmp_path_factory.mktemp("stack"), SOTTO_LLM_TEMPERATURE="0")
    yield stack
    stop_stack(stack)


def counter(stack: RealStack) -> Callable[[], float]:
    return lambda: stack.metric("llm", "sotto_llm_cancelled_total")


def llm_busy(stack: RealStack) -> bool:
    return stack.metric("llm", "sotto_llm_active_requests") > 0


async def post(stack: RealStack, body: dict) -> tuple[int, dict, float]:
    """The answer, and the seconds from sending the (already encoded) body to the whole answer."""
    data = json.dumps(body).encode()
    async with aiohttp.ClientSession() as http:
        start = time.perf_counter()
        async with http.post(f"{stack.http_url}/v1/chat/completions", data=data,
                             headers={"Content-Type": "application/json"}) as response:
            return response.status, await response.json(content_type=None), time.perf_counter() - start


async def drop_while_generating(stack: RealStack, body: dict) -> float:
    """Sends `body`, leaves once the llm is generating, and returns the seconds until the llm is free again."""
    async def ask(http: aiohttp.ClientSession) -> None:
        async with http.post(f"{stack.http_url}/v1/chat/completions", json=body) as response:
            await response.read()

    async with aiohttp.ClientSession() as http:
        request = asyncio.create_task(ask(http))
        await eventually(lambda: llm_busy(stack), 30, "the llm to start generating")
        request.cancel()
        await asyncio.gather(request, return_exceptions=True)
    left = time.perf_counter()
    await eventually(lambda: not llm_busy(stack), 30, "the llm to be free", interval=0.005)
    return time.perf_counter() - left


@pytest.mark.parametrize("stream", [False, True], ids=["non-streamed", "streamed"])
async def test_clients_that_leave_free_the_llm_at_once(real_stack: RealStack, stream: bool) -> None:
    cancelled = counter(real_stack)
    before = cancelled()
    freed = [await drop_while_generating(real_stack, {"model": "sotto", "messages": [LONG], "stream": stream,
                                                       **LONG_REPLY}) for _ in range(5)]
    print(f"\nllm free after a dropped {'streamed' if stream else 'non-streamed'} request: "
          f"{', '.join(f'{s * 1000:.0f}' for s in freed)} ms (polled every 5 ms)")
    assert cancelled() == before + 5, "each dropped request's generation was cancelled, not finished"
    status, body, _ = await post(real_stack, {"model": "sotto", "messages": [LONG], "max_tokens": 8})
    assert status == 200, body  # not busy with the abandoned ones


async def test_a_realtime_client_that_leaves_frees_the_llm(real_stack: RealStack) -> None:
    cancelled = counter(real_stack)
    before = cancelled()
    async with realtime(real_stack) as events:
        await events.conn.session.update(session={"type": "realtime", "max_output_tokens": 1900, "instructions": ""})
        await events.conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": LONG["content"]}]})
        await events.conn.response.create()
        await eventually(lambda: llm_busy(real_stack), 30, "the llm to start generating")
    await eventually(lambda: not llm_busy(real_stack), 5, "the llm to be free")
    assert cancelled() == before + 1


@pytest.mark.parametrize("name", ["max_tokens", "max_completion_tokens"])
@pytest.mark.parametrize("value", [2**32, 10**12, 2**63 - 1, 2**63])
async def test_a_token_count_beyond_the_protos_range_is_a_400(real_stack: RealStack, name: str, value: int) -> None:
    status, body, _ = await post(real_stack, {"model": "sotto", "messages": [LONG], name: value})
    assert status == 400 and assert_openai_error(body)["param"] == name, body


@pytest.mark.parametrize("shape", list(huge_requests()))
async def test_a_request_too_large_is_a_400_before_any_model_work(real_stack: RealStack, shape: str) -> None:
    prefilled = real_stack.metric("llm", "sotto_llm_prefill_tokens_total")
    status, body, seconds = await post(real_stack, {"model": "sotto", **huge_requests()[shape]})
    print(f"\n{shape}: {status} in {seconds * 1000:.0f} ms")
    assert status == 400 and assert_openai_error(body)["code"] == "context_length_exceeded", body
    assert real_stack.metric("llm", "sotto_llm_prefill_tokens_total") == prefilled
    assert not llm_busy(real_stack)


async def test_include_usage_must_be_a_boolean(real_stack: RealStack) -> None:
    status, body, _ = await post(real_stack, {"model": "sotto", "messages": [LONG], "stream": True,
                                              "stream_options": {"include_usage": "yes"}})
    assert status == 400 and assert_openai_error(body)["param"] == "stream_options.include_usage", body


@pytest.mark.parametrize(("event", "param"), [
    ({"type": "response.create", "response": {"instructions": 123}}, "response.instructions"),
    ({"type": "session.update", "session": {"type": "realtime", "audio": {"input": []}}}, "session.audio.input"),
])
async def test_a_realtime_field_of_the_wrong_type_is_an_error(real_stack: RealStack, event: dict, param: str) -> None:
    async with realtime(real_stack) as events:
        await events.conn.conversation.item.create(item={"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "Hi"}]})
        await events.wait_for("conversation.item.added")
        await events.conn.send(event)
        error = await events.wait_for("error")
    assert error.error.param == param, error
    assert not any(e.type in ("response.created", "session.updated") for e in events.all)


@pytest.mark.parametrize("image", ["text labelled as a JPEG", "a 65000x65000 JPEG bomb", "a 30000x30000 PNG bomb"])
async def test_a_bad_image_is_refused_on_arrival_on_both_wires(real_stack: RealStack, image: str) -> None:
    url, words = BAD_IMAGES[image]
    async with realtime(real_stack) as events:
        await events.conn.send({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
                                "content": [{"type": "input_image", "image_url": url}]}})
        error = await events.wait_for("error")
    assert words in error.error.message and "conversation.item.added" not in [e.type for e in events.all]
    status, body, _ = await post(real_stack, {"model": "sotto", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": url}}]}]})
    assert status == 400 and words in assert_openai_error(body)["message"], body


@pytest.mark.parametrize(("method", "path", "headers", "status"), [
    ("GET", "/v1/chat/completions", {}, 405),
    ("GET", "/v1/files", {}, 404),
    ("GET", "/v1/models", {"Host": "rebound.example"}, 421),
    ("GET", "/v1/realtime", {}, 400),
])
async def test_every_answer_under_v1_is_in_openais_error_shape(real_stack: RealStack, method: str, path: str,
                                                               headers: dict, status: int) -> None:
    async with aiohttp.ClientSession() as http, \
            http.request(method, f"{real_stack.http_url}{path}", headers=headers) as response:
        assert response.status == status and response.content_type == "application/json"
        assert_openai_error(await response.json())
