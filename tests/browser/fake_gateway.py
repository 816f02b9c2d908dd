"""A test-only stand-in for the gateway: serves the page and speaks docs/protocol.md with scripted turns.

It records every message and frame the page sends, so tests can check what the browser put on the wire. A turn
(after `audio.end` or `text`) streams three sentences of text and a sine wave as PCM16 audio-out frames, paced at
twice real time like a TTS that runs ahead of playback; `interrupt` cancels it and `turn.done` then carries the
sentences whose audio had started playing as `heard_text`. `turn.done` waits for the page's final `playback`
report (or the interrupt), so `heard_text` is what the listener heard. Typing DROP_SOCKET makes it close the socket;
typing a key of SCRIPTED_FAILURES gets that busy/error event instead of a turn; typing LONG_ANSWER gets a turn that
ends like the real gateway's (turn.done right after audio.done); typing STALLED_ANSWER gets a turn whose audio stops
coming for STALL_S after its first STALL_AFTER_CHUNKS chunks, so the page's player runs dry once mid-answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import struct
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from aiohttp import WSMsgType, web

HEADER = struct.Struct("<BBHId")  # kind, flags, reserved, seq, timestamp ms
KIND_AUDIO_IN, KIND_JPEG, KIND_AUDIO_OUT = 1, 2, 3
RATE_OUT = 24000
CHUNK = 2048
SENTENCES = ("The table holds a red cup. ", "Next to it lies a blue notebook. ", "A pen rests on top of it.")
VOICES = ["jf_alpha", "jf_gongitsune", "jm_kumo"]
DROP_SOCKET = "/test-drop-socket"  # a typed text that makes the fake close the socket (reconnection test)
# A typed text answered like the real gateway does: 5 s of audio, and turn.done right after audio.done, before the
# page has played it all (an interrupt after that is too late for heard_text).
LONG_ANSWER = "/test-long-answer"
LONG_ANSWER_SECONDS = 5.0
STALLED_ANSWER = "/test-stalled-answer"
# Typed texts answered like LONG_ANSWER, over which the server hears speech DUCK_AFTER_S into the answer (turn.duck):
# DUCKED_ANSWER's was a backchannel (turn.unduck DUCK_HELD_S later); DUCKED_CUT's was not (turn.done interrupted).
DUCKED_ANSWER = "/test-ducked-answer"
DUCKED_CUT = "/test-ducked-cut"
DUCK_AFTER_S, DUCK_HELD_S = 1.0, 1.0
STALL_AFTER_CHUNKS = 6  # 0.5 s of audio, sent at twice real time
STALL_S = 1.0  # the player has about 0.25 s of that audio left when the stall begins
SCRIPTED_FAILURES = {  # typed texts answered by a failure instead of a turn
    "/test-busy": {"type": "busy", "message": "2 requests are already running; try again in a moment"},
    "/test-error": {"type": "error", "code": "unavailable", "message": "the llm service is down"},
}


@dataclass
class Frame:
    kind: int
    flags: int
    reserved: int
    seq: int
    timestamp_ms: float
    payload: bytes
    utterance: int  # how many audio.end messages came before this frame


@dataclass
class Recorder:
    """What the page sent, in arrival order."""

    messages: list[dict] = field(default_factory=list)
    frames: list[Frame] = field(default_factory=list)
    sessions: int = 0
    audio_ends: int = 0

    def of_type(self, kind: str) -> list[dict]:
        return [m for m in self.messages if m.get("type") == kind]

    def frames_of(self, kind: int) -> list[Frame]:
        return [f for f in self.frames if f.kind == kind]


@dataclass
class Script:
    """Reply length (seconds of audio) of the n-th turn; the last value repeats."""

    reply_seconds: list[float] = field(default_factory=lambda: [6.0])
    backchannel: bool = False  # session.ready says the server ducks speech over an answer (turn.duck)

    def seconds(self, index: int) -> float:
        return self.reply_seconds[min(index, len(self.reply_seconds) - 1)]


def sine_pcm16(samples: int, start: int, freq: float = 440.0, rate: int = RATE_OUT) -> bytes:
    t = (np.arange(samples) + start) / rate
    return (0.3 * np.sin(2 * math.pi * freq * t) * 32767).astype("<i2").tobytes()


def audio_out_frame(seq: int, offset: int, pcm: bytes) -> bytes:
    return HEADER.pack(KIND_AUDIO_OUT, 0, 0, seq, float(offset)) + pcm


class _Session:
    def __init__(self, ws: web.WebSocketResponse, recorder: Recorder, script: Script) -> None:
        self.ws = ws
        self.recorder = recorder
        self.script = script
        self.turns = 0
        self.turn_task: asyncio.Task | None = None
        self.duck_task: asyncio.Task | None = None
        self.turn_id: str | None = None
        self.heard = asyncio.Event()
        self.played = 0

    async def handle(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "text" and message.get("text") == DROP_SOCKET:
            await self.ws.close(code=1011, message=b"test: dropped")
        elif kind == "text" and message.get("text") in SCRIPTED_FAILURES:
            await self.ws.send_json({"turn_id": f"t{self.turns}", **SCRIPTED_FAILURES[message["text"]]})
            self.turns += 1
        elif kind in ("audio.end", "text"):
            await self._finish_turn()
            audio_ms = self._utterance_ms() if kind == "audio.end" else 0
            if kind == "audio.end":
                self.recorder.audio_ends += 1
            ducked = kind == "text" and message.get("text") in (DUCKED_ANSWER, DUCKED_CUT)
            long = kind == "text" and message.get("text") == LONG_ANSWER or ducked
            stalled = kind == "text" and message.get("text") == STALLED_ANSWER
            self.turn_task = asyncio.create_task(
                self._run_turn("text" if kind == "text" else "speech", audio_ms,
                               LONG_ANSWER_SECONDS if long else None, wait_for_playback=not long,
                               stall_after=STALL_AFTER_CHUNKS if stalled else None))
            if ducked:
                self.duck_task = asyncio.create_task(self._speech_over_answer(message["text"] == DUCKED_CUT))
        elif kind == "interrupt" and message.get("turn_id") == self.turn_id:
            self.played = int(message["played_samples"])
            if self.turn_task and not self.turn_task.done():
                self.turn_task.cancel()
            await self._finish_turn(interrupted=True)
        elif kind == "playback" and message.get("turn_id") == self.turn_id:
            self.played = int(message["played_samples"])
            if self.played >= self.total_samples:
                self.heard.set()
        elif kind == "ping":
            await self.ws.send_json({"type": "pong"})

    async def _speech_over_answer(self, cut: bool) -> None:
        await asyncio.sleep(DUCK_AFTER_S)
        turn_id = f"t{self.turns - 1}"
        await self.ws.send_json({"type": "turn.duck", "turn_id": turn_id, "gain_db": -15.0})
        await asyncio.sleep(DUCK_HELD_S)
        if not cut:
            await self.ws.send_json({"type": "turn.unduck", "turn_id": turn_id})
            return
        if self.turn_task and not self.turn_task.done():  # still sending: stop, as the real gateway's cut does
            self.turn_task.cancel()
        self.turn_id = turn_id  # turn.done may have gone already (a LONG_ANSWER ends before it plays out)
        await self._finish_turn(interrupted=True)

    def _utterance_ms(self) -> float:
        pcm_bytes = sum(len(f.payload) for f in self.recorder.frames_of(KIND_AUDIO_IN)
                        if f.utterance == self.recorder.audio_ends)
        return pcm_bytes / 2 / 16  # PCM16 at 16 kHz

    async def _run_turn(self, source: str, audio_ms: float, seconds: float | None, wait_for_playback: bool,
                        stall_after: int | None = None) -> None:
        self.turn_id = f"t{self.turns}"
        seconds = seconds or self.script.seconds(self.turns)
        self.turns += 1
        self.total_samples = int(seconds * RATE_OUT)
        self.played = 0
        self.heard = asyncio.Event()
        self.started = time.monotonic()
        await self.ws.send_json({"type": "turn.started", "turn_id": self.turn_id, "source": source,
                                 "audio_ms": audio_ms, "images": 1})
        for sentence in SENTENCES:
            await self.ws.send_json({"type": "text.delta", "turn_id": self.turn_id, "text": sentence})
        await self.ws.send_json({"type": "audio.start", "turn_id": self.turn_id, "sample_rate": RATE_OUT})
        seq = 0
        for offset in range(0, self.total_samples, CHUNK):
            size = min(CHUNK, self.total_samples - offset)
            await self.ws.send_bytes(audio_out_frame(seq, offset, sine_pcm16(size, offset)))
            seq += 1
            await asyncio.sleep(size / RATE_OUT / 2 + (STALL_S if seq == stall_after else 0.0))
        await self.ws.send_json({"type": "audio.done", "turn_id": self.turn_id, "samples": self.total_samples})
        if wait_for_playback:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.heard.wait(), seconds + 3)
        await self._finish_turn()

    async def _finish_turn(self, interrupted: bool = False) -> None:
        if self.turn_id is None:
            return
        turn_id, self.turn_id = self.turn_id, None
        per_sentence = self.total_samples / len(SENTENCES)
        heard = [s for i, s in enumerate(SENTENCES) if i * per_sentence < self.played] if interrupted else SENTENCES
        total_ms = (time.monotonic() - self.started) * 1000
        await self.ws.send_json({
            "type": "turn.done", "turn_id": turn_id, "text": "".join(SENTENCES), "heard_text": "".join(heard),
            "interrupted": interrupted, "finish_reason": "interrupted" if interrupted else "stop",
            "timings": {"endpoint_ms": 12.0, "llm_queue_ms": 0.4, "first_token_ms": 80.0, "first_audio_ms": 150.0,
                        "ttfa_ms": 162.0, "tts_first_chunk_ms": 60.0, "total_ms": round(total_ms, 1)},
        })


def _parse_frame(data: bytes, utterance: int) -> Frame:
    kind, flags, reserved, seq, ts = HEADER.unpack_from(data)
    return Frame(kind, flags, reserved, seq, ts, data[HEADER.size:], utterance)


async def _ws_handler(request: web.Request) -> web.WebSocketResponse:
    recorder: Recorder = request.app[RECORDER]
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    session = _Session(ws, recorder, request.app[SCRIPT])
    try:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                recorder.frames.append(_parse_frame(msg.data, recorder.audio_ends))
            elif msg.type == WSMsgType.TEXT:
                message = json.loads(msg.data)
                recorder.messages.append(message)
                if message.get("type") == "session.start":
                    recorder.sessions += 1
                    await ws.send_json(session_ready(recorder.sessions, message, request.app[SCRIPT].backchannel))
                    await ws.send_json({"type": "health", "service": "llm", "status": "SERVING"})
                else:
                    await session.handle(message)
    finally:
        for task in (session.turn_task, session.duck_task):
            if task:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    return ws


def session_ready(number: int, start: dict, backchannel: bool = False) -> dict:
    turn = {"turn": {"backchannel": True, "duck_db": -15.0}} if backchannel else {}
    return {**turn,
        "type": "session.ready", "session_id": f"s{number}", "protocol": 1, "sample_rate_in": 16000,
        "sample_rate_out": RATE_OUT, "voices": VOICES, "voice": start.get("voice") or VOICES[0],
        "model": {"name": "fake", "audio_input": True, "image_input": True, "fallback": False, "note": ""},
        "limits": {"max_audio_frame_bytes": 65536, "max_jpeg_bytes": 2_000_000, "jitter_ms": 500,
                   "request_timeout_ms": 2000},
    }


# The page runs under this policy (recommended for the real gateway too): nothing but its own origin, and WASM
# compilation for onnxruntime-web. 'self' covers the same-origin ws:// socket.
PAGE_CSP = ("default-src 'self'; script-src 'self' 'wasm-unsafe-eval'; connect-src 'self'; img-src 'self' data:; "
            "media-src 'self' blob:; style-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'")

RECORDER = web.AppKey("recorder", Recorder)
SCRIPT = web.AppKey("script", Script)


def create_app(static_dir: Path, vendor_dir: Path, recorder: Recorder, script: Script) -> web.Application:
    """The routes the real gateway serves for the page: `/`, `/static/`, `/vendor/`, `/ws`."""
    app = web.Application()
    app[RECORDER] = recorder
    app[SCRIPT] = script

    async def index(_: web.Request) -> web.FileResponse:
        return web.FileResponse(static_dir / "index.html", headers={"Content-Security-Policy": PAGE_CSP})

    app.router.add_get("/", index)
    app.router.add_get("/ws", _ws_handler)
    app.router.add_static("/static/", static_dir)
    app.router.add_static("/vendor/", vendor_dir)
    return app
