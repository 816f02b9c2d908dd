"""The `/ws` endpoint: who may connect, and the read loop that feeds a Session.

Cross-site WebSocket hijacking is refused here: a browser always sends `Origin`, and only the gateway's own origin
(plus any configured ones) may drive the assistant. Off loopback, a token is required as well.
"""

from __future__ import annotations

import hmac
import ipaddress
import logging
import weakref
from collections import Counter
from urllib.parse import urlsplit

from aiohttp import WSMsgType, web

from services.common import config, logs
from services.gateway import metrics
from services.gateway.dependencies import Dependencies
from services.gateway.session import Session

_LOGGER = logging.getLogger(__name__)

SETTINGS = web.AppKey("settings", config.Settings)
DEPS = web.AppKey("deps", Dependencies)
SESSIONS = web.AppKey("sessions", weakref.WeakSet)
PER_CLIENT = web.AppKey("per_client", Counter)
MODEL = web.AppKey("model", dict)


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


async def websocket(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    gw = settings.gateway
    if not origin_allowed(request, gw):
        _LOGGER.warning("ws_refused_origin", extra={"origin": request.headers.get("Origin")})
        raise web.HTTPForbidden(text="cross-origin WebSocket connections are refused")
    if gw.token and not hmac.compare_digest(request.query.get("token", ""), gw.token):
        raise web.HTTPUnauthorized(text="a valid ?token= is required")
    sessions, per_client = request.app[SESSIONS], request.app[PER_CLIENT]
    client = request.remote or "?"
    if len(sessions) >= gw.max_sessions:
        raise web.HTTPServiceUnavailable(text=f"the gateway already has {gw.max_sessions} sessions open")
    if per_client[client] >= gw.max_sessions_per_client:
        raise web.HTTPTooManyRequests(text=f"at most {gw.max_sessions_per_client} sessions per client")
    # aiohttp's own cap is set above ours, so a moderately oversized message gets a clear `too_large` error and
    # the socket stays usable; only something far over the limit closes it (code 1009, message too big).
    cap = 4 * max(gw.max_message_bytes, gw.max_jpeg_bytes, gw.max_audio_frame_bytes) + 64
    ws = web.WebSocketResponse(max_msg_size=cap, heartbeat=30)
    await ws.prepare(request)
    deps = request.app[DEPS]
    session = Session(ws=ws, cfg=settings, channels=deps.channels, model=request.app[MODEL], health=deps.status)
    sessions.add(session)
    per_client[client] += 1
    metrics.SESSIONS.inc()
    deps.listeners.append(session.on_health)
    with logs.bound(session.id):
        try:
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
            deps.listeners.remove(session.on_health)
            sessions.discard(session)  # at once: a session in a reference cycle would count until the next GC
            await session.close()
            per_client[client] -= 1
            metrics.SESSIONS.dec()
            _LOGGER.info("session_closed", extra={"turns": session.turns})
            await ws.close()
    return ws
