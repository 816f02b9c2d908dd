"""Property-based fuzzing of the WebSocket protocol (JSON text and binary frames) against a gateway with fake
gRPC peers (fast, in process).

For every generated input: the gateway never crashes or logs an unhandled error; every `error` event carries a
code documented in docs/protocol.md (never `internal`); input known to be bad gets an error event or a counted
drop (sotto_gateway_dropped_total); and the socket stays usable (ping -> pong).
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import math
import re
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import pytest
from aiohttp.test_utils import TestServer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import REGISTRY

from services.common import config
from services.gateway.wires.protocol import HEADER
from services.gateway.server import create_app
from sotto.v1 import llm_pb2_grpc, tts_pb2_grpc, vad_pb2_grpc
from tests.gateway.fakes import FakeLlm, FakeTts, FakeVad, start_fake

PROTOCOL_MD = Path(__file__).resolve().parents[2] / "docs" / "protocol.md"
EXAMPLE_TIMEOUT_S = 10.0


def documented_codes() -> set[str]:
    section = PROTOCOL_MD.read_text().split("## Error codes", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([a-z_]+)` \|", section, re.M))


DOCUMENTED = documented_codes()


def dropped_total() -> float:
    total = 0.0
    for family in REGISTRY.collect():
        if family.name == "sotto_gateway_dropped":
            total += sum(s.value for s in family.samples if s.name == "sotto_gateway_dropped_total")
    return total


class _ErrorLogs(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(f"{record.name}: {record.getMessage()} {record.exc_info and record.exc_info[1]!r}")


@dataclass
class Outcome:
    events: list[dict]
    dropped: float
    open: bool


class FuzzGateway:
    """A gateway and fake peers on their own event loop in a thread; one long-lived session to fuzz through."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.call(self._start())

    def call(self, coro, timeout: float = 30.0):
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    async def _start(self) -> None:
        fakes = [(FakeVad(), vad_pb2_grpc.add_VadServiceServicer_to_server, "sotto.v1.VadService"),
                 (FakeLlm(), llm_pb2_grpc.add_LlmServiceServicer_to_server, "sotto.v1.LlmService"),
                 (FakeTts(), tts_pb2_grpc.add_TtsServiceServicer_to_server, "sotto.v1.TtsService")]
        self.servers = [await start_fake(*f) for f in fakes]
        base = config.load_all({})
        # No rate limit here: the fuzzer sends faster than any client would; rate limiting has its own tests.
        gateway = dataclasses.replace(base.gateway, vad_addr=self.servers[0][1], llm_addr=self.servers[1][1],
                                      tts_addr=self.servers[2][1], max_messages_per_s=100000)
        self.server = TestServer(create_app(dataclasses.replace(base, gateway=gateway)), host="127.0.0.1")
        await self.server.start_server()
        self.http = aiohttp.ClientSession()
        self.ws = await self.http.ws_connect(f"http://127.0.0.1:{self.server.port}/ws")
        await self.ws.send_json({"type": "session.start", "protocol": 1, "sample_rate": 16000})
        ready = await self.ws.receive_json(timeout=10)
        assert ready["type"] == "session.ready", ready

    async def _send(self, item: str | bytes) -> Outcome:
        before = dropped_total()
        if isinstance(item, str):
            await self.ws.send_str(item)
        else:
            await self.ws.send_bytes(item)
        await self.ws.send_str('{"type": "ping"}')
        events: list[dict] = []
        while True:
            msg = await self.ws.receive(timeout=EXAMPLE_TIMEOUT_S)
            if msg.type != aiohttp.WSMsgType.TEXT:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    continue  # audio of a turn the fuzzer started with a valid `text`
                return Outcome(events, dropped_total() - before, False)
            data = json.loads(msg.data)
            if data["type"] == "pong":
                return Outcome(events, dropped_total() - before, True)
            events.append(data)

    def send(self, item: str | bytes) -> Outcome:
        return self.call(self._send(item))

    async def _stop(self) -> None:
        await self.ws.close()
        await self.http.close()
        await self.server.close()
        for server, _ in self.servers:
            await server.stop(0)

    def close(self) -> None:
        self.call(self._stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def gateway() -> Iterator[FuzzGateway]:
    errors = _ErrorLogs()
    logging.getLogger().addHandler(errors)
    fuzz = FuzzGateway()
    yield fuzz
    fuzz.close()
    logging.getLogger().removeHandler(errors)
    assert not errors.records, f"the gateway logged errors while fuzzed: {errors.records[:5]}"


# -- strategies ----------------------------------------------------------------------------------------------
# `ping` is left out: its pong would be taken for the pong that ends the example.
TYPES = ["session.start", "audio.end", "text", "interrupt", "playback", "dance", "", "TEXT", "pong"]
FIELDS = ["type", "text", "turn_id", "played_samples", "protocol", "sample_rate", "voice", "language", "camera",
          "client_vad", "extra"]
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-2**63, 2**64) | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=10)
messages = st.fixed_dictionaries({"type": st.sampled_from(TYPES)},
                                 optional={f: json_values for f in FIELDS if f != "type"})
# Valid-looking typed text is kept short and rare: every valid `text` runs a (fake) turn.
text_frames = st.one_of(
    st.text(max_size=200),                                    # mostly not JSON at all
    st.binary(max_size=100).map(lambda b: b.decode("latin-1")),
    json_values.map(json.dumps),                              # JSON, but rarely an object with a type
    messages.map(json.dumps),
)


@st.composite
def binary_frames(draw) -> bytes:
    kind = draw(st.sampled_from([0, 1, 1, 2, 2, 3, 4, 255]))
    ts = draw(st.floats(allow_nan=True, allow_infinity=True) | st.floats(0, 2e12))
    header = HEADER.pack(kind, draw(st.integers(0, 255)), draw(st.integers(0, 65535)),
                         draw(st.integers(0, 2**32 - 1)), ts)
    payload = draw(st.binary(max_size=3000) | st.sampled_from([b"\xff\xd8\xff\xe0", b"\xff\xd8" + bytes(100), b""]))
    cut = draw(st.integers(0, 30))
    whole = header + payload
    return whole[:cut] if draw(st.booleans()) and cut < 16 else whole


def known_bad_text(raw: str) -> bool:
    try:
        msg = json.loads(raw)
    except ValueError:
        return True
    return not isinstance(msg, dict) or msg.get("type") not in TYPES[:5]


def known_bad_frame(frame: bytes) -> bool:
    if len(frame) < 16:
        return True
    kind, _, _, _, ts = struct.unpack_from("<BBHId", frame)
    payload = frame[16:]
    return (kind not in (1, 2) or not math.isfinite(ts) or (kind == 1 and (len(payload) % 2 or not payload))
            or kind == 2)  # no payload the fuzzer draws is a decodable JPEG


def check(outcome: Outcome, bad: bool, what: object) -> None:
    assert outcome.open, f"the socket closed after {what!r}"
    codes = [e["code"] for e in outcome.events if e["type"] == "error"]
    assert set(codes) <= DOCUMENTED - {"internal"}, (codes, what)
    assert "protocol" not in codes, what  # a session that started is never closed for a bad message
    if bad:
        assert codes or outcome.dropped > 0, f"no error event and no counted drop for {what!r}"


FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                          HealthCheck.too_slow])


@FUZZ
@given(raw=text_frames)
def test_fuzzed_json_messages(gateway: FuzzGateway, raw: str) -> None:
    check(gateway.send(raw), known_bad_text(raw), raw)


@FUZZ
@given(frame=binary_frames())
def test_fuzzed_binary_frames(gateway: FuzzGateway, frame: bytes) -> None:
    check(gateway.send(frame), known_bad_frame(frame), frame[:40])


def test_documented_codes_are_known() -> None:
    assert {"bad_message", "bad_frame", "too_large", "rate_limited", "protocol", "internal"} <= DOCUMENTED
