"""A gateway on a free port wired to fake vad/llm/tts peers, and a small WebSocket client for it."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import grpc
import numpy as np
import pytest
from aiohttp.test_utils import TestServer

from services.common import config
from services.gateway.wires.protocol import FrameKind, pack_frame
from services.gateway.server import create_app
from sotto.v1 import asr_pb2_grpc, llm_pb2_grpc, tts_pb2_grpc, vad_pb2_grpc
from tests.gateway.fakes import FakeAsr, FakeLlm, FakeTts, FakeVad, start_fake
from tests.helpers import eventually


@dataclass
class Stack:
    url: str
    vad: FakeVad
    llm: FakeLlm
    tts: FakeTts
    settings: config.Settings
    vad_server: grpc.aio.Server
    asr: FakeAsr


@pytest.fixture
async def stack(request: pytest.FixtureRequest) -> AsyncIterator[Stack]:
    overrides = dict(getattr(request, "param", {}))  # gateway settings, and `common` for the common ones
    common_overrides = overrides.pop("common", {})
    vad, llm, tts, asr = FakeVad(), FakeLlm(**overrides.pop("llm", {})), FakeTts(), FakeAsr()
    servers = [await start_fake(vad, vad_pb2_grpc.add_VadServiceServicer_to_server, "sotto.v1.VadService"),
               await start_fake(llm, llm_pb2_grpc.add_LlmServiceServicer_to_server, "sotto.v1.LlmService"),
               await start_fake(tts, tts_pb2_grpc.add_TtsServiceServicer_to_server, "sotto.v1.TtsService"),
               await start_fake(asr, asr_pb2_grpc.add_AsrServiceServicer_to_server, "sotto.v1.AsrService")]
    base = config.load_all({})
    gateway = dataclasses.replace(base.gateway, vad_addr=servers[0][1], llm_addr=servers[1][1],
                                  tts_addr=servers[2][1], asr_addr=servers[3][1], **overrides)
    settings = dataclasses.replace(base, gateway=gateway, common=dataclasses.replace(base.common, **common_overrides))
    server = TestServer(create_app(settings), host="127.0.0.1")
    await server.start_server()
    try:
        yield Stack(f"http://127.0.0.1:{server.port}", vad, llm, tts, settings, servers[0][0], asr)
    finally:
        await server.close()
        for grpc_server, _ in servers:
            await grpc_server.stop(0)


class Client:
    """Collects everything the gateway sends; binary frames are kept with their arrival time, and `arrivals` keeps
    the order of everything (an event's type, or "audio" for a binary frame)."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.events: list[dict] = []
        self.event_times: list[float] = []  # monotonic: when each event arrived
        self.frames: list[tuple[float, bytes]] = []
        self.arrivals: list[str] = []
        self._reader = asyncio.create_task(self._read())
        self.seq = 0

    async def _read(self) -> None:
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                self.events.append(json.loads(msg.data))
                self.event_times.append(time.monotonic())
                self.arrivals.append(self.events[-1]["type"])
            elif msg.type == aiohttp.WSMsgType.BINARY:
                self.frames.append((asyncio.get_running_loop().time(), msg.data))
                self.arrivals.append("audio")

    async def send(self, **message: object) -> None:
        await self.ws.send_str(json.dumps(message))

    async def send_audio(self, pcm: np.ndarray, frame_ms: int = 20, ts0: float = 1_000_000.0) -> None:
        step = 16 * frame_ms
        for i in range(0, len(pcm), step):
            await self.ws.send_bytes(pack_frame(FrameKind.AUDIO_IN, self.seq, ts0 + i / 16,
                                                pcm[i:i + step].astype("<i2").tobytes()))
            self.seq += 1

    async def wait_for(self, kind: str, timeout: float = 10.0, count: int = 1) -> dict:
        def nth() -> dict | None:
            found = [e for e in self.events if e["type"] == kind]
            return found[count - 1] if len(found) >= count else None
        return await eventually(nth, timeout, f"{kind} event #{count}")

    async def flush(self) -> None:
        """Wait until everything the gateway queued for this client so far has arrived: the pong goes through
        the same writer queue, behind it."""
        await self.send(type="ping")
        await self.wait_for("pong", count=self.arrivals.count("pong") + 1)

    def audio_after(self, kind: str) -> int:
        """Audio frames that arrived after the first event of this type."""
        return self.arrivals[self.arrivals.index(kind):].count("audio")

    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    async def close(self) -> None:
        await self.ws.close()
        self._reader.cancel()


@pytest.fixture
async def connect(stack: Stack) -> AsyncIterator:
    sessions: list[aiohttp.ClientSession] = []
    clients: list[Client] = []

    async def _connect(start: bool = True, **headers: str) -> Client:
        http = aiohttp.ClientSession()
        sessions.append(http)
        ws = await http.ws_connect(f"{stack.url}/ws", headers=headers)
        client = Client(ws)
        clients.append(client)
        if start:
            await client.send(type="session.start", protocol=1, sample_rate=16000)
            await client.wait_for("session.ready")
        return client

    yield _connect
    for client in clients:
        await client.close()
    for http in sessions:
        await http.close()


def speech(seconds: float, amplitude: int = 8000) -> np.ndarray:
    t = np.arange(int(seconds * 16000)) / 16000
    return (np.sin(2 * np.pi * 220 * t) * amplitude).astype(np.int16)


def silence(seconds: float) -> np.ndarray:
    return np.zeros(int(seconds * 16000), dtype=np.int16)
