"""One WebSocket session's lifecycle: messages dispatched, turns started and ended, and the history it owns.

Only the handler task reads the socket (and calls `on_text` / `on_binary`); one writer task owns every send, so
events never interleave and an interrupted turn's queued audio can be dropped in one place. State changes go
through `_set_state`, which logs them. Incoming media is `MediaIntake`'s job, the message rate `RateLimiter`'s.
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

from services.common import config, logs
from services.gateway import barge_in, metrics
from services.gateway.hearing import Hearing, SpokenWords
from services.gateway.intake import MediaIntake
from services.gateway.playback import answer_playing
from services.gateway.protocol import (SAMPLE_RATE_OUT, AudioEnd, FrameKind, Interrupt, Ping, Playback, ProtocolError,
                                       SessionStart, TypedText, event, parse_frame, parse_message)
from services.gateway.rate_limit import RateLimiter
from services.gateway.resumption import Resumption
from services.gateway.turn import Outcome, Turn, TurnInput, TurnSettings
from services.gateway.vad_link import VadLink
from sotto.v1 import asr_pb2_grpc, common_pb2, llm_pb2_grpc, tts_pb2_grpc, vad_pb2, vad_pb2_grpc

_LOGGER = logging.getLogger(__name__)
INTERRUPT_WAIT_S = 2.0  # how long a new turn waits for the interrupted one to wind down


class State(Enum):
    LISTENING = "listening"
    THINKING = "thinking"
    SPEAKING = "speaking"


class Session:
    def __init__(self, *, ws: web.WebSocketResponse, cfg: config.Settings, channels: dict[str, grpc.aio.Channel],
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
        self.intake = MediaIntake(gw=self.gw, name=f"session-{self.id}", to_vad=self._to_vad,
                                  drop_utterance=self._drop_utterance)
        self.vad: VadLink | None = None
        self.hearing = Hearing(stub=asr_pb2_grpc.AsrServiceStub(channels["asr"]),
                               request_timeout_s=self.gw.request_timeout_ms / 1000.0,
                               turn_deadline_s=self.gw.turn_deadline_ms / 1000.0,
                               max_audio_s=self.gw.max_turn_audio_s)
        self.turns = 0
        self._limiter = RateLimiter(per_second=self.gw.max_messages_per_s)
        self._vad_failure_told = False  # until the vad service answers again
        # i36: an utterance resumed before its answer was heard becomes one turn; unfinished words are held
        self.resumption = Resumption(begin=self._begin_turn, hold_s=cfg.vad.max_turn_silence_ms / 1000.0,
                                     word_turn_on=self.gw.word_turn,
                                     grace_s=self.gw.jitter_ms / 1000.0)

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
        """The excess over the message rate is dropped, counted and reported (not every time)."""
        if self._limiter.admit():
            return True
        metrics.DROPPED.labels("rate_limited").inc()
        if self._limiter.warning_due():
            self.error("rate_limited", f"more than {self.gw.max_messages_per_s} messages per second; "
                                       "the excess is dropped")
        return False

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
            await self._begin_turn(TurnInput(turn_id=self._turn_id(), source="text", text=msg.text,
                                             t_input_end=time.monotonic()))
        elif isinstance(msg, Interrupt):
            self._interrupt(msg.turn_id, msg.played_samples)
        elif isinstance(msg, Playback):
            if self.turn is not None and msg.turn_id in ("", self.turn.inp.turn_id):
                self.turn.report_playback(msg.played_samples)
        elif isinstance(msg, AudioEnd) and self.vad is not None:
            self.vad.end_of_speech(ask_verdict=self.start.turn_hold)
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
        self._cut_finished(turn, played_samples, "client_after_done")

    def _cut_finished(self, turn: Turn, played_samples: int, trigger: str) -> str | None:
        """A finished answer cut at `played_samples`: the history keeps only what the user heard. Returns the
        heard text, or None when nothing was cut (all of it was heard, or a later turn owns the history)."""
        heard = turn.heard_after_done(played_samples)
        if heard is None or self.history_owner is not turn:
            return None
        metrics.INTERRUPTIONS.labels(trigger).inc()
        self.history[-1].text = heard  # the history keeps only what the user actually heard
        self.history[-1].interrupted = True
        _LOGGER.info("history_cut", extra={"played_samples": played_samples, "heard_chars": len(heard),
                                           "trigger": trigger})
        return heard

    async def on_binary(self, data: bytes) -> bool:
        """Handle one binary frame; returns False when the session must close."""
        if not self._admit():
            return True
        if self.start is None:
            self.error("protocol", "the first message must be session.start, not media")
            return False
        try:
            frame = parse_frame(data, self.gw.max_audio_frame_bytes, self.gw.max_jpeg_bytes)
            if frame.kind == FrameKind.JPEG:
                if self._model_sees():
                    self.intake.camera(frame)
                else:  # i36: a camera frame for a model that cannot see is not kept (session.ready says so)
                    metrics.DROPPED.labels("jpeg_model_cannot_see").inc()
                return True
        except ProtocolError as exc:
            self.error(exc.code, exc.message)
            return True
        await self.intake.audio(frame)
        return True

    def _to_vad(self, pcm: bytes, ts_ms: float, tape_start: int) -> None:
        assert self.vad is not None  # media is refused before session.start, which opens the link
        self.vad.send(pcm, capture_ts_ms=ts_ms, tape_start=tape_start)
        self.hearing.feed(pcm)  # while an utterance is streamed to the asr service (text-only models)

    async def _drop_utterance(self, code: str, message: str) -> None:
        self.error(code, message)
        self.hearing.drop()
        if self.vad is not None:
            await self.vad.reset()

    def awaiting_first_audio(self) -> bool:
        """A turn is thinking (llm, first sentence's synthesis) and nobody is speaking: the CPU matters more than
        how soon new speech is noticed, since there is no answer playing to interrupt yet."""
        return (not self.intake.in_utterance and self.turn is not None and self.turn_task is not None
                and not self.turn_task.done() and self.turn.samples_sent == 0)

    # -- vad events ------------------------------------------------------------------------------------------
    async def _on_vad_event(self, ev: vad_pb2.VadEvent, origin: int) -> None:
        self._vad_failure_told = False
        if ev.kind == vad_pb2.VadEvent.SPEECH_STARTED:
            self.intake.speech_started(origin + ev.start_sample)
            if self._text_only_model():
                # The words will be the message: recognise them while the user speaks, pre-roll included.
                first = origin + ev.start_sample - self.gw.preroll_ms * 16
                self.hearing.begin(self.intake.tape.cut(first, self.intake.tape.end), f"{self.id}-{self.turns + 1}")
            self.send(event("speech.started", ts_ms=ev.start_ts_ms))
            resumed_at = self.intake.tape.received_at(origin + ev.start_sample) or time.monotonic()
            if (dropped := self.resumption.speech_started(self.turn, resumed_at)) is not None:
                if dropped:  # i36: the same utterance goes on; its unheard answer is withdrawn
                    if self.history_owner is self.turn:  # remembered already: the joined turn has its words
                        del self.history[-2:]
                        self.history_owner = None
                    self.send(event("turn.resumed", turn_id=dropped))
                return
            if self.turn is not None and self.turn_task is not None and not self.turn_task.done():
                self.turn.interrupt(self.turn.played_samples, "server_vad")
            elif (heard := barge_in.cut_point(self.turn, time.monotonic(), self._reported_playback())) is not None:
                self._cut_playing(heard)  # i36: barge-in over an answer synthesised but still playing
        elif ev.kind == vad_pb2.VadEvent.TURN_HELD:
            self.send(event("turn.hold", ts_ms=ev.start_ts_ms, max_silence_ms=self.cfg.vad.max_turn_silence_ms))
        elif ev.kind == vad_pb2.VadEvent.SPEECH_ENDED:
            utterance = self.intake.end_utterance(start=origin + ev.start_sample, end=origin + ev.end_sample,
                                                  start_ts_ms=float(ev.start_ts_ms), end_ts_ms=float(ev.end_ts_ms))
            self.send(event("speech.ended", ts_ms=ev.end_ts_ms))
            turn_id = self._turn_id()
            inp, first_words = self.resumption.joined(TurnInput(  # i36: with the part before it, if any
                turn_id=turn_id, source="speech", audio_wav=utterance.wav, audio_ms=utterance.audio_ms,
                images=utterance.images if self._model_sees() else [],
                image_ts=utterance.image_ts if self._model_sees() else [], t_input_end=utterance.received_at,
                endpoint_ms=(time.monotonic() - utterance.received_at) * 1000.0))
            streamed = self.hearing.finish(round(utterance.audio_ms * 16), (inp.audio_ms - utterance.audio_ms) / 1000)
            inp.words = SpokenWords(hearing=self.hearing, turn_id=turn_id, wav=inp.audio_wav, streamed=streamed,
                                    cascade=self._text_only_model(),
                                    model_name=self.model.get("llm", {}).get("name", ""), send=self.send)
            if inp.words.cascade:
                inp.words.prefix = first_words  # the streamed words are the last part's only
            await self.resumption.ended(inp)

    def _reported_playback(self) -> int:
        """What the client said it played of the current answer (`playback`); a hook for wires with no report."""
        return self.turn.played_samples if self.turn is not None else 0

    def _cut_playing(self, heard_samples: int) -> None:
        """Speech over a finished answer the client is still playing (by the playback estimate): the client is
        told to stop it (`turn.cut`), and the history keeps what was heard."""
        turn = self.turn
        assert turn is not None
        heard = self._cut_finished(turn, heard_samples, "server_vad_after_done")
        if heard is not None:
            self.send(event("turn.cut", turn_id=turn.inp.turn_id, played_samples=heard_samples,
                            sample_rate=turn.audio_rate, heard_text=heard))

    async def _on_vad_failure(self, reason: str) -> None:
        if self.intake.in_utterance:
            self.error("unavailable", f"the vad service failed mid-utterance ({reason}); the utterance was dropped")
        elif not self._vad_failure_told:
            # Audio goes on arriving, and each frame retries the stream: say it once, not per frame.
            self.error("unavailable", f"the vad service is unavailable ({reason}): speech is not heard "
                                      "until it is back; typed messages still work")
        self._vad_failure_told = True
        self.intake.abandon_utterance()
        self.hearing.drop()

    # -- turns -----------------------------------------------------------------------------------------------
    def _text_only_model(self) -> bool:
        """The llm takes no audio (say the offline SmolLM2): spoken turns go to it as their words (the cascade)."""
        return self.model.get("llm", {}).get("audio_input") is False

    def _model_sees(self) -> bool:
        """The llm takes images: camera keyframes go with spoken turns. A text-only model (the offline SmolLM2)
        would refuse the whole turn for them, so they are left out and the page is told once (session.ready)."""
        return self.model.get("llm", {}).get("image_input") is not False

    def _turn_id(self) -> str:
        self.turns += 1
        return f"{self.id}-{self.turns}"

    def _open(self, start: SessionStart) -> None:
        self.start = start
        v = self.cfg.vad
        settings = vad_pb2.VadSettings(threshold=v.threshold, min_speech_ms=v.min_speech_ms,
                                       min_silence_ms=v.min_silence_ms, speech_pad_ms=v.speech_pad_ms,
                                       turn_silence_ms=v.turn_silence_ms, max_turn_silence_ms=v.max_turn_silence_ms,
                                       silence_only=not v.semantic_turn, barge_in_threshold=v.barge_in_threshold,
                                       barge_in_min_speech_ms=v.barge_in_min_speech_ms)
        self.vad = VadLink(stub=self.vad_stub, settings=settings, sample_rate=start.sample_rate,
                           on_event=self._on_vad_event, on_failure=self._on_vad_failure,
                           connect_timeout_s=self.gw.request_timeout_ms / 1000.0, batch_ms=self.gw.vad_batch_ms,
                           batching=self.awaiting_first_audio, in_utterance=lambda: self.intake.in_utterance,
                           answer_playing=lambda: answer_playing(self.turn, time.monotonic()))
        limits = {"max_audio_frame_bytes": self.gw.max_audio_frame_bytes, "max_jpeg_bytes": self.gw.max_jpeg_bytes,
                  "max_image_pixels": self.gw.max_image_pixels, "max_messages_per_s": self.gw.max_messages_per_s,
                  "max_text_chars": self.gw.max_text_chars, "max_turn_audio_s": self.gw.max_turn_audio_s,
                  "jitter_ms": self.gw.jitter_ms, "request_timeout_ms": self.gw.request_timeout_ms}
        self.send(event("session.ready", session_id=self.id, protocol=1, sample_rate_in=start.sample_rate,
                        sample_rate_out=SAMPLE_RATE_OUT, voices=self.model.get("voices", []),
                        voice=start.voice or self.gw.voice or self.model.get("default_voice", ""),
                        model=self.model.get("llm", {}), limits=limits, health=dict(self.health),
                        turn={"semantic": v.semantic_turn, "silence_ms": v.turn_silence_ms,
                              "max_silence_ms": v.max_turn_silence_ms, "barge_in_threshold": v.barge_in_threshold,
                              "barge_in_min_speech_ms": v.barge_in_min_speech_ms,
                              "barge_in_level_db": v.barge_in_level_db}))
        _LOGGER.info("session_started", extra={"client_vad": start.client_vad, "camera": start.camera,
                                               "turn_hold": start.turn_hold})

    async def _begin_turn(self, inp: TurnInput) -> None:
        if self.turn_task is not None and not self.turn_task.done():
            assert self.turn is not None
            self.turn.interrupt(self.turn.played_samples, "new_turn")
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.turn_task), INTERRUPT_WAIT_S)
        history = self.history[-2 * self.gw.max_history_turns:] if self.gw.max_history_turns else []
        self.turn = Turn(inp=inp, settings=self._turn_settings(), history=list(history), llm=self.llm, tts=self.tts,
                         session_id=self.id, send=self.send)
        self._set_state(State.THINKING, inp.source)
        self.turn_task = asyncio.create_task(self._run_turn(self.turn), name=f"turn-{inp.turn_id}")

    def _turn_settings(self) -> TurnSettings:
        """What the next turn is asked with (a hook: the Realtime session's own settings override it)."""
        assert self.start is not None
        return TurnSettings(system_prompt=self.gw.system_prompt, voice=self.start.voice or self.gw.voice,
                            language=self.start.language, request_timeout_s=self.gw.request_timeout_ms / 1000.0,
                            deadline_s=self.gw.turn_deadline_ms / 1000.0, log_content=self.cfg.common.log_content)

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
        if not self.resumption.remembered(turn.inp.turn_id, result.user_text):
            return  # i36: dropped unheard, its utterance goes on in the next turn
        if result.outcome in (Outcome.BUSY, Outcome.ERROR):
            return
        # A spoken turn the model heard is recorded with its words and its audio's digest: the llm service matches
        # the digest to the conversation holding the audio (and reuses it), and rebuilds one from the words.
        self.history.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_USER, text=result.user_text,
                                            audio_sha256=result.audio_sha256))
        self.history.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_ASSISTANT, text=result.heard_text,
                                            interrupted=result.interrupted))
        self.history_owner = turn

    def on_health(self, service: str, status: str) -> None:
        """Changes before `session.ready` are not sent: a client expects `session.ready` first, and it carries the
        health as it stands then."""
        if self.start is None:
            return
        if service == "asr" and status == "SERVING":
            self.hearing.heard()
        if service == "vad" and status == "SERVING":
            self._vad_failure_told = False
        elif service == "vad" and self.vad is not None:
            self.vad.went_away()
        self.send(event("health", service=service, status=status))

    async def close(self) -> None:
        await self.resumption.close()
        if self.turn is not None:
            self.turn.interrupt(self.turn.played_samples, "session_closed")
        if self.turn_task is not None:
            self.turn_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.turn_task
        await self.intake.close()
        self.hearing.drop()
        if self.vad is not None:
            await self.vad.close()
        self.out.put_nowait(None)
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self.writer
