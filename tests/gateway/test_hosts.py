"""DNS rebinding: a page on another site whose name is made to resolve to 127.0.0.1 reaches the gateway with its
own name in `Host` (and, on /ws, as `Origin`, so the origin check alone lets it in). The gateway serves only the
names it is known by: loopback names and addresses, the address it is bound to, and SOTTO_GATEWAY_ALLOWED_HOSTS.
"""

from __future__ import annotations

import aiohttp
import pytest

REBIND = "rebind.evil.example"


def _port(stack) -> int:
    return int(stack.url.rsplit(":", 1)[1])


@pytest.mark.parametrize("path", ["/", "/metrics", "/healthz", "/ws"])
async def test_a_rebound_host_name_is_refused_on_every_path(stack, path) -> None:
    host = f"{REBIND}:{_port(stack)}"
    async with aiohttp.ClientSession() as http:
        if path == "/ws":
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                await http.ws_connect(f"{stack.url}/ws", headers={"Host": host, "Origin": f"http://{host}"})
            assert info.value.status == 421
            return
        async with http.get(f"{stack.url}{path}", headers={"Host": host}) as reply:
            assert reply.status == 421
            assert "SOTTO_GATEWAY_ALLOWED_HOSTS" in await reply.text()


@pytest.mark.parametrize("name", ["127.0.0.1", "localhost", "LocalHost.", "127.0.0.2", "[::1]"])
async def test_loopback_names_and_addresses_are_served(stack, name) -> None:
    host = f"{name}:{_port(stack)}"
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{stack.url}/metrics", headers={"Host": host}) as reply:
            assert reply.status == 200
        ws = await http.ws_connect(f"{stack.url}/ws", headers={"Host": host, "Origin": f"http://{host}"})
        await ws.close()


@pytest.mark.parametrize("stack", [{"allowed_hosts": "assistant.lan, Other.Example"}], indirect=True)
async def test_configured_hosts_are_served_and_others_still_refused(stack) -> None:
    async with aiohttp.ClientSession() as http:
        for name in ("assistant.lan", "other.example"):
            host = f"{name}:{_port(stack)}"
            ws = await http.ws_connect(f"{stack.url}/ws", headers={"Host": host, "Origin": f"http://{host}"})
            await ws.close()
        async with http.get(f"{stack.url}/", headers={"Host": f"{REBIND}:{_port(stack)}"}) as reply:
            assert reply.status == 421
