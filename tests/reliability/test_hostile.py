"""Hostile input on the real stack: the gateway's /ws and each model service's gRPC API.

What must hold: every bad input gets a clear error (an `error` event with a documented code, a counted drop, or
INVALID_ARGUMENT), the process keeps serving, other sessions never notice, and the gateway's memory stays bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import struct
import subprocess
import sys
import time
import zlib

import aiohttp
import grpc
import numpy as np
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from PIL import Image

from services.common.audio import wav_bytes
from services.gateway.client import GatewayClient
from services.gateway.wires.protocol import FrameKind, pack_frame
from sotto.v1 import llm_pb2, llm_pb2_grpc, tts_pb2, tts_pb2_grpc, vad_pb2, vad_pb2_grpc
from tests.reliability.conftest import pids, rss_kb
from tools.stack import ROOT, RealStack, free_port

GATEWAY_RSS_BOUND_MB = 15  # growth allowed, after warm-up, over a barrage of bombs, oversize frames and floods
RPC_TIMEOUT_S = 30


def jpeg(size: tuple[int, int], quality: int = 30) -> bytes:
    """A gradient image: compresses well, so a full-HD-plus frame stays under the 2 MB frame limit."""
    w, h = size
    x = np.linspace(0, 255, w, dtype=np.uint8)[None, :].repeat(h, 0)
    buf = io.BytesIO()
    Image.fromarray(np.stack([x, x, x], -1)).save(buf, "JPEG", quality=quality)
    return buf.getvalue()


def jpeg_bomb(width: int = 65000, height: int = 65000) -> bytes:
    """A tiny, valid JPEG whose frame header claims `width` x `height` pixels (a decompression bomb)."""
    data = bytearray(jpeg((64, 64)))
    sof = data.index(b"\xff\xc0")
    struct.pack_into(">HH", data, sof + 5, height, width)
    return bytes(data)


def png_bomb(side: int = 30000) -> bytes:
    """A PNG whose header claims side x side pixels; the pixel data is a few zlib bytes."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
    ihdr = struct.pack(">IIBBBBB", side, side, 8, 0, 0, 0, 0)
    row = b"\x00" + bytes(side)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(row * 16, 9))
            + chunk(b"IEND", b""))


async def ping_pong(client: GatewayClient) -> None:
    await client.send(type="ping")
    await client.expect("pong", timeout=10)


async def expect_error(client: GatewayClient, code: str, says: str = "") -> dict:
    deadline = time.monotonic() + 10
    while True:
        item = await client.next_event(max(0.0, deadline - time.monotonic()))
        if isinstance(item, dict) and item["type"] == "error":
            assert item["code"] == code and says in item["message"], item
            return item


HOSTILE_FRAMES = [
    ("jpeg bomb 65000x65000", lambda: pack_frame(FrameKind.JPEG, 0, 0.0, jpeg_bomb()), "too_large", "pixel limit"),
    ("jpeg 8000x8000", lambda: pack_frame(FrameKind.JPEG, 0, 0.0, jpeg((8000, 8000), 5)), "too_large", "pixel"),
    ("truncated jpeg", lambda: pack_frame(FrameKind.JPEG, 0, 0.0, jpeg((320, 240))[:300]), "bad_frame", "JPEG"),
    ("png as camera frame", lambda: pack_frame(FrameKind.JPEG, 0, 0.0, png_bomb(64)), "bad_frame", "not JPEG"),
    ("odd pcm bytes", lambda: pack_frame(FrameKind.AUDIO_IN, 0, 0.0, b"\x00" * 641), "bad_frame", "even"),
    ("audio frame over limit", lambda: pack_frame(FrameKind.AUDIO_IN, 0, 0.0, bytes(70000)), "too_large", "limit"),
    ("jpeg over limit", lambda: pack_frame(FrameKind.JPEG, 0, 0.0, b"\xff\xd8" + bytes(3 * 2**20)), "too_large",
     "limit"),
    ("short header", lambda: b"\x01\x00\x00", "bad_frame", "header"),
    ("unknown kind", lambda: pack_frame(9, 0, 0.0, b"ab"), "bad_frame", "kind"),
]


@pytest.mark.parametrize("name, frame, code, says", HOSTILE_FRAMES, ids=[h[0] for h in HOSTILE_FRAMES])
async def test_hostile_frames_get_a_documented_error(stack: RealStack, name, frame, code, says) -> None:
    async with GatewayClient(stack.ws_url) as client:
        await client.ws.send_bytes(frame())
        await expect_error(client, code, says)
        await ping_pong(client)


async def test_wrong_sample_rate_is_a_protocol_error(stack: RealStack) -> None:
    async with aiohttp.ClientSession() as http:
        ws = await http.ws_connect(stack.ws_url)
        await ws.send_json({"type": "session.start", "protocol": 1, "sample_rate": 44100})
        reply = await ws.receive_json(timeout=10)
        assert reply["type"] == "error" and reply["code"] == "protocol" and "16000" in reply["message"]
        closing = await ws.receive(timeout=10)
        assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.CLOSING)


async def test_out_of_order_and_duplicate_audio_is_dropped_and_counted(stack: RealStack) -> None:
    late0 = stack.metric("gateway", "sotto_gateway_dropped_total", reason="audio_late")
    dup0 = stack.metric("gateway", "sotto_gateway_dropped_total", reason="audio_duplicate")
    frame = bytes(640)
    async with GatewayClient(stack.ws_url) as client:
        for seq in (0, 1, 2, 1, 0, 6, 6, 6, 3, 4, 5):  # 1 and 0 again: late; 6 twice more while 3-5 are missing
            await client.ws.send_bytes(pack_frame(FrameKind.AUDIO_IN, seq, 1000.0 + 20 * seq, frame))
        await ping_pong(client)
        errors = []
        while not client.events.empty():
            item = client.events.get_nowait()
            if isinstance(item, dict) and item["type"] == "error":
                errors.append(item)
        assert not errors, f"disorder is dropped silently (counted), not reported: {errors}"
    assert stack.metric("gateway", "sotto_gateway_dropped_total", reason="audio_late") == late0 + 2
    assert stack.metric("gateway", "sotto_gateway_dropped_total", reason="audio_duplicate") == dup0 + 2


async def test_flood_is_rate_limited_and_another_session_is_unaffected(stack: RealStack) -> None:
    limited0 = stack.metric("gateway", "sotto_gateway_dropped_total", reason="rate_limited")
    async with GatewayClient(stack.ws_url) as flooder, GatewayClient(stack.ws_url) as other:
        turn = asyncio.create_task(other.text_turn("What time is it?", timeout=120))
        for _ in range(2000):
            await flooder.ws.send_str('{"type": "ping"}')
        await expect_error(flooder, "rate_limited")
        record = await turn
        assert record.done["finish_reason"] in ("stop", "length", "degraded"), record.events
        await asyncio.sleep(1.1)  # the token bucket refills
        await ping_pong(flooder)
    assert stack.metric("gateway", "sotto_gateway_dropped_total", reason="rate_limited") >= limited0 + 1000


async def test_frame_far_over_the_limit_closes_only_that_socket(stack: RealStack) -> None:
    async with GatewayClient(stack.ws_url) as other:
        async with aiohttp.ClientSession() as http:
            ws = await http.ws_connect(stack.ws_url, max_msg_size=0)
            await ws.send_json({"type": "session.start", "protocol": 1, "sample_rate": 16000})
            with contextlib.suppress(ConnectionError):  # the gateway may hang up while we still write
                await ws.send_bytes(pack_frame(FrameKind.JPEG, 0, 0.0, bytes(12 * 2**20)))  # over aiohttp's cap
            while (msg := await ws.receive(timeout=10)).type == aiohttp.WSMsgType.TEXT:
                pass
            assert msg.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED, aiohttp.WSMsgType.ERROR), msg
            assert ws.closed and ws.close_code in (1009, 1006, None), ws.close_code  # 1009: message too big
        await ping_pong(other)


SENTENCE = "the quiet river runs past the old mill. "  # the tiny model's tokenizer: about one token a character


async def test_a_prompt_over_the_context_is_invalid_and_long_conversations_are_trimmed(stack: RealStack) -> None:
    """The tiny model's context is 2048 tokens. A typed turn under the 2000-character limit but over the context
    is refused as `invalid` (the llm is healthy: the next turn works); a conversation whose history grows past the
    context goes on, its oldest turns dropped, instead of failing once the context is full."""
    async with GatewayClient(stack.ws_url) as client:
        too_long = await client.text_turn((SENTENCE * 50)[:1990], timeout=120)
        errors = [e for e in too_long.events if e["type"] == "error"]
        assert [e["code"] for e in errors] == ["invalid"], too_long.events
        assert "tokens" in errors[0]["message"] and "2047" in errors[0]["message"], errors
        for _ in range(4):  # each turn about 900 tokens: the third no longer fits beside the first two
            record = await client.text_turn((SENTENCE * 23)[:900], timeout=120)
            # The llm answers every turn in full. (Kokoro on a loaded machine may miss the deadline on the tiny
            # model's gibberish: a `timeout` that names the tts is not the llm's.)
            assert record.done["timings"].get("llm_decode_tokens"), record.done
            errors = [e for e in record.events if e["type"] == "error"]
            assert all(e["code"] == "timeout" and "tts" in e["message"] for e in errors), errors


async def _barrage(stack: RealStack, at_limit: bytes, rounds: int) -> None:
    for _ in range(rounds):
        async with GatewayClient(stack.ws_url) as client:
            for _ in range(70):  # more than max_frames_per_turn: the oldest are dropped
                await client.send_jpeg(at_limit)
            for _, frame, _, _ in HOSTILE_FRAMES:
                await client.ws.send_bytes(frame())
            for _ in range(300):
                await client.ws.send_str('{"type": "ping"}')
            await asyncio.sleep(1.1)
            await ping_pong(client)


async def test_gateway_memory_stays_bounded_under_a_hostile_barrage(stack: RealStack) -> None:
    """Each round: a session that sends 70 of the largest accepted JPEG (3840x2160), every hostile frame and a
    flood, then closes. After a warm-up of six rounds, six more must add less than GATEWAY_RSS_BOUND_MB: a closed
    session must let go of its frames at once, not hold them until a full garbage collection."""
    gateway = pids(stack)["gateway"]
    at_limit = jpeg((3840, 2160))
    assert len(at_limit) < 2 * 2**20
    idle = rss_kb(gateway)
    await _barrage(stack, at_limit, 6)
    before = rss_kb(gateway)
    await _barrage(stack, at_limit, 6)
    after = rss_kb(gateway)
    growth_mb = (after - before) / 1024
    print(f"\ngateway RSS idle {idle / 1024:.0f} MB, warm {before / 1024:.0f} MB -> {after / 1024:.0f} MB "
          f"({growth_mb:+.1f} MB over 6 rounds)")
    assert growth_mb < GATEWAY_RSS_BOUND_MB


# -- invalid gRPC requests straight to each service ------------------------------------------------------------

def channel(stack: RealStack, service: str) -> grpc.aio.Channel:
    return grpc.aio.insecure_channel(f"127.0.0.1:{stack.ports[f'SOTTO_{service.upper()}_PORT']}",
                                     options=[("grpc.max_send_message_length", 64 * 2**20)])


async def vad_stream(stub: vad_pb2_grpc.VadServiceStub, requests: list[vad_pb2.VadRequest]) -> list:
    async def gen():
        for r in requests:
            yield r
    return [ev async for ev in stub.StreamAudio(gen(), timeout=RPC_TIMEOUT_S)]


SETTINGS = vad_pb2.VadSettings(threshold=0.5, min_speech_ms=300, min_silence_ms=300, speech_pad_ms=30)


def audio(pcm: bytes, rate: int = 16000) -> vad_pb2.VadRequest:
    return vad_pb2.VadRequest(audio=vad_pb2.AudioChunk(pcm16=pcm, sample_rate=rate))


@pytest.mark.parametrize("requests, says", [
    ([vad_pb2.VadRequest(settings=SETTINGS), audio(bytes(1024), 44100)], "16000"),
    ([vad_pb2.VadRequest(settings=SETTINGS), audio(b"\x00" * 1023)], ""),
    ([audio(bytes(1024))], "settings"),
], ids=["wrong rate", "odd bytes", "no settings"])
async def test_vad_refuses_invalid_streams_and_keeps_serving(stack: RealStack, requests, says) -> None:
    async with channel(stack, "vad") as ch:
        stub = vad_pb2_grpc.VadServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            await vad_stream(stub, requests)
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
        assert says.lower() in info.value.details().lower(), info.value.details()
        events = await vad_stream(stub, [vad_pb2.VadRequest(settings=SETTINGS), audio(bytes(32000))])
        assert isinstance(events, list)  # a valid stream still works


def wav_header_only() -> bytes:
    return b"RIFF\x24\x00\x00\x00WAVEfmt "


@pytest.mark.parametrize("user, says", [
    (llm_pb2.UserContent(audio_wav=b"ID3\x03\x00 this is an mp3, not a wav" * 10, text="hi"), "WAV"),
    (llm_pb2.UserContent(audio_wav=wav_header_only(), text="hi"), ""),
    (llm_pb2.UserContent(images=[llm_pb2.Image(data=png_bomb(), mime_type="image/png")], text="hi"), "pixel"),
    (llm_pb2.UserContent(images=[llm_pb2.Image(data=jpeg_bomb(), mime_type="image/jpeg")], text="hi"), "pixel"),
    (llm_pb2.UserContent(images=[llm_pb2.Image(data=b"\x89PNG\r\n\x1a\nbroken", mime_type="image/png")],
                         text="hi"), ""),
    (llm_pb2.UserContent(), ""),
], ids=["non-wav audio", "truncated wav", "png bomb", "jpeg bomb", "broken png", "empty"])
async def test_llm_refuses_invalid_input_and_keeps_serving(stack: RealStack, user, says) -> None:
    async with channel(stack, "llm") as ch:
        stub = llm_pb2_grpc.LlmServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in stub.Generate(llm_pb2.GenerateRequest(session_id="hostile", user=user),
                                         timeout=RPC_TIMEOUT_S):
                pass
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
        assert says.lower() in info.value.details().lower(), info.value.details()
        replies = [ev async for ev in stub.Generate(llm_pb2.GenerateRequest(
            session_id="hostile", user=llm_pb2.UserContent(text="Hello")), timeout=RPC_TIMEOUT_S)]
        assert replies and replies[-1].HasField("done")


@pytest.mark.parametrize("request_, says", [
    (tts_pb2.SynthesizeRequest(text=""), "empty"),
    (tts_pb2.SynthesizeRequest(text="   \n "), "empty"),
    (tts_pb2.SynthesizeRequest(text="Hello.", config=tts_pb2.VoiceConfig(voice="xx_nobody")), "xx_nobody"),
    (tts_pb2.SynthesizeRequest(text="word " * 2000), "4000"),
    (tts_pb2.SynthesizeRequest(text="Hello.", config=tts_pb2.VoiceConfig(speed=100.0)), "speed"),
], ids=["empty", "blank", "unknown voice", "too long", "absurd speed"])
async def test_tts_refuses_invalid_requests_and_keeps_serving(stack: RealStack, request_, says) -> None:
    async with channel(stack, "tts") as ch:
        stub = tts_pb2_grpc.TtsServiceStub(ch)
        with pytest.raises(grpc.aio.AioRpcError) as info:
            async for _ in stub.Synthesize(request_, timeout=RPC_TIMEOUT_S):
                pass
        assert info.value.code() == grpc.StatusCode.INVALID_ARGUMENT, info.value
        assert says.lower() in info.value.details().lower(), info.value.details()
        chunks = [c async for c in stub.Synthesize(tts_pb2.SynthesizeRequest(text="Hi."), timeout=RPC_TIMEOUT_S)]
        assert chunks and chunks[0].pcm16


async def test_audio_to_a_text_only_model_is_refused_clearly(tmp_path) -> None:
    """A standalone llm service on the tiny text-only model (seconds to start): audio is INVALID_ARGUMENT with a
    message saying the model takes no audio, and text still works."""
    port = free_port()
    env = {**os.environ, "SOTTO_LLM_PORT": str(port), "SOTTO_LLM_METRICS_PORT": str(free_port()),
           "SOTTO_LLM_MODEL": str(ROOT / "tests" / "fixtures" / "models" / "tiny-gemma4-text.litertlm"),
           "SOTTO_OFFLINE": "true", "SOTTO_LLM_THREADS": "1", "SOTTO_RUN_DIR": str(tmp_path)}
    log = open(tmp_path / "llm.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "services.llm.server"], cwd=ROOT, env=env, stdout=log,
                            stderr=subprocess.STDOUT)
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as ch:
            health = health_pb2_grpc.HealthStub(ch)
            deadline = time.monotonic() + 120
            while True:
                assert proc.poll() is None, (tmp_path / "llm.log").read_text()[-2000:]
                assert time.monotonic() < deadline, "the text-only llm did not start"
                try:
                    reply = await health.Check(health_pb2.HealthCheckRequest(service="sotto.v1.LlmService"),
                                               timeout=1)
                    if reply.status == health_pb2.HealthCheckResponse.SERVING:
                        break
                except grpc.aio.AioRpcError:
                    pass
                await asyncio.sleep(0.3)
            stub = llm_pb2_grpc.LlmServiceStub(ch)
            info = await stub.GetModelInfo(llm_pb2.GetModelInfoRequest(), timeout=RPC_TIMEOUT_S)
            assert not info.audio_input
            with pytest.raises(grpc.aio.AioRpcError) as err:
                async for _ in stub.Generate(llm_pb2.GenerateRequest(session_id="t", user=llm_pb2.UserContent(
                        audio_wav=wav_bytes(bytes(32000), 16000), text="hi")), timeout=RPC_TIMEOUT_S):
                    pass
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT, err.value
            assert "audio" in err.value.details().lower(), err.value.details()
            replies = [ev async for ev in stub.Generate(llm_pb2.GenerateRequest(
                session_id="t", user=llm_pb2.UserContent(text="Hello")), timeout=RPC_TIMEOUT_S)]
            assert replies and replies[-1].HasField("done")
    finally:
        proc.terminate()
        proc.wait(15)
        log.close()
