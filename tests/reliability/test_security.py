"""Security on the real stack: loopback-only binds, cross-origin WebSockets refused, exposure without a token
refused, sessions per client limited, and no user content (prompt, transcript, reply, audio) in the logs.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import os
import re
import subprocess
import sys

import aiohttp
import psutil
import pytest
import yaml

from services.common import config
from services.gateway.client import GatewayClient
from services.gateway.server import check_exposure
from tests.reliability.conftest import pids
from tools.stack import ROOT, RealStack, free_port

# Distinctive words no model, log template or library would produce by chance.
TYPED_SECRET = "quokkaxylophone"
SPOKEN_SECRET = "Marmalade zeppelin over Kathmandu"


def test_every_default_bind_is_loopback() -> None:
    settings = config.load_all({})
    assert settings.common.host == "127.0.0.1"
    assert check_exposure(settings) is None
    gw = settings.gateway
    for explicit in (gw.vad_addr, gw.llm_addr, gw.tts_addr):
        assert explicit == ""  # empty means SOTTO_HOST:port, i.e. loopback
    # compose binds 0.0.0.0 inside its private network, but publishes on the host's loopback only
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for name, service in compose["services"].items():
        for port in service.get("ports", []):
            assert str(port).startswith("${SOTTO_GATEWAY_PUBLISH_ADDR:-127.0.0.1}:") or \
                str(port).startswith("127.0.0.1:"), (name, port)


def is_loopback(ip: str) -> bool:
    addr = ipaddress.ip_address(ip)
    mapped = getattr(addr, "ipv4_mapped", None)  # the metrics servers' dual-stack sockets: ::ffff:127.0.0.1
    return addr.is_loopback or (mapped is not None and mapped.is_loopback)


def test_a_running_stack_listens_on_loopback_only(stack: RealStack) -> None:
    listening = {}
    for name, pid in pids(stack).items():
        for conn in psutil.Process(pid).net_connections(kind="inet"):
            if conn.status == psutil.CONN_LISTEN:
                listening.setdefault(name, []).append(f"{conn.laddr.ip}:{conn.laddr.port}")
    assert set(listening) >= {"vad", "llm", "tts", "gateway"}, listening
    exposed = {n: a for n, a in listening.items() if not all(is_loopback(x.rsplit(":", 1)[0]) for x in a)}
    assert not exposed, f"listening beyond loopback: {exposed}"
    print(f"\nlistening sockets: {listening}")


async def test_cross_origin_websocket_is_refused_by_the_real_gateway(stack: RealStack) -> None:
    async with aiohttp.ClientSession() as http:
        for origin in ("https://evil.example", "http://127.0.0.1.evil.example", "null",
                       f"http://localhost:{stack.ports['SOTTO_GATEWAY_PORT'] + 1}"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                await http.ws_connect(stack.ws_url, headers={"Origin": origin})
            assert info.value.status == 403, origin
        ws = await http.ws_connect(stack.ws_url, headers={"Origin": stack.http_url})  # its own page
        await ws.close()


async def test_dns_rebinding_is_refused_by_the_real_gateway(stack: RealStack) -> None:
    """A page on another site whose name now resolves to 127.0.0.1: its `Origin` equals its `Host`, so only the
    Host check stands in its way, on the page's HTTP requests and on /ws alike."""
    host = f"rebind.evil.example:{stack.ports['SOTTO_GATEWAY_PORT']}"
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(stack.ws_url, headers={"Host": host, "Origin": f"http://{host}"})
        assert info.value.status == 421
        async with http.get(f"{stack.http_url}/", headers={"Host": host}) as reply:
            assert reply.status == 421
        async with http.get(f"{stack.http_url}/healthz") as reply:  # the gateway's own name is still served
            assert reply.status == 200


def test_non_loopback_host_without_token_is_refused(tmp_path) -> None:
    settings = config.load_all({})
    exposed = dataclasses.replace(settings, common=dataclasses.replace(settings.common, host="0.0.0.0"))
    with pytest.raises(config.ConfigError):  # checked in process first: the subprocess below must never bind
        check_exposure(exposed)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SOTTO_")}
    env |= {"SOTTO_HOST": "0.0.0.0", "SOTTO_GATEWAY_PORT": str(free_port()), "SOTTO_RUN_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "services.gateway.server"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc
    assert "SOTTO_HOST=0.0.0.0 is not a loopback address" in proc.stderr
    assert "SOTTO_GATEWAY_TOKEN" in proc.stderr
    assert "Traceback" not in proc.stderr


async def test_sessions_per_client_are_limited_on_the_real_gateway(stack: RealStack) -> None:
    limit = config.load_all({}).gateway.max_sessions_per_client
    clients = []
    try:
        for _ in range(limit):
            client = GatewayClient(stack.ws_url)
            await client.connect()
            clients.append(client)
        async with aiohttp.ClientSession() as http:
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                await http.ws_connect(stack.ws_url)
            assert info.value.status == 429
    finally:
        for client in clients:
            await client.close()
    async with GatewayClient(stack.ws_url):  # a slot is free again once a session closes
        pass


async def test_no_prompt_transcript_reply_or_audio_in_the_logs(stack: RealStack, utterance) -> None:
    async with GatewayClient(stack.ws_url) as client:
        typed = await client.text_turn(f"Please remember the word {TYPED_SECRET} for me.", timeout=120)
        spoken = await client.spoken_turn(utterance(SPOKEN_SECRET), timeout=120)
    assert typed.done["finish_reason"] != "error" and spoken.done["finish_reason"] != "error"
    replies = [r.done["text"] for r in (typed, spoken)]
    logs = {p.name: p.read_text(errors="replace") for p in (stack.run_dir / "logs").glob("*.log")}
    logs["runner.out"] = (stack.run_dir / "runner.out").read_text(errors="replace")
    assert set(logs) >= {"vad.log", "llm.log", "tts.log", "gateway.log"}
    secrets = [TYPED_SECRET, "Marmalade", "zeppelin", "Kathmandu"]
    # A reply's distinctive pieces: any 16-character run of it (the tiny model's replies are long gibberish).
    for reply in replies:
        words = reply.strip()
        secrets += [words[i:i + 16] for i in range(0, max(0, len(words) - 16), 16) if words[i:i + 16].strip()]
    for name, text in logs.items():
        for secret in secrets:
            assert secret.lower() not in text.lower(), f"{name} contains user content {secret!r}"
        assert "UklGR" not in text, f"{name} contains a base64 WAV"  # "RIFF"
        long_lines = [line[:80] for line in text.splitlines() if len(line) > 4000]
        assert not long_lines, f"{name} has suspiciously long lines (payloads?): {long_lines[:2]}"
        assert not re.search(r"[A-Za-z0-9+/]{400,}", text), f"{name} contains a long base64 run"
