"""Who may open a session, on every wire: Host, Origin and token checks, the session limits, and a session's
registration with the app while it lives.

Cross-site WebSocket hijacking is refused here: a browser always sends `Origin`, and only the gateway's own origin
(plus any configured ones) may drive the assistant. Off loopback, a token is required as well.
"""

from __future__ import annotations

import contextlib
import hmac
import ipaddress
import logging
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

from aiohttp import web

from services.common import config
from services.gateway import metrics
from services.gateway.app import DEPS, PER_CLIENT, SESSIONS, SETTINGS
from services.gateway.conversation.session import Session

_LOGGER = logging.getLogger(__name__)


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
        # Both limits free the place at once: a session in a reference cycle would count until the next GC, and
        # its close (cancelling a turn, a held utterance) takes a moment the client's next connect need not wait.
        sessions.discard(session)
        per_client[client] -= 1
        metrics.SESSIONS.dec()
        await session.close()
        _LOGGER.info("session_closed", extra={"turns": session.turns})
