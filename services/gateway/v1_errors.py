"""OpenAI's error shape for every answer under `/v1/` that no endpoint wrote itself.

OpenAI clients parse `{"error": {"message", "type", "param", "code"}}` from any failed response. The endpoints
answer their own refusals in that shape; this middleware does the same for what happens around them: an unknown
path (404), a method not served (405), a Host the gateway does not serve (421, from the host check it wraps), the
caller and session checks of `/v1/realtime` (401, 403, 429, 503), aiohttp's own refusals once a request is routed
(a WebSocket handshake without its headers, 400), and a failure nobody foresaw (500). aiohttp's HTTP parser refuses
a malformed request (bad headers, a bad Content-Length) before any path is known, so that plain-text 400 cannot be
told apart from the page's and stays aiohttp's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable

from aiohttp import web

from services.gateway.wires.openai_common import OpenAIError

_LOGGER = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
PREFIX = "/v1/"
_CODES = {400: "invalid_request", 401: "invalid_api_key", 403: "forbidden", 404: "not_found",
          405: "method_not_allowed", 413: "request_too_large", 421: "misdirected_request", 429: "rate_limit_exceeded",
          503: "unavailable"}


def _kind(status: int) -> str:
    if status == 401:
        return "authentication_error"
    if status == 403:
        return "permission_error"
    if status == 429:
        return "rate_limit_error"
    return "server_error" if status >= 500 else "invalid_request_error"


def _message(exc: web.HTTPException, request: web.Request) -> str:
    if exc.status == 404:
        return f"no endpoint at {request.path[:200]}; this server offers /v1/chat/completions, /v1/models and " \
               "/v1/realtime (docs/openai.md)"
    if exc.status == 405:
        allowed = exc.headers.get("Allow", "")
        return f"{request.method} is not accepted on {request.path[:200]}; accepted: {allowed}"
    text = exc.text or ""
    return text.removeprefix(f"{exc.status}: ") if text else exc.reason


def error_response(exc: web.HTTPException, request: web.Request) -> web.Response:
    """The same status and headers (Allow, Retry-After, ...), with OpenAI's error object as the body."""
    error = OpenAIError(_message(exc, request), code=_CODES.get(exc.status, "http_error"), kind=_kind(exc.status),
                        status=exc.status)
    headers = {k: v for k, v in exc.headers.items() if k.lower() not in ("content-type", "content-length")}
    return web.json_response({"error": error.body()}, status=exc.status, reason=exc.reason, headers=headers)


@web.middleware
async def v1_error_shape(request: web.Request, handler: Handler) -> web.StreamResponse:
    if not (request.path + "/").startswith(PREFIX):
        return await handler(request)
    try:
        return await handler(request)
    except web.HTTPException as exc:
        if exc.status < 400:
            raise  # a redirect is no error
        return error_response(exc, request)
    except Exception:  # anything unforeseen is still an answer the client can parse, if none has begun
        if request.writer.output_size > 0:
            raise
        _LOGGER.exception("v1_unhandled_error", extra={"path": request.path[:200]})
        return web.json_response({"error": OpenAIError("the server failed to answer this request",
                                                       kind="server_error", code="internal", status=500).body()},
                                 status=500)
