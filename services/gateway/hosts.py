"""Which `Host` names the gateway answers to: its defence against DNS rebinding.

A page on another site can make its own name resolve to 127.0.0.1 once it has loaded; the browser then sends that
page's requests to the gateway, WebSocket included, with the page's name in `Host` (and in `Origin`, which then
equals the host, so the origin check alone lets it in). The gateway serves only the names it is known by: loopback
names and addresses, the address it is bound to, and SOTTO_GATEWAY_ALLOWED_HOSTS; anything else gets 421
(Misdirected Request) on every path. A gateway bound to every address (0.0.0.0 or ::) also serves any IP address:
an address is not a name anyone can rebind, and a page reaches it only under that address's own origin.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from aiohttp import hdrs, web

from services.common import config

_LOGGER = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def host_name(value: str) -> str:
    """'LocalHost.:8000' -> 'localhost', '[::1]:8000' -> '::1': the name or address in a Host header (or a
    setting), without port, brackets, case or trailing dot."""
    return (urlsplit(f"//{value.strip()}").hostname or "").rstrip(".")


def _ip(name: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(name)
    except ValueError:
        return None


class HostPolicy:
    def __init__(self, bind_host: str, allowed_hosts: str) -> None:
        bound = host_name(bind_host)
        self.any_address = (ip := _ip(bound)) is not None and ip.is_unspecified
        self.names = {"localhost", bound} | {host_name(h) for h in allowed_hosts.split(",") if h.strip()}

    def allows(self, host: str) -> bool:
        name = host_name(host)
        if name in self.names:
            return True
        ip = _ip(name)
        return ip is not None and (ip.is_loopback or self.any_address)


def host_check(settings: config.Settings) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
    """The middleware that refuses a request for a host the gateway does not serve."""
    policy = HostPolicy(settings.common.host, settings.gateway.allowed_hosts)

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        host = request.headers.get(hdrs.HOST)
        if host is not None and not policy.allows(host):  # without Host (HTTP/1.0) it is no browser
            _LOGGER.warning("host_refused", extra={"host": host[:100]})
            raise web.HTTPMisdirectedRequest(text=f"this gateway does not serve the host {host[:100]!r}; if it "
                                                  "is one of its names, add it to SOTTO_GATEWAY_ALLOWED_HOSTS")
        return await handler(request)

    return check
