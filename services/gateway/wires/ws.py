"""The `/ws` endpoint: who may connect, and the read loop that feeds a Session.

Cross-site WebSocket hijacking is refused here: a browser always sends `Origin`, and only the gateway's own origin
(plus any configured ones) may drive the assistant. Off loopback, a token is required as well.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
import weakref
from collections import Counter
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from services.common import config, logs
from services.gateway import metrics
from services.gateway.links.dependencies import Dependencies
from services.gateway.conversation import events
from services.gateway.conversation.session import Session
from services.gateway.wires.protocol import serialize

_LOGGER = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", config.Settings)
DEPS = web.AppKey("deps", Dependencies)
SESSIONS = web.AppKey("sessions", weakref.WeakSet)
PER_CLIENT = web.AppKey("per_client", Counter)
MODEL = web.AppKey("model", dict)


class V1Output:
    """The session's events onto a `/ws` socket, serialized as protocol v1."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws

    async def send(self, item: events.Event) -> None:
        data = serialize(item)
        if isinstance(data, bytes):
            await self.ws.send_bytes(data)
        else:
            await self.ws.send_str(data)

    async def close(self, *, code: int = 1000, message: bytes = b"") -> None:
        await self.ws.close(code=code, message=message)


def is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def origin_allowed(request: web.Request, gw: config.GatewayConfig) -> bool:
    origin = request.headers.get("Origin")
    if origin is None:
        return True  # not a browser: nothing can be hijacked
    allowed = {o.strip().rstrip("/") for o in gw.allowed_origins.split(",") if o.strip()}
    if origin.rstrip("/") in allowed:
        return True
    parts = urlsplit(origin)
    return parts.netloc == request.host and parts.scheme in ("http", "https")


def presented_token(request: web.Request) -> str:
    """`?token=` (the page), or `Authorization: Bearer` (OpenAI clients send their api_key that way)."""
    auth = request.headers.get("Authorization", "")
    bearer = auth[7:].strip() if auth[:7].lower() == "bearer " else ""
    return request.query.get("token", "") or bearer


def check_caller(request: web.Request) -> None:
    """Refuse another site's page, and off loopback anyone without the token (raises an HTTP error)."""
    gw = request.app[SETTINGS].gateway
    if not origin_allowed(request, gw):
        _LOGGER.warning("refused_origin", extra={"origin": request.headers.get("Origin"), "path": request.path})
        raise web.HTTPForbidden(text="cross-origin requests are refused")
    if gw.token and not hmac.compare_digest(presented_token(request), gw.token):
        raise web.HTTPUnauthorized(text="a valid ?token= (or Authorization: Bearer) is required")


def check_session_room(request: web.Request) -> None:
    """The gateway's and the client's session limits, before a socket is accepted."""
    gw = request.app[SETTINGS].gateway
    if len(request.app[SESSIONS]) >= gw.max_sessions:
        raise web.HTTPServiceUnavailable(text=f"the gateway already has {gw.max_sessions} sessions open")
    if request.app[PER_CLIENT][request.remote or "?"] >= gw.max_sessions_per_client:
        raise web.HTTPTooManyRequests(text=f"at most {gw.max_sessions_per_client} sessions per client")


@contextlib.asynccontextmanager
async def registered(request: web.Request, session: Session) -> AsyncIterator[None]:
    """Count the session against the limits and tell it of health changes while it lives; close it after."""
    sessions, per_client, deps = request.app[SESSIONS], request.app[PER_CLIENT], request.app[DEPS]
    client = request.remote or "?"
    sessions.add(session)
    per_client[client] += 1
    metrics.SESSIONS.inc()
    deps.listeners.append(session.on_health)
    try:
        yield
    finally:
        deps.listeners.remove(session.on_health)
        sessions.discard(session)  # at once: a session in a reference cycle would count until the next GC
        await session.close()
        per_client[client] -= 1
        metrics.SESSIONS.dec()
        _LOGGER.info("session_closed", extra={"turns": session.turns})


async def websocket(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    gw = settings.gateway
    check_caller(request)
    check_session_room(request)
    # aiohttp's own cap is set above ours, so a moderately oversized message gets a clear `too_large` error and
    # the socket stays usable; only something far over the limit closes it (code 1009, message too big).
    cap = 4 * max(gw.max_message_bytes, gw.max_jpeg_bytes, gw.max_audio_frame_bytes) + 64
    ws = web.WebSocketResponse(max_msg_size=cap, heartbeat=30)
    await ws.prepare(request)
    deps = request.app[DEPS]
    session = Session(output=V1Output(ws), cfg=settings, channels=deps.channels, model=request.app[MODEL],
                      health=deps.status)
    with logs.bound(session.id):
        try:
            async with registered(request, session):
                async for msg in ws:
                    if msg.type == WSMsgType.TEXT:
                        if not await session.on_text(msg.data):
                            break
                    elif msg.type == WSMsgType.BINARY:
                        if not await session.on_binary(msg.data):
                            break
                    elif msg.type == WSMsgType.ERROR:
                        break
        finally:
            await ws.close()
    return ws
