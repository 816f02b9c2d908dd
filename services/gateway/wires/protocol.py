"""Protocol v1 on the wire (docs/protocol.md): binary frame headers, client messages, error codes, and the
conversation's events serialized as v1 sends them.

Parsing is strict and total: anything a client sends either becomes a typed message or a `ProtocolError` whose
code and message go back to the client as an `error` event. Nothing here does I/O.
"""

from __future__ import annotations

import dataclasses
import json
import struct
from dataclasses import dataclass
from enum import IntEnum
from typing import Any

import orjson

from services.common import audio
from services.gateway.conversation import events
from services.gateway.conversation.inputs import InputError

PROTOCOL_VERSION = 1
HEADER = struct.Struct("<BBHId")  # kind, flags, reserved, sequence, timestamp ms
HEADER_BYTES = HEADER.size  # 16


class FrameKind(IntEnum):
    AUDIO_IN = 1
    JPEG = 2
    AUDIO_OUT = 3


class ProtocolError(InputError):
    """A message the client got wrong; `code` is one of docs/protocol.md's error codes."""


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


# Each client message is a dataclass whose fields are its JSON fields: a field without a default is required, and
# its annotation is the JSON type it must have. `parse_message` checks every message against these, in one place.
@dataclass(frozen=True)
class SessionStart:
    protocol: int
    sample_rate: int = audio.SPEECH_RATE
    client_vad: bool = False
    voice: str = ""
    language: str = ""
    camera: bool = False
    turn_hold: bool = False  # the client keeps streaming after audio.end when told `turn.hold`
    echo_cancel: str = "off"  # ECHO_CANCEL: the server removes the answer's echo from the microphone


@dataclass(frozen=True)
class TypedText:
    text: str


@dataclass(frozen=True)
class Interrupt:
    turn_id: str  # "" stands for the turn in progress
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
MESSAGES: dict[str, type[ClientMessage]] = {"session.start": SessionStart, "audio.end": AudioEnd, "text": TypedText,
                                            "interrupt": Interrupt, "playback": Playback, "ping": Ping}
# A field's annotation (a string: see `from __future__`) -> the Python type JSON decodes it to, and its JSON name.
_FIELD_TYPES = {"int": (int, "an integer"), "str": (str, "a string"), "bool": (bool, "a boolean")}
_JSON_NAMES = {dict: "an object", list: "an array", str: "a string", int: "an integer", float: "a number",
               bool: "a boolean", type(None): "null"}
ACCEPTED_SAMPLE_RATES = (audio.SPEECH_RATE,)
# session.start's echo_cancel, as the conversation's Opening takes it.
ECHO_CANCEL = {"on": True, "off": False}


def decode_json(text: str | bytes) -> Any:
    """JSON as RFC 8259 has it, decoded without recursion: orjson refuses nesting deeper than 1024 levels, a number
    too large for a double, NaN and Infinity, and any string holding a lone UTF-16 surrogate (an escape such as
    \\ud800 without its pair), so every string that comes out can be encoded as UTF-8 and sent on in protobuf."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        hint = "; strings must be valid Unicode" if "surrogate" in exc.msg else ""
        raise ProtocolError("bad_message", f"not valid JSON ({exc.msg} at position {exc.pos}{hint})") from None


def _fields_of(kind: str, cls: type[ClientMessage], obj: dict[str, Any]) -> dict[str, Any]:
    """The message's declared fields out of `obj`: each required one present, each one of its declared type (other
    keys are ignored, for clients newer than this gateway)."""
    values: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name not in obj:
            if f.default is dataclasses.MISSING:
                raise ProtocolError("bad_message", f"'{kind}' needs a '{f.name}' field")
            continue
        value = obj[f.name]
        expected, described = _FIELD_TYPES[f.type]
        if type(value) is not expected:  # not isinstance: a boolean is no integer here
            raise ProtocolError("bad_message", f"'{f.name}' must be {described}, got {_JSON_NAMES[type(value)]}")
        values[f.name] = value
    return values


def _checked(msg: ClientMessage, max_text_chars: int) -> ClientMessage:
    """What a well-typed field may still get wrong; typed text comes back stripped."""
    if isinstance(msg, SessionStart):
        if msg.protocol != PROTOCOL_VERSION:
            raise ProtocolError("protocol", f"protocol {msg.protocol} is not supported; this gateway speaks "
                                            f"{PROTOCOL_VERSION}")
        if msg.sample_rate not in ACCEPTED_SAMPLE_RATES:
            raise ProtocolError("protocol", f"sample_rate {msg.sample_rate} is not accepted; send PCM16 at "
                                            f"{' or '.join(map(str, ACCEPTED_SAMPLE_RATES))} Hz")
        if msg.echo_cancel not in ECHO_CANCEL:
            raise ProtocolError("bad_message", f"echo_cancel {msg.echo_cancel!r} is not accepted; accepted: "
                                               f"{', '.join(map(repr, ECHO_CANCEL))}")
    elif isinstance(msg, TypedText):
        body = msg.text.strip()
        if not body:
            raise ProtocolError("bad_message", "'text' is empty")
        if len(body) > max_text_chars:
            raise ProtocolError("too_large", f"text of {len(body)} characters is over the {max_text_chars} limit")
        return TypedText(body)
    elif isinstance(msg, (Interrupt, Playback)) and msg.played_samples < 0:
        raise ProtocolError("bad_message", "'played_samples' must be >= 0")
    return msg


def parse_message(text: str, max_bytes: int, max_text_chars: int) -> ClientMessage:
    """The one way in for every JSON message: size, safe decoding, the declared fields, then their values."""
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > max_bytes:
        raise ProtocolError("too_large", f"message of {size} bytes is over the {max_bytes}-byte limit")
    obj = decode_json(text)
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ProtocolError("bad_message", "a message must be a JSON object with a string 'type'")
    kind = obj["type"]
    cls = MESSAGES.get(kind)
    if cls is None:
        raise ProtocolError("bad_message", f"unknown message type '{kind[:40]}'; accepted: {', '.join(MESSAGES)}")
    return _checked(cls(**_fields_of(kind, cls, obj)), max_text_chars)


def event(kind: str, **fields: Any) -> str:
    return json.dumps({"type": kind, **fields}, ensure_ascii=False)


_TYPES: dict[type, str] = {
    events.SessionReady: "session.ready", events.SpeechStarted: "speech.started", events.SpeechEnded: "speech.ended",
    events.TurnHeld: "turn.hold", events.TurnStarted: "turn.started", events.Transcript: "transcript",
    events.TextDelta: "text.delta", events.AudioStarted: "audio.start", events.AudioDone: "audio.done",
    events.TurnDone: "turn.done", events.TurnCut: "turn.cut", events.TurnResumed: "turn.resumed",
    events.TurnDuck: "turn.duck", events.TurnUnduck: "turn.unduck",
    events.Error: "error", events.Busy: "busy", events.Health: "health", events.Pong: "pong"}


def serialize(ev: events.Event) -> str | bytes:
    """A conversation event as protocol v1 sends it (docs/protocol.md): audio as a binary frame, the rest as JSON."""
    if isinstance(ev, events.AudioChunk):
        return pack_frame(FrameKind.AUDIO_OUT, ev.sequence, float(ev.sample_offset), ev.pcm16)
    fields = {f.name: getattr(ev, f.name) for f in dataclasses.fields(ev)}
    if isinstance(ev, events.SessionReady):
        fields = {"session_id": ev.session_id, "protocol": PROTOCOL_VERSION, **fields}
    elif isinstance(ev, events.Transcript):
        fields.pop("recognition_ms" if ev.error is not None else "error")
    elif isinstance(ev, events.Error) and not ev.turn_id:
        del fields["turn_id"]
    return event(_TYPES[type(ev)], **fields)
