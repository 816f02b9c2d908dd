"""Bad and hostile input on /ws: a clear error, the socket stays usable, other sessions never notice."""

from __future__ import annotations

import asyncio
import gc
import io
import struct

import aiohttp
import pytest
from PIL import Image

from services.gateway.wires.protocol import FrameKind, pack_frame


async def _still_usable(client) -> None:
    n = len([e for e in client.events if e["type"] == "pong"])
    await client.send(type="ping")
    await client.wait_for("pong", count=n + 1)


@pytest.mark.parametrize("raw, code, says", [
    ("{not json", "bad_message", "not valid JSON"),
    ('["a list"]', "bad_message", "JSON object"),
    ('{"type": "dance"}', "bad_message", "unknown message type 'dance'"),
    ('{"type": "text", "text": 42}', "bad_message", "'text' must be a string"),
    ('{"type": "text", "text": "   "}', "bad_message", "empty"),
    ('{"type": "interrupt", "turn_id": "", "played_samples": -5}', "bad_message", ">= 0"),
    ('{"type": "interrupt", "turn_id": "", "played_samples": true}', "bad_message", "an integer, got a boolean"),
    ('{"type": "text", "text": "' + "a" * 3000 + '"}', "too_large", "2000"),
])
async def test_malformed_messages_get_a_clear_error(stack, connect, raw, code, says) -> None:
    client = await connect()
    await client.ws.send_str(raw)
    err = await client.wait_for("error")
    assert err["code"] == code and says in err["message"]
    await _still_usable(client)


def _jpeg(size: tuple[int, int]) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, (9, 9, 9)).save(buf, "JPEG", quality=10)
    return buf.getvalue()


@pytest.mark.parametrize("frame, code, says", [
    (b"\x01\x00", "bad_frame", "shorter than the 16-byte header"),
    (pack_frame(7, 0, 0.0, b"xx"), "bad_frame", "unknown frame kind 7"),
    (pack_frame(FrameKind.AUDIO_IN, 0, 0.0, b"\x00\x01\x02"), "bad_frame", "even"),
    (pack_frame(FrameKind.AUDIO_IN, 0, 0.0, bytes(70000)), "too_large", "65536-byte limit"),
    (pack_frame(FrameKind.JPEG, 0, 0.0, b"\xff\xd8garbage"), "bad_frame", "not a decodable JPEG"),
    (pack_frame(FrameKind.JPEG, 0, 0.0, _jpeg((64, 64))[:200]), "bad_frame", "JPEG"),
    (pack_frame(FrameKind.JPEG, 0, 0.0, _jpeg((8000, 8000))), "too_large", "pixel limit"),
    (struct.pack("<BBHId", 1, 0, 0, 0, float("nan")) + b"\x00\x00", "bad_frame", "finite"),
])
async def test_bad_frames_get_a_clear_error(stack, connect, frame, code, says) -> None:
    client = await connect()
    await client.ws.send_bytes(frame)
    err = await client.wait_for("error")
    assert err["code"] == code and says in err["message"]
    await _still_usable(client)


async def test_media_before_session_start_is_refused(stack, connect) -> None:
    client = await connect(start=False)
    await client.ws.send_bytes(pack_frame(FrameKind.AUDIO_IN, 0, 0.0, bytes(640)))
    err = await client.wait_for("error")
    assert err["code"] == "protocol"


async def test_wrong_protocol_or_sample_rate_is_refused(stack, connect) -> None:
    client = await connect(start=False)
    await client.send(type="session.start", protocol=1, sample_rate=44100)
    err = await client.wait_for("error")
    assert err["code"] == "protocol" and "16000" in err["message"]


async def test_a_flood_is_rate_limited_and_others_are_unaffected(stack, connect) -> None:
    flooder, other = await connect(), await connect()
    for _ in range(600):
        await flooder.ws.send_str('{"type": "ping"}')
    err = await flooder.wait_for("error")
    assert err["code"] == "rate_limited"
    assert len([e for e in flooder.events if e["type"] == "pong"]) < 600
    await other.send(type="text", text="Still there?")
    done = await other.wait_for("turn.done")
    assert done["finish_reason"] == "stop"


async def test_cross_origin_websocket_is_refused(stack) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(f"{stack.url}/ws", headers={"Origin": "https://evil.example"})
        assert info.value.status == 403
        ws = await http.ws_connect(f"{stack.url}/ws", headers={"Origin": stack.url})
        await ws.close()


@pytest.mark.parametrize("stack", [{"token": "s3cret"}], indirect=True)
async def test_token_is_required_when_set(stack) -> None:
    async with aiohttp.ClientSession() as http:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await http.ws_connect(f"{stack.url}/ws")
        assert info.value.status == 401
        ws = await http.ws_connect(f"{stack.url}/ws?token=s3cret")
        await ws.close()


@pytest.mark.parametrize("stack", [{"max_sessions_per_client": 2}], indirect=True)
async def test_sessions_per_client_are_limited(stack, connect) -> None:
    await connect()
    await connect()
    with pytest.raises(aiohttp.WSServerHandshakeError) as info:
        await connect()
    assert info.value.status == 429


@pytest.mark.parametrize("stack", [{"max_sessions": 2}], indirect=True)
async def test_closed_sessions_free_their_place_at_once(stack, connect) -> None:
    """A closed session must not count against the limit until some later garbage collection."""
    gc.disable()
    try:
        for _ in range(6):
            client = await connect()
            await client.close()
            for _attempt in range(40):  # the server finishes its side of the close a moment later
                try:
                    client = await connect()
                    break
                except aiohttp.WSServerHandshakeError as exc:
                    assert exc.status == 503, exc
                    await asyncio.sleep(0.05)
            else:
                pytest.fail("a closed session still counted against SOTTO_GATEWAY_MAX_SESSIONS")
            await client.close()
    finally:
        gc.enable()


async def test_session_ready_reports_service_health(stack, connect) -> None:
    client = await connect()
    ready = await client.wait_for("session.ready")
    assert set(ready["health"]) == {"vad", "llm", "tts", "asr"}, ready
