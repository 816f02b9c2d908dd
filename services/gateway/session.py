"""One WebSocket session: media in, turns out, and the conversation history it owns.

Only the handler task reads the socket (and calls `on_text` / `on_binary`); one writer task owns every send, so
events never interleave and an interrupted turn's queued audio can be dropped in one place. State changes go
through `_set_state`, which logs them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from enum import Enum

import grpc
from aiohttp import web

from services.common import audio, config, logs
from services.gateway import metrics
from services.gateway.media import AudioTape, CameraFrame, JitterBuffer, decode_jpeg, pick_keyframes
from services.gateway.protocol import (AudioEnd, FrameKind, Interrupt, Ping, Playback, ProtocolError, SessionStart,
                                       TypedText, event, parse_frame, parse_message)
from services.gateway.turn import Turn, TurnInput, TurnSettings
from services.gateway.vad_link import VadLink
from sotto.v1 import common_pb2, llm_pb2_grpc, tts_pb2_grpc, vad_pb2, vad_pb2_grpc

_LOGGER = logging.getLogger(__name__)
INTERRUPT_WAIT_S = 2.0  # how long a new turn waits for the interrupted one to wind down


class State(Enum):
    LISTENING = "listening"
    THINKING = "thinking"
    SPEAKING = "speaking"


class Session:
    def __init__(self, ws: web.WebSocketResponse, cfg: config.Settings, channels: dict[str, grpc.aio.Channel],
                 model: dict, health: dict[str, str]) -> None:
        self.id = uuid.uuid4().hex[:12]
        self.ws = ws
        self.cfg = cfg
        self.gw = cfg.gateway
        self.model = model
        self.health = health  # the gateway's live view, shared: session.ready reports it as it is then
        self.llm = llm_pb2_grpc.LlmServiceStub(channels["llm"])
        self.tts = tts_pb2_grpc.TtsServiceStub(channels["tts"])
        self.vad_stub = vad_pb2_grpc.VadServiceStub(channels["vad"])
        self.start: SessionStart | None = None
        self.state = State.LISTENING
        self.history: list[common_pb2.Turn] = []
        self.history_owner: Turn | None = None  # the turn whose reply is the last history entry
        self.turn: Turn | None = None
        self.turn_task: asyncio.Task | None = None
        self.out: asyncio.Queue[tuple[str | bytes, Turn | None] | None] = asyncio.Queue()
        self.writer = asyncio.create_task(self._write(), name=f"session-{self.id}::write")
        self.jitter = JitterBuffer(self.gw.jitter_ms)
        self.tape = AudioTape(16000, self.gw.max_turn_audio_s + self.gw.preroll_ms / 1000 + 2)
        self.frames: list[CameraFrame] = []
        self.vad: VadLink | None = None
        self.speech_start: int | None = None       # tape sample of the open utterance's start
        self.last_audio_at = 0.0
        self.turns = 0
        self._bucket = (float(self.gw.max_messages_per_s), time.monotonic())
        self._rate_warned = 0.0
        self._vad_failure_told = False  # until the vad service answers again
        self._watch_wanted = asyncio.Event()  # set by audio and by a speech start: wakes a parked watchdog
        self._watchdog = asyncio.create_task(self._watch_stalls(), name=f"session-{self.id}::stalls")

    # -- sending ---------------------------------------------------------------------------------------------
    def send(self, data: str | bytes, turn: Turn | None = None) -> None:
        self.out.put_nowait((data, turn))

    def error(self, code: str, message: str, turn_id: str = "") -> None:
        metrics.ERRORS.labels(code).inc()
        self.send(event("error", code=code, message=message, **({"turn_id": turn_id} if turn_id else {})))

    async def _write(self) -> None:
        while (item := await self.out.get()) is not None:
            data, turn = item
            if turn is not None and turn.interrupted and isinstance(data, bytes):
                continue  # barge-in: audio of a cut turn is never sent
            try:
                if isinstance(data, bytes):
                    await self.ws.send_bytes(data)
                else:
                    await self.ws.send_str(data)
            except (ConnectionResetError, RuntimeError):
                return
            # After the send: the first audio frame does not wait for a log line to be formatted and written.
            if turn is not None and self.turn is turn and isinstance(data, bytes) and self.state != State.SPEAKING:
                self._set_state(State.SPEAKING, "first audio")

    def _set_state(self, new: State, reason: str) -> None:
        if new is not self.state:
            _LOGGER.info("session_state", extra={"from": self.state.value, "to": new.value, "reason": reason})
            self.state = new

    # -- input -----------------------------------------------------------------------------------------------
    def _admit(self) -> bool:
        """Token bucket over all messages; the excess is dropped, counted and reported at most once a second."""
        tokens, last = self._bucket
        now = time.monotonic()
        rate = float(self.gw.max_messages_per_s)
        tokens = min(rate, tokens + (now - last) * rate)
        if tokens < 1:
            self._bucket = (tokens, now)
            metrics.DROPPED.labels("rate_limited").inc()
            if now - self._rate_warned > 1.0:
                self._rate_warned = now
                self.error("rate_limited", f"more than {self.gw.max_messages_per_s} messages per second; "
                                           "the excess is dropped")
            return False
        self._bucket = (tokens - 1, now)
        return True

    async def on_text(self, text: str) -> bool:
        """Handle one JSON message; returns False when the session must close."""
        if not self._admit():
            return True
        try:
            msg = parse_message(text, self.gw.max_message_bytes, self.gw.max_text_chars)
        except ProtocolError as exc:
            if exc.code == "protocol" and self.start is not None:
                # `protocol` means "the socket is closed now"; a second, bad session.start does not close it
                self.error("bad_message", f"session.start was already received ({exc.message})")
                return True
            self.error(exc.code, exc.message)
            return exc.code != "protocol"
        if isinstance(msg, SessionStart):
            if self.start is not None:
                self.error("bad_message", "session.start was already received")
                return True
            self._open(msg)
            return True
        if self.start is None:
            self.error("protocol", "the first message must be session.start")
            return False
        if isinstance(msg, TypedText):
            await self._begin_turn(TurnInput(self._turn_id(), "text", msg.text, b"", 0.0, [], [], time.monotonic()))
        elif isinstance(msg, Interrupt):
            self._interrupt(msg.turn_id, msg.played_samples)
        elif isinstance(msg, Playback):
            if self.turn is not None and msg.turn_id in ("", self.turn.inp.turn_id):
                self.turn.report_playback(msg.played_samples)
        elif isinstance(msg, AudioEnd) and self.vad is not None:
            self.vad.end_of_speech()
        elif isinstance(msg, Ping):
            self.send(event("pong"))
        return True

    def _interrupt(self, turn_id: str, played_samples: int) -> None:
        turn = self.turn
        if turn is None or turn_id not in ("", turn.inp.turn_id):
            return  # an interrupt for a turn this session no longer tracks
        if self.turn_task is not None and not self.turn_task.done():
            turn.interrupt(played_samples, "client")
            return
        heard = turn.heard_after_done(played_samples)
        if heard is not None and self.history_owner is turn:
            metrics.INTERRUPTIONS.labels("client_after_done").inc()
            self.history[-1].text = heard  # the history keeps only what the user actually heard
            self.history[-1].interrupted = True
            _LOGGER.info("history_cut", extra={"played_samples": played_samples, "heard_chars": len(heard)})

    async def on_binary(self, data: bytes) -> None:
        if not self._admit():
            return
        if self.start is None:
            self.error("protocol", "send session.start before media")
            return
        try:
            frame = parse_frame(data, self.gw.max_audio_frame_bytes, self.gw.max_jpeg_bytes)
            if frame.kind == FrameKind.JPEG:
                thumb = decode_jpeg(frame.payload, self.gw.max_image_pixels)
                self.frames.append(CameraFrame(frame.ts_ms, frame.payload, thumb))
                del self.frames[: -self.gw.max_frames_per_turn]
                return
        except ProtocolError as exc:
            self.error(exc.code, exc.message)
            return
        self._watch_wanted.set()
        before = dict(self.jitter.dropped)
        for ready in self.jitter.push(frame):
            self._on_audio(ready.payload, ready.ts_ms)
        for reason, count in self.jitter.dropped.items():
            if count > before[reason]:
                metrics.DROPPED.labels(f"audio_{reason}").inc(count - before[reason])

    def _on_audio(self, pcm: bytes, ts_ms: float) -> None:
        now = time.monotonic()
        self.last_audio_at = now
        start = self.tape.append(pcm, ts_ms, now)
        if self.speech_start is not None and (self.tape.end - self.speech_start) / 16000 > self.gw.max_turn_audio_s:
            self.error("too_large", f"the utterance is longer than {self.gw.max_turn_audio_s:g} s; it was dropped")
            self.speech_start = None
            asyncio.create_task(self._reset_vad())
            return
        assert self.vad is not None
        self.vad.send(pcm, ts_ms, start)

    def awaiting_first_audio(self) -> bool:
        """A turn is thinking (llm, first sentence's synthesis) and nobody is speaking: the CPU matters more than
        how soon new speech is noticed, since there is no answer playing to interrupt yet."""
        return (self.speech_start is None and self.turn is not None and self.turn_task is not None
                and not self.turn_task.done() and self.turn.samples_sent == 0)

    async def _reset_vad(self) -> None:
        if self.vad is not None:
            await self.vad.reset()

    # -- vad events ------------------------------------------------------------------------------------------
    async def _on_vad_event(self, ev: vad_pb2.VadEvent, origin: int) -> None:
        self._vad_failure_told = False
        if ev.kind == vad_pb2.VadEvent.SPEECH_STARTED:
            self.speech_start = origin + ev.start_sample
            self._watch_wanted.set()
            self.send(event("speech.started", ts_ms=ev.start_ts_ms))
            if self.turn is not None and self.turn_task is not None and not self.turn_task.done():
                self.turn.interrupt(self.turn.played_samples, "server_vad")
        elif ev.kind == vad_pb2.VadEvent.SPEECH_ENDED:
            start = origin + ev.start_sample - int(self.gw.preroll_ms * 16)
            end = origin + ev.end_sample
            self.speech_start = None
            self.send(event("speech.ended", ts_ms=ev.end_ts_ms))
            pcm = self.tape.cut(start, end)
            received = self.tape.received_at(min(end, self.tape.end - 1)) or time.monotonic()
            endpoint_ms = (time.monotonic() - received) * 1000.0
            keyframes = pick_keyframes(self.frames, float(ev.start_ts_ms), float(ev.end_ts_ms))
            self.frames = [f for f in self.frames if f.ts_ms > ev.end_ts_ms]
            await self._begin_turn(TurnInput(
                self._turn_id(), "speech", "", audio.wav_bytes(pcm, 16000), len(pcm) / 32.0,
                [f.jpeg for f in keyframes], [f.ts_ms for f in keyframes], received, endpoint_ms))

    async def _on_vad_failure(self, reason: str) -> None:
        if self.speech_start is not None:
            self.error("unavailable", f"the vad service failed mid-utterance ({reason}); the utterance was dropped")
        elif not self._vad_failure_told:
            # Audio goes on arriving, and each frame retries the stream: say it once, not per frame.
            self.error("unavailable", f"the vad service is unavailable ({reason}): speech is not heard "
                                      "until it is back; typed messages still work")
        self._vad_failure_told = True
        self.speech_start = None

    async def _watch_stalls(self) -> None:
        """An utterance whose audio stops arriving is dropped after the request timeout, with an error, and frames
        held behind a gap are released once the jitter buffer gives up on it.

        With neither to watch (no utterance open, no frame held) it parks until audio or a speech start arrives:
        a session whose reply is being prepared after the page's `audio.end`, or an idle one, then wakes the gateway
        not at all instead of 10 times a second, and on two cores each wake-up is taken from the synthesis of the
        first sentence (docs/performance.md)."""
        timeout = self.gw.request_timeout_ms / 1000.0
        while True:
            if self.speech_start is None and not self.jitter.pending:
                self._watch_wanted.clear()
                await self._watch_wanted.wait()
            await asyncio.sleep(min(0.1, timeout / 4))
            for ready in self.jitter.release():
                self._on_audio(ready.payload, ready.ts_ms)
            if self.speech_start is not None and time.monotonic() - self.last_audio_at > timeout:
                self.speech_start = None
                self.error("stalled_input", f"audio stopped arriving mid-utterance for over "
                                            f"{self.gw.request_timeout_ms} ms; the utterance was dropped")
                await self._reset_vad()

    # -- turns -----------------------------------------------------------------------------------------------
    def _turn_id(self) -> str:
        self.turns += 1
        return f"{self.id}-{self.turns}"

    def _open(self, start: SessionStart) -> None:
        self.start = start
        v = self.cfg.vad
        settings = vad_pb2.VadSettings(threshold=v.threshold, min_speech_ms=v.min_speech_ms,
                                       min_silence_ms=v.min_silence_ms, speech_pad_ms=v.speech_pad_ms)
        self.vad = VadLink(self.vad_stub, settings, start.sample_rate, self._on_vad_event, self._on_vad_failure,
                           self.gw.request_timeout_ms / 1000.0, self.gw.vad_batch_ms, self.awaiting_first_audio,
                           lambda: self.speech_start is not None)
        limits = {"max_audio_frame_bytes": self.gw.max_audio_frame_bytes, "max_jpeg_bytes": self.gw.max_jpeg_bytes,
                  "max_image_pixels": self.gw.max_image_pixels, "max_messages_per_s": self.gw.max_messages_per_s,
                  "max_text_chars": self.gw.max_text_chars, "max_turn_audio_s": self.gw.max_turn_audio_s,
                  "jitter_ms": self.gw.jitter_ms, "request_timeout_ms": self.gw.request_timeout_ms}
        self.send(event("session.ready", session_id=self.id, protocol=1, sample_rate_in=start.sample_rate,
                        sample_rate_out=self.model.get("sample_rate_out", 24000), voices=self.model.get("voices", []),
                        voice=start.voice or self.gw.voice or self.model.get("default_voice", ""),
                        model=self.model.get("llm", {}), limits=limits, health=dict(self.health)))
        _LOGGER.info("session_started", extra={"client_vad": start.client_vad, "camera": start.camera})

    async def _begin_turn(self, inp: TurnInput) -> None:
        if self.turn_task is not None and not self.turn_task.done():
            assert self.turn is not None
            self.turn.interrupt(self.turn.played_samples, "new_turn")
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.turn_task), INTERRUPT_WAIT_S)
        assert self.start is not None
        settings = TurnSettings(self.gw.system_prompt, self.start.voice or self.gw.voice, self.start.language,
                                self.gw.request_timeout_ms / 1000.0, self.gw.turn_deadline_ms / 1000.0)
        history = self.history[-2 * self.gw.max_history_turns:] if self.gw.max_history_turns else []
        self.turn = Turn(inp, settings, list(history), self.llm, self.tts, self.id, self.send)
        self._set_state(State.THINKING, inp.source)
        self.turn_task = asyncio.create_task(self._run_turn(self.turn), name=f"turn-{inp.turn_id}")

    async def _run_turn(self, turn: Turn) -> None:
        with logs.bound(self.id, turn.inp.turn_id):
            try:
                result = await turn.run()
            except Exception:
                _LOGGER.exception("turn_failed")
                self.error("internal", "the turn failed unexpectedly", turn.inp.turn_id)
                return
            finally:
                if self.turn is turn:
                    self._set_state(State.LISTENING, "turn over")
        if result.outcome in ("busy", "error"):
            return
        # A spoken turn is recorded with the text that was sent (none): the llm service then recognises its own
        # conversation and reuses it, audio still in the KV cache; it stands in a placeholder when it rebuilds.
        self.history.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_USER, text=turn.inp.text))
        self.history.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_ASSISTANT, text=result.heard_text,
                                            interrupted=result.interrupted))
        self.history_owner = turn

    def on_health(self, service: str, status: str) -> None:
        """Changes before `session.ready` are not sent: a client expects `session.ready` first, and it carries the
        health as it stands then."""
        if self.start is None:
            return
        if service == "vad" and status == "SERVING":
            self._vad_failure_told = False
        elif service == "vad" and self.vad is not None:
            self.vad.went_away()
        self.send(event("health", service=service, status=status))

    async def close(self) -> None:
        if self.turn is not None:
            self.turn.interrupt(self.turn.played_samples, "session_closed")
        for task in (self.turn_task, self._watchdog):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        if self.vad is not None:
            await self.vad.close()
        self.out.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.writer
        # A closed session can stay reachable through reference cycles (its tasks) until a full GC pass, which
        # may be many sessions later: drop the media it buffered now (up to 60 camera frames and 30 s of audio).
        self.frames.clear()
        self.tape = AudioTape(16000, 0)
        self.jitter = JitterBuffer(self.gw.jitter_ms)
