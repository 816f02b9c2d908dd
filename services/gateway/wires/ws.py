"""The `/ws` wire: protocol v1 (docs/protocol.md) onto the conversation core.

`V1Wire` parses what the client sends (JSON messages, binary frames) and calls the session's public methods;
`V1Output` serializes what the session says. Only the handler task reads the socket.
"""

from __future__ import annotations

import logging

from aiohttp import WSMsgType, web

from services.common import logs
from services.gateway.access import check_caller, check_session_room, registered
from services.gateway.app import DEPS, LIMITS, MODELS, SETTINGS
from services.gateway.conversation import events
from services.gateway.conversation.inputs import InputError, MediaFrame, Opening
from services.gateway.conversation.session import Session
from services.gateway.wires.protocol import (ECHO_CANCEL, AudioEnd, FrameKind, Interrupt, Ping, Playback, ProtocolError,
                                             SessionStart, TypedText, parse_frame, parse_message, serialize)

_LOGGER = logging.getLogger(__name__)


class V1Output:
    """The session's events onto a `/ws` socket, serialized as protocol v1."""

    def __init__(self, ws: web.WebSocketResponse) -> None:
        self.ws = ws

    async def send(self, item: events.Event) -> None:
        data = serialize(item)
        if isinstance(data, bytes):
            await self.ws.send_bytes(data)
        else:
            await self.ws.send_str(data)

    async def close(self, *, code: int = 1000, message: bytes = b"") -> None:
        await self.ws.close(code=code, message=message)


class V1Wire:
    """One `/ws` client's messages, checked and handed to its session."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.gw = session.gw
        self.start: SessionStart | None = None

    async def on_text(self, text: str) -> bool:
        """Handle one JSON message; returns False when the session must close."""
        session = self.session
        if not session.admit():
            return True
        try:
            msg = parse_message(text, self.gw.max_message_bytes, self.gw.max_text_chars)
        except ProtocolError as exc:
            if exc.code == "protocol" and self.start is not None:
                # `protocol` means "the socket is closed now"; a second, bad session.start does not close it
                session.error("bad_message", f"session.start was already received ({exc.message})")
                return True
            session.error(exc.code, exc.message)
            return exc.code != "protocol"
        if isinstance(msg, SessionStart):
            if self.start is not None:
                session.error("bad_message", "session.start was already received")
                return True
            self.start = msg
            session.open(Opening(sample_rate=msg.sample_rate, voice=msg.voice, language=msg.language,
                                 client_vad=msg.client_vad, camera=msg.camera, turn_hold=msg.turn_hold,
                                 echo_cancel=ECHO_CANCEL[msg.echo_cancel]))
            return True
        if self.start is None:
            session.error("protocol", "the first message must be session.start")
            return False
        if isinstance(msg, TypedText):
            await session.typed_turn(msg.text)
        elif isinstance(msg, Interrupt):
            session.interrupt(msg.turn_id, msg.played_samples)
        elif isinstance(msg, Playback):
            session.playback(msg.turn_id, msg.played_samples)
        elif isinstance(msg, AudioEnd):
            session.end_of_speech(ask_verdict=self.start.turn_hold)
        elif isinstance(msg, Ping):
            session.pong()
        return True

    async def on_binary(self, data: bytes) -> bool:
        """Handle one binary frame; returns False when the session must close."""
        session = self.session
        if not session.admit():
            return True
        if self.start is None:
            session.error("protocol", "the first message must be session.start, not media")
            return False
        try:
            frame = parse_frame(data, self.gw.max_audio_frame_bytes, self.gw.max_jpeg_bytes)
            media = MediaFrame(frame.sequence, frame.ts_ms, frame.payload)
            if frame.kind == FrameKind.JPEG:
                session.camera(media)
                return True
        except InputError as exc:  # a bad frame (ProtocolError), or a camera frame refused
            session.error(exc.code, exc.message)
            return True
        await session.audio(media)
        return True


async def websocket(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    gw = settings.gateway
    check_caller(request)
    check_session_room(request)
    # aiohttp's own cap is set above ours, so a moderately oversized message gets a clear `too_large` error and
    # the socket stays usable; only something far over the limit closes it (code 1009, message too big).
    cap = 4 * max(gw.max_message_bytes, gw.max_jpeg_bytes, gw.max_audio_frame_bytes) + 64
    ws = web.WebSocketResponse(max_msg_size=cap, heartbeat=30)
    await ws.prepare(request)
    deps = request.app[DEPS]
    session = Session(output=V1Output(ws), cfg=settings, settings=request.app[LIMITS], channels=deps.channels,
                      models=request.app[MODELS], health=deps.status)
    wire = V1Wire(session)
    with logs.bound(session.id):
        try:
            async with registered(request, session):
                async for msg in ws:
                    if msg.type == WSMsgType.TEXT:
                        if not await wire.on_text(msg.data):
                            break
                    elif msg.type == WSMsgType.BINARY:
                        if not await wire.on_binary(msg.data):
                            break
                    elif msg.type == WSMsgType.ERROR:
                        break
        finally:
            await ws.close()
    return ws
