"""`POST /v1/chat/completions` and `GET /v1/models`, OpenAI-compatible, backed by the llm service (docs/openai.md).

Same callers as `/ws` (origin check; off loopback the token, here also as `Authorization: Bearer`), the same
message rate per client. A busy llm is a 429 with Retry-After; a refused request a 400 in OpenAI's error shape.
Stop sequences are applied here, to the streamed text: the llm service has none, so the generation is cancelled
where one appears.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from aiohttp import web

from services.common import logs
from services.gateway import metrics
from services.gateway.wires.chat_request import ChatRequest, parse_chat_request
from services.gateway.wires.openai_common import OpenAIError, new_id
from services.gateway.wires.protocol import ProtocolError, decode_json
from services.gateway.conversation.rate_limit import RateLimiter
from services.gateway.access import check_caller
from services.gateway.app import DEPS, LIMITS, SETTINGS
from sotto.v1 import llm_pb2, llm_pb2_grpc

_LOGGER = logging.getLogger(__name__)
INFO_TIMEOUT_S = 2.0
_FINISH = {llm_pb2.STOP: "stop", llm_pb2.LENGTH: "length", llm_pb2.DEGRADED: "length"}
_MAX_CLIENTS = 1024  # rate buckets kept (least recently seen dropped): a bound on memory, not on anyone's rate


class ClientRates:
    """One message-rate bucket per client address, as each /ws session has one."""

    def __init__(self, per_second: float) -> None:
        self.per_second = per_second
        self._buckets: OrderedDict[str, RateLimiter] = OrderedDict()

    def admit(self, client: str) -> bool:
        bucket = self._buckets.pop(client, None) or RateLimiter(per_second=self.per_second)
        self._buckets[client] = bucket
        while len(self._buckets) > _MAX_CLIENTS:
            self._buckets.popitem(last=False)
        return bucket.admit()


CLIENT_RATES = web.AppKey("client_rates", ClientRates)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def openai_errors(endpoint: str) -> Callable[[Handler], Handler]:
    """Every refusal in OpenAI's error shape ({"error": {...}}), counted by endpoint and status."""
    def wrap(handler: Handler) -> Handler:
        @functools.wraps(handler)
        async def run(request: web.Request) -> web.StreamResponse:
            try:
                check_caller(request)
                if not request.app[CLIENT_RATES].admit(request.remote or "?"):
                    per_s = request.app[SETTINGS].gateway.max_messages_per_s
                    raise OpenAIError(f"more than {per_s} requests per second from this client",
                                      kind="rate_limit_error", code="rate_limit_exceeded", status=429)
                response = await handler(request)
            except OpenAIError as exc:
                response = _error_response(request, exc)
            except web.HTTPException as exc:  # the caller checks: 401, 403
                code = "invalid_api_key" if exc.status == 401 else "forbidden"
                response = _error_response(request, OpenAIError(exc.text or exc.reason, code=code, status=exc.status))
            metrics.OPENAI_REQUESTS.labels(endpoint, str(response.status)).inc()
            return response
        return run
    return wrap


def _error_response(request: web.Request, exc: OpenAIError) -> web.Response:
    headers = {"Retry-After": str(request.app[SETTINGS].gateway.retry_after_s)} if exc.status == 429 else None
    return web.json_response({"error": exc.body()}, status=exc.status, headers=headers)


async def read_json(request: web.Request, limit: int) -> Any:
    """The body as JSON, read up to `limit` bytes (the app's own 1 MiB cap would refuse a photo)."""
    if request.content_length is not None and request.content_length > limit:
        raise OpenAIError(f"the request body of {request.content_length} bytes is over the {limit}-byte limit "
                          "(SOTTO_GATEWAY_MAX_REQUEST_BYTES)", code="request_too_large", status=413)
    body = bytearray()
    async for chunk in request.content.iter_chunked(1 << 16):
        body += chunk
        if len(body) > limit:
            raise OpenAIError(f"the request body is over the {limit}-byte limit (SOTTO_GATEWAY_MAX_REQUEST_BYTES)",
                              code="request_too_large", status=413)
    try:
        return decode_json(bytes(body))  # the same safe decoding as /ws (depth, number size, lone surrogates)
    except ProtocolError as exc:
        raise OpenAIError(f"the body is {exc.message}") from None


def rpc_error(exc: grpc.aio.AioRpcError, retry_after_s: int) -> OpenAIError:
    code = exc.code()
    if code == grpc.StatusCode.RESOURCE_EXHAUSTED:
        return OpenAIError(f"the model is busy with other requests; retry in {retry_after_s} s",
                           kind="rate_limit_error", code="model_busy", status=429)
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return OpenAIError(exc.details() or "the model refused the request", code="invalid_request")
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return OpenAIError("the model did not answer in time", kind="server_error", code="timeout", status=504)
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED):
        return OpenAIError(f"the model service is unavailable ({exc.details()})", kind="server_error",
                           code="unavailable", status=503)
    return OpenAIError(f"{code.name}: {exc.details()}", kind="server_error", code="internal", status=500)


class StopScanner:
    """Cuts streamed text at the first stop sequence, holding back only a tail that might begin one."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = stops
        self._held = ""
        self.stopped = False

    def feed(self, delta: str) -> str:
        """The text that is safe to send now; sets `stopped` when a stop sequence appeared."""
        text = self._held + delta
        hits = [i for i in (text.find(s) for s in self.stops) if i >= 0]
        if hits:
            self.stopped, self._held = True, ""
            return text[:min(hits)]
        keep = max((k for s in self.stops for k in range(1, len(s)) if text.endswith(s[:k])), default=0)
        self._held = text[len(text) - keep:] if keep else ""
        return text[:len(text) - keep]

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held


class _Generation:
    """One llm call read to its end (or to a stop sequence): text pieces out, the engine's counts kept."""

    def __init__(self, call: grpc.aio.UnaryStreamCall, stops: tuple[str, ...]) -> None:
        self.call = call
        self.scanner = StopScanner(stops)
        self.finish = "stop"
        self.usage: dict[str, int] | None = None

    async def first(self, timeout_s: float, retry_after_s: int) -> llm_pb2.GenerateEvent:
        """The first event; a refusal (busy, invalid) arrives here, before any answer has been sent."""
        try:
            async with asyncio.timeout(timeout_s):
                return await self.call.read()
        except TimeoutError:
            raise OpenAIError("the model did not start answering in time", kind="server_error", code="timeout",
                              status=504) from None
        except grpc.aio.AioRpcError as exc:
            raise rpc_error(exc, retry_after_s) from None

    async def pieces(self, first: Any, retry_after_s: int):
        message = first
        try:
            while message is not grpc.aio.EOF:
                if message.HasField("done"):
                    done = message.done
                    self.finish = _FINISH.get(done.finish_reason, "stop")
                    self.usage = {"prompt_tokens": done.timings.prefill_tokens,
                                  "completion_tokens": done.timings.decode_tokens,
                                  "total_tokens": done.timings.prefill_tokens + done.timings.decode_tokens}
                elif message.text_delta:
                    text = self.scanner.feed(message.text_delta)
                    if text:
                        yield text
                    if self.scanner.stopped:
                        # the engine's counts come only with a finished generation: none for a cut one
                        self.call.cancel()
                        self.finish = "stop"
                        return
                message = await self.call.read()
        except grpc.aio.AioRpcError as exc:
            raise rpc_error(exc, retry_after_s) from None
        if tail := self.scanner.flush():
            yield tail


@openai_errors("chat.completions")
async def chat_completions(request: web.Request) -> web.StreamResponse:
    gw, limits = request.app[SETTINGS].gateway, request.app[LIMITS]
    body = await read_json(request, gw.max_request_bytes)
    chat = await asyncio.to_thread(parse_chat_request, body, gw)  # images are decoded in it
    completion_id = new_id("chatcmpl")
    chat.generate.turn_id = completion_id
    stub = llm_pb2_grpc.LlmServiceStub(request.app[DEPS].channels["llm"])
    with logs.bound(turn_id=completion_id):
        _LOGGER.info("chat_completion", extra={"stream": chat.stream, "images": len(chat.generate.user.images),
                                               "history_turns": len(chat.generate.history)})
        call = stub.Generate(chat.generate, timeout=limits.turn_deadline_s, metadata=logs.grpc_metadata())
    generation = _Generation(call, chat.stop)
    try:  # a client that leaves cancels this handler (handler_cancellation, server.py): the finally frees the llm
        first = await generation.first(limits.request_timeout_s, gw.retry_after_s)
        head = {"id": completion_id, "created": int(time.time()), "model": chat.model, "system_fingerprint": None}
        if chat.stream:
            return await _stream(request, generation, first, head, chat, gw.retry_after_s)
        text = "".join([piece async for piece in generation.pieces(first, gw.retry_after_s)])
        return web.json_response({
            **head, "object": "chat.completion",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                         "finish_reason": generation.finish, "logprobs": None}],
            "usage": generation.usage})
    finally:
        if not call.done():
            call.cancel()


async def _stream(request: web.Request, generation: _Generation, first: Any, head: dict, chat: ChatRequest,
                  retry_after_s: int) -> web.StreamResponse:
    """Server-sent events, one chunk per piece of text, then the finish reason, the usage if asked, [DONE]."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)

    async def send(choices: list[dict], **extra: Any) -> None:
        chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
        await response.write(f"data: {json.dumps(chunk, ensure_ascii=False)}\n\n".encode())

    def choice(delta: dict, finish: str | None = None) -> list[dict]:
        return [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]

    await send(choice({"role": "assistant", "content": ""}))
    try:
        async for piece in generation.pieces(first, retry_after_s):
            await send(choice({"content": piece}))
    except OpenAIError as exc:  # after the 200: the error travels as an event, as OpenAI's own stream does
        await response.write(f"data: {json.dumps({'error': exc.body()})}\n\n".encode())
        return response
    await send(choice({}, generation.finish))
    if chat.include_usage:
        await send([], usage=generation.usage)
    await response.write(b"data: [DONE]\n\n")
    await response.write_eof()
    return response


async def _model_entry(request: web.Request) -> dict:
    stub = llm_pb2_grpc.LlmServiceStub(request.app[DEPS].channels["llm"])
    try:
        info = await stub.GetModelInfo(llm_pb2.GetModelInfoRequest(), timeout=INFO_TIMEOUT_S)
    except grpc.aio.AioRpcError as exc:
        raise rpc_error(exc, request.app[SETTINGS].gateway.retry_after_s) from None
    return {"id": info.model, "object": "model", "created": 0, "owned_by": "sotto"}


@openai_errors("models")
async def list_models(request: web.Request) -> web.Response:
    return web.json_response({"object": "list", "data": [await _model_entry(request)]})


@openai_errors("models")
async def retrieve_model(request: web.Request) -> web.Response:
    entry = await _model_entry(request)
    if request.match_info["model"] != entry["id"]:
        raise OpenAIError(f"The model '{request.match_info['model']}' does not exist; this gateway serves "
                          f"'{entry['id']}'", code="model_not_found", status=404)
    return web.json_response(entry)


def add_routes(app: web.Application) -> None:
    app[CLIENT_RATES] = ClientRates(app[SETTINGS].gateway.max_messages_per_s)
    app.router.add_post("/v1/chat/completions", chat_completions)
    app.router.add_get("/v1/models", list_models)
    app.router.add_get("/v1/models/{model}", retrieve_model)
