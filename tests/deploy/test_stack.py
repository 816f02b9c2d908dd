"""The whole container stack, driven only through tools.compose: up (healthy), a typed turn through the
gateway's WebSocket, scale llm to 2, down.

Runs where a Docker engine and compose v2 are usable; elsewhere it skips with the check that failed. It uses its
own compose project (sotto-test-<pid>), a free loopback port and its own volumes, so a stack you run is left
alone, and removes all of it at the end. The host's SOTTO_MODEL_DIR is mounted as the model cache when it exists
(`make models-offline` fills it), else a fresh volume is used. SOTTO_TEST_DOCKER_TIMEOUT (s, default 900) bounds
the wait for health, first image build included.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
import urllib.request

import pytest

pytestmark = [pytest.mark.docker, pytest.mark.slow, pytest.mark.timeout(1800)]

pytest.importorskip("python_on_whales", reason="python-on-whales is not installed (the deploy test deps)")
aiohttp = pytest.importorskip("aiohttp", reason="aiohttp is not installed (the gateway extra)")

from tests.deploy.images import build_once, why_not_runnable  # noqa: E402
from tools.compose import engine, model_env, stack as compose_stack  # noqa: E402


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory):
    saved = dict(os.environ)
    port = _free_port()
    os.environ.update({"COMPOSE_PROJECT_NAME": f"sotto-test-{os.getpid()}",
                       "SOTTO_GATEWAY_PUBLISH_PORT": str(port),
                       "SOTTO_RUN_DIR": str(tmp_path_factory.mktemp("run"))})
    try:
        reason = why_not_runnable()
        if reason:
            pytest.skip(reason)
        host_models = model_env.host_model_dir(dict(os.environ)).is_dir()
        timeout = float(os.environ.get("SOTTO_TEST_DOCKER_TIMEOUT", "900"))
        build_once(engine.client())
        try:
            compose_stack.up(timeout, build_images=False, host_models=host_models)
            yield port
        finally:
            compose_stack.down(volumes=True)
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _healthz(port: int) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read() or b"{}")


def test_all_healthy_and_only_the_gateway_published(stack: int) -> None:
    rows = compose_stack.ps()
    assert sorted(r["service"] for r in rows) == ["asr", "gateway", "llm", "tts", "vad"], rows
    assert all(r["state"] == "running" and r["health"] == "healthy" for r in rows), rows
    published = {r["service"]: r["ports"] for r in rows if r["ports"]}
    assert list(published) == ["gateway"], published
    assert published["gateway"] == f"127.0.0.1:{stack}->8000/tcp", published


def test_gateway_reports_every_service_serving(stack: int) -> None:
    status, body = _healthz(stack)
    assert status == 200, body
    assert body["dependencies"] == {"vad": "SERVING", "llm": "SERVING", "tts": "SERVING", "asr": "SERVING"}, body


async def _typed_turn(port: int, text: str, deadline_s: float = 120.0) -> list[dict]:
    """session.start, then a `text` turn; return the JSON events up to turn.done (binary audio frames counted)."""
    events: list[dict] = []
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(f"ws://127.0.0.1:{port}/ws", timeout=aiohttp.ClientWSTimeout(ws_close=5))
        async with ws:
            await ws.send_json({"type": "session.start", "protocol": 1})
            audio_frames = 0
            async with asyncio.timeout(deadline_s):
                sent = False
                async for msg in ws:
                    if msg.type == aiohttp.WSMsgType.BINARY:
                        audio_frames += 1
                        continue
                    assert msg.type == aiohttp.WSMsgType.TEXT, msg
                    event = json.loads(msg.data)
                    events.append(event)
                    if event["type"] == "session.ready" and not sent:
                        await ws.send_json({"type": "text", "text": text})
                        sent = True
                    if event["type"] in ("turn.done", "error"):
                        break
            events.append({"type": "_audio_frames", "count": audio_frames})
    return events


def test_typed_turn_through_the_gateway(stack: int) -> None:
    events = asyncio.run(_typed_turn(stack, "Hello! Say one short sentence."))
    types = [e["type"] for e in events]
    assert types[0] == "session.ready", events
    assert "error" not in types, events
    assert "turn.started" in types and types[-2] == "turn.done", types
    started = next(e for e in events if e["type"] == "turn.started")
    done = events[-2]
    assert started["source"] == "text" and done["turn_id"] == started["turn_id"]
    deltas = "".join(e["text"] for e in events if e["type"] == "text.delta" and e["turn_id"] == started["turn_id"])
    assert deltas and done["text"] == deltas, (deltas, done)
    if "audio.start" in types:
        assert "audio.done" in types and events[-1]["count"] > 0, events


def test_scale_llm_to_two(stack: int) -> None:
    containers = compose_stack.scale("llm", 2, timeout_s=float(os.environ.get("SOTTO_TEST_DOCKER_TIMEOUT", "900")))
    assert len(containers) == 2
    rows = [r for r in compose_stack.ps() if r["service"] == "llm"]
    assert len(rows) == 2 and all(r["health"] == "healthy" for r in rows), rows
    assert _healthz(stack)[0] == 200  # the gateway kept serving while llm grew
    back = compose_stack.scale("llm", 1, timeout_s=120)
    assert len(back) == 1


def test_down_removes_the_stack(stack: int) -> None:
    compose_stack.down(volumes=True)
    assert compose_stack.ps() == []
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{stack}/healthz", timeout=3)
