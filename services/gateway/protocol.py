"""Protocol v1 on the wire (docs/protocol.md): binary frame headers, client messages, error codes.

Parsing is strict and total: anything a client sends either becomes a typed message or a `ProtocolError` whose
code and message go back to the client as an `error` event. Nothing here does I/O.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

PROTOCOL_VERSION = 1
HEADER = struct.Struct("<BBHId")  # kind, flags, reserved, sequence, timestamp ms
HEADER_BYTES = HEADER.size  # 16


class FrameKind(IntEnum):
    AUDIO_IN = 1
    JPEG = 2
    AUDIO_OUT = 3


class ProtocolError(ValueError):
    """A message the client got wrong; `code` is one of docs/protocol.md's error codes."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


@dataclass(frozen=True)
class Frame:
    kind: FrameKind
    sequence: int
    ts_ms: float
    payload: bytes


def pack_frame(kind: FrameKind, sequence: int, ts_ms: float, payload: bytes) -> bytes:
    return HEADER.pack(kind, 0, 0, sequence & 0xFFFFFFFF, ts_ms) + payload


def parse_frame(data: bytes, max_audio_bytes: int, max_jpeg_bytes: int) -> Frame:
    if len(data) < HEADER_BYTES:
        raise ProtocolError("bad_frame", f"binary frame of {len(data)} bytes is shorter than the "
                                         f"{HEADER_BYTES}-byte header")
    kind, _flags, _reserved, sequence, ts_ms = HEADER.unpack_from(data)
    payload = data[HEADER_BYTES:]
    if kind == FrameKind.AUDIO_IN:
        if len(payload) > max_audio_bytes:
            raise ProtocolError("too_large", f"audio frame of {len(payload)} bytes is over the "
                                             f"{max_audio_bytes}-byte limit")
        if len(payload) % 2:
            raise ProtocolError("bad_frame", f"audio frame of {len(payload)} bytes: PCM16 needs an even count")
        if not payload:
            raise ProtocolError("bad_frame", "empty audio frame")
    elif kind == FrameKind.JPEG:
        if len(payload) > max_jpeg_bytes:
            raise ProtocolError("too_large", f"JPEG frame of {len(payload)} bytes is over the "
                                             f"{max_jpeg_bytes}-byte limit")
    else:
        raise ProtocolError("bad_frame", f"unknown frame kind {kind}: clients send 1 (audio) or 2 (JPEG)")
    if ts_ms != ts_ms or ts_ms in (float("inf"), float("-inf")):  # NaN or infinite
        raise ProtocolError("bad_frame", "frame timestamp must be a finite number of ms")
    return Frame(FrameKind(kind), sequence, ts_ms, payload)


@dataclass(frozen=True)
class SessionStart:
    sample_rate: int = 16000
    client_vad: bool = False
    voice: str = ""
    language: str = ""
    camera: bool = False
    turn_hold: bool = False  # the client keeps streaming after audio.end when told `turn.hold`


@dataclass(frozen=True)
class TypedText:
    text: str


@dataclass(frozen=True)
class Interrupt:
    turn_id: str
    played_samples: int


@dataclass(frozen=True)
class Playback:
    turn_id: str
    played_samples: int


@dataclass(frozen=True)
class AudioEnd:
    pass


@dataclass(frozen=True)
class Ping:
    pass


ClientMessage = SessionStart | TypedText | Interrupt | Playback | AudioEnd | Ping
ACCEPTED_SAMPLE_RATES = (16000,)
# What session.ready announces: the tts's rate (Kokoro speaks at 24 kHz). Each turn's `audio.start` states the
# rate of that turn's audio, which is what a client plays it at.
SAMPLE_RATE_OUT = 24000


def _field(obj: dict[str, Any], name: str, typ: type | tuple[type, ...], default: Any = ...) -> Any:
    if name not in obj:
        if default is ...:
            raise ProtocolError("bad_message", f"'{obj.get('type')}' needs a '{name}' field")
        return default
    value = obj[name]
    if isinstance(value, bool) and typ in (int, (int, float)):
        raise ProtocolError("bad_message", f"'{name}' must be a number, got a boolean")
    if not isinstance(value, typ):
        expected = typ.__name__ if isinstance(typ, type) else " or ".join(t.__name__ for t in typ)
        raise ProtocolError("bad_message", f"'{name}' must be {expected}, got {type(value).__name__}")
    return value


def parse_message(text: str, max_bytes: int, max_text_chars: int) -> ClientMessage:
    if len(text.encode()) > max_bytes:
        raise ProtocolError("too_large", f"message of {len(text.encode())} bytes is over the {max_bytes}-byte limit")
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ProtocolError("bad_message", f"not valid JSON ({exc.msg} at position {exc.pos})") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ProtocolError("bad_message", "a message must be a JSON object with a string 'type'")
    kind = obj["type"]
    if kind == "session.start":
        version = _field(obj, "protocol", int)
        if version != PROTOCOL_VERSION:
            raise ProtocolError("protocol", f"protocol {version} is not supported; this gateway speaks {PROTOCOL_VERSION}")
        rate = _field(obj, "sample_rate", int, 16000)
        if rate not in ACCEPTED_SAMPLE_RATES:
            raise ProtocolError("protocol", f"sample_rate {rate} is not accepted; send PCM16 at "
                                            f"{' or '.join(map(str, ACCEPTED_SAMPLE_RATES))} Hz")
        return SessionStart(rate, _field(obj, "client_vad", bool, False), _field(obj, "voice", str, ""),
                            _field(obj, "language", str, ""), _field(obj, "camera", bool, False),
                            _field(obj, "turn_hold", bool, False))
    if kind == "text":
        body = _field(obj, "text", str).strip()
        if not body:
            raise ProtocolError("bad_message", "'text' is empty")
        if len(body) > max_text_chars:
            raise ProtocolError("too_large", f"text of {len(body)} characters is over the {max_text_chars} limit")
        return TypedText(body)
    if kind in ("interrupt", "playback"):
        turn_id = _field(obj, "turn_id", str, "")
        played = _field(obj, "played_samples", int, 0)
        if played < 0:
            raise ProtocolError("bad_message", "'played_samples' must be >= 0")
        return Interrupt(turn_id, played) if kind == "interrupt" else Playback(turn_id, played)
    if kind == "audio.end":
        return AudioEnd()
    if kind == "ping":
        return Ping()
    raise ProtocolError("bad_message", f"unknown message type '{kind[:40]}'; accepted: session.start, audio.end, "
                                       "text, interrupt, playback, ping")


def event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields}, ensure_ascii=False)
