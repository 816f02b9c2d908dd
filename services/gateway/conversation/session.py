"""The conversation core: one session's turns, history, interrupts, vad events and admission, knowing no wire.

A wire's adapter (`wires/ws.py`, `wires/realtime.py`) reads its socket and calls the public methods here; what the
conversation says goes out as typed events (`events.py`) to the adapter's `Output`, from one writer task, so events
never interleave and an interrupted turn's queued audio can be dropped in one place. State changes go through
`_set_state`, which logs them. Incoming media is `MediaIntake`'s job, the message rate `RateLimiter`'s, the
history `History`'s, pauses within one utterance `Resumption`'s, speech over an answer still playing `barge_in`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from enum import Enum
from typing import Any, Protocol

import grpc

from services.common import config, logs
from services.gateway import metrics
from services.gateway.app import Catalogue
from services.gateway.conversation import barge_in, echo_cancel, events, utterance_join
from services.gateway.conversation.ducking import Ducking, attenuated
from services.gateway.conversation.history import History
from services.gateway.conversation.inputs import MediaFrame, Opening
from services.gateway.conversation.intake import SAMPLE_RATE_IN, MediaIntake, Utterance
from services.gateway.conversation.playback import answer_playing
from services.gateway.conversation.ready import session_ready
from services.gateway.conversation.rate_limit import RateLimiter
from services.gateway.conversation.resumption import Resumption
from services.gateway.conversation.settings import SessionSettings
from services.gateway.conversation.turn import Outcome, Turn, TurnInput, TurnSettings
from services.gateway.links.asr import Hearing, SpokenWords, Words
from services.gateway.links.vad import VadLink, turn_taking
from sotto.v1 import asr_pb2_grpc, llm_pb2_grpc, tts_pb2_grpc, vad_pb2, vad_pb2_grpc

_LOGGER = logging.getLogger(__name__)
INTERRUPT_WAIT_S = 2.0  # how long a new turn waits for the interrupted one to wind down


class Output(Protocol):
    """Where a session's events go: a wire's adapter, which serializes them (and its own items) for its client."""

    async def send(self, item: events.Event | Any) -> None: ...

    async def close(self, *, code: int = 1000, message: bytes = b"") -> None: ...


class State(Enum):
    LISTENING = "listening"
    THINKING = "thinking"
    SPEAKING = "speaking"


class Session:
    """One conversation: its turns (one at a time), its history, its vad stream and asr link, and what it says."""

    def __init__(self, *, output: Output, cfg: config.Settings, settings: SessionSettings,
                 channels: dict[str, grpc.aio.Channel], models: Catalogue, health: dict[str, str],
                 on_utterance: Callable[[TurnInput], Awaitable[None]] | None = None) -> None:
        """`on_utterance`: what a spoken utterance the vad ended becomes (default: a turn, answered at once)."""
        self.id = uuid.uuid4().hex[:12]
        self.output = echo_cancel.EchoTap(output, cfg.gateway, turn=lambda: self.turn, opening=lambda: self.start)
        self.cfg = cfg
        self.gw = cfg.gateway
        self.settings = settings  # the time limits, in seconds, for every collaborator
        self.models = models  # what the gateway knows of the models now (read at each use: it is replaced)
        self.health = health  # the gateway's live view, shared: session.ready reports it as it is then
        self.llm = llm_pb2_grpc.LlmServiceStub(channels["llm"])
        self.tts = tts_pb2_grpc.TtsServiceStub(channels["tts"])
        self.vad_stub = vad_pb2_grpc.VadServiceStub(channels["vad"])
        self.start: Opening | None = None
        self.state = State.LISTENING
        self.history = History(self.gw.max_history_turns)
        self.turn: Turn | None = None
        self.turn_task: asyncio.Task | None = None
        self.out: asyncio.Queue[tuple[events.Event | Any, Turn | None] | None] = asyncio.Queue()
        self.writer = asyncio.create_task(self._write(), name=f"session-{self.id}::write")
        self.intake = MediaIntake(gw=self.gw, settings=self.settings, name=f"session-{self.id}", to_vad=self._to_vad,
                                  drop_utterance=self._drop_utterance, echo=self.output.echo)
        self.vad: VadLink | None = None
        self.hearing = Hearing(stub=asr_pb2_grpc.AsrServiceStub(channels["asr"]), settings=self.settings,
                               max_audio_s=self.gw.max_turn_audio_s)
        self.turns = 0
        self._limiter = RateLimiter(per_second=self.gw.max_messages_per_s)
        self._vad_failure_told = False  # until the vad service answers again
        self._on_utterance = on_utterance or self.begin_turn
        # An utterance resumed before its answer was heard becomes one turn; unfinished words are held
        self.resumption = Resumption(begin=self._on_utterance, hold_s=cfg.vad.max_turn_silence_ms / 1000.0,
                                     word_turn_on=self.gw.word_turn, grace_s=self.settings.jitter_s)
        # Speech over a heard answer ducks it; a backchannel or a noise does not cut it
        self.ducking = Ducking(self.gw, send=self.send, on_cut=self._cut_heard,
                               announce=lambda ts_ms: self.send(events.SpeechStarted(ts_ms=ts_ms)))

    # -- sending ---------------------------------------------------------------------------------------------
    def send(self, item: events.Event | Any, turn: Turn | None = None) -> None:
        """Queue an event (or a wire's own item, which the wire alone understands) behind everything before it."""
        self.out.put_nowait((item, turn))

    def error(self, code: str, message: str, turn_id: str = "") -> None:
        metrics.ERRORS.labels(code).inc()
        self.send(events.Error(code=code, message=message, turn_id=turn_id))

    async def _write(self) -> None:
        while (entry := await self.out.get()) is not None:
            item, turn = entry
            audio = isinstance(item, events.AudioChunk)
            if turn is not None and turn.interrupted and audio:
                continue  # barge-in: audio of a cut turn is never sent
            if audio and (gain := self.ducking.gain(turn)) < 1.0:
                item = dataclasses.replace(item, pcm16=attenuated(item.pcm16, gain))
            try:
                await self.output.send(item)
            except (ConnectionResetError, RuntimeError):
                return
            # After the send: the first audio frame does not wait for a log line to be formatted and written.
            if turn is not None and self.turn is turn and audio and self.state != State.SPEAKING:
                self._set_state(State.SPEAKING, "first audio")

    def _set_state(self, new: State, reason: str) -> None:
        if new is not self.state:
            _LOGGER.info("session_state", extra={"from": self.state.value, "to": new.value, "reason": reason})
            self.state = new

    # -- input -----------------------------------------------------------------------------------------------
    def admit(self) -> bool:
        """The excess over the message rate is dropped, counted and reported (not every time)."""
        if self._limiter.admit():
            return True
        metrics.DROPPED.labels("rate_limited").inc()
        if self._limiter.warning_due():
            self.error("rate_limited", f"more than {self.gw.max_messages_per_s} messages per second; "
                                       "the excess is dropped")
        return False

    def pong(self) -> None:
        self.send(events.Pong())

    async def typed_turn(self, text: str) -> None:
        await self.begin_turn(TurnInput(turn_id=self.next_turn_id(), source="text", text=text,
                                        t_input_end=time.monotonic()))

    def playback(self, turn_id: str, played_samples: int) -> None:
        """The client's report of how much of a turn's audio it has played."""
        if self.turn is not None and turn_id in ("", self.turn.inp.turn_id):
            self.turn.report_playback(played_samples)

    def end_of_speech(self, ask_verdict: bool = False) -> None:
        """The client heard the end of speech (its own VAD, or a Realtime commit)."""
        if self.vad is not None:
            self.vad.end_of_speech(ask_verdict=ask_verdict)

    def interrupt(self, turn_id: str, played_samples: int) -> None:
        """The client cut an answer after `played_samples`: a running turn stops (and records what was heard); a
        finished one has its history entry cut to what was heard."""
        turn = self.turn
        if turn is None or turn_id not in ("", turn.inp.turn_id):
            return  # an interrupt for a turn this session no longer tracks
        turn.playback_reported = True
        if self.responding:
            turn.interrupt(played_samples, "client")
            return
        heard = turn.heard_after_done(played_samples)
        if heard is not None:
            self.history.cut(turn, heard, played_samples)

    def _heard_of_current(self) -> int | None:
        """What the client said it played of the current answer; None where it said nothing of it (`Opening`)."""
        turn, reports = self.turn, self.start is not None and self.start.reports_playback
        return turn.played_samples if turn is not None and turn.playback_reported and reports else None

    @property
    def in_utterance(self) -> bool:
        """The vad heard speech start and not yet its end."""
        return self.intake.in_utterance

    def take_turns_with(self, settings: vad_pb2.VadSettings) -> None:
        """How the vad detects turns from the next stream on (a wire's own turn detection, from `turn_taking`)."""
        if self.vad is not None:
            self.vad.settings = settings

    async def drop_speech(self) -> None:
        """Forget the utterance in progress and the vad's state for it (the client cleared its input, or changed
        how turns are detected): the next audio opens a fresh vad stream with the link's settings then."""
        self.intake.abandon_utterance()
        self.hearing.drop()
        if self.vad is not None:
            await self.vad.reset()

    def camera(self, frame: MediaFrame) -> None:
        """A camera frame for the next utterance's keyframes (raises InputError for one that does not decode). A
        model that cannot see (session.ready's `image_input`) would refuse the whole turn for it: it is not kept."""
        if self.models.current.sees:
            self.intake.camera(frame)
        else:
            metrics.DROPPED.labels("jpeg_model_cannot_see").inc()

    async def audio(self, frame: MediaFrame) -> None:
        await self.intake.audio(frame)

    def _to_vad(self, pcm: bytes, ts_ms: float, tape_start: int) -> None:
        assert self.vad is not None  # media is refused before session.start, which opens the link
        self.vad.send(pcm, capture_ts_ms=ts_ms, tape_start=tape_start)
        self.hearing.feed(pcm)  # while an utterance is streamed to the asr service (text-only models, ducking)
        self.ducking.audio(pcm)

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
            start = origin + ev.start_sample
            self.intake.speech_started(start)
            heard = self._heard_of_current()
            resumed = self.resumption.speech_started(self.turn, utterance_join.received_at(
                self.intake.tape.received_at(start), self.turn), heard)
            ducked = self.turn if resumed is None and self.ducking.enabled and barge_in.heard_now(
                self.turn, self.responding, time.monotonic(), self._heard_of_current() or 0) else None
            if self._text_only_model() or ducked is not None:
                # The words will be the message, or judge the speech: recognise them while it is spoken.
                first = start - round(self.settings.preroll_s * SAMPLE_RATE_IN)
                self.hearing.begin(self.intake.tape.cut(first, self.intake.tape.end), f"{self.id}-{self.turns + 1}",
                                   on_stable=self.ducking.stable if ducked is not None else None)
            if ducked is not None:  # announced (SpeechStarted) only if it cuts the answer
                self.ducking.begin(ducked, float(ev.start_ts_ms), self.intake.tape.cut(start, self.intake.tape.end))
                return
            self.send(events.SpeechStarted(ts_ms=ev.start_ts_ms))
            if resumed is not None:
                if resumed:  # the same utterance goes on: its unheard answer is withdrawn
                    self.history.withdraw(self.turn)  # if remembered already: the joined turn has its words
                    self.send(events.TurnResumed(turn_id=resumed))
                return
            if self.turn is not None:
                self._cut_heard(self.turn)
        elif ev.kind == vad_pb2.VadEvent.TURN_HELD:
            held = self.vad.settings.max_turn_silence_ms if self.vad is not None else 0
            self.send(events.TurnHeld(ts_ms=ev.start_ts_ms, max_silence_ms=held or self.cfg.vad.max_turn_silence_ms))
        elif ev.kind == vad_pb2.VadEvent.SPEECH_ENDED:
            utterance = self.intake.end_utterance(start=origin + ev.start_sample, end=origin + ev.end_sample,
                                                  start_ts_ms=float(ev.start_ts_ms), end_ts_ms=float(ev.end_ts_ms))
            samples = round(utterance.audio_ms * SAMPLE_RATE_IN / 1000)
            if (judged := self.ducking.speech_ended()) is not None:  # a verdict on the words first
                turn = functools.partial(self._spoken, utterance, samples, ev.end_ts_ms)
                self.ducking.judge(judged, self.hearing.finish(samples), turn)
                return
            await self._spoken(utterance, samples, ev.end_ts_ms)

    def _cut_heard(self, turn: Turn) -> None:
        """Speech cuts `turn`'s answer: a running turn is interrupted. Over a finished answer the client is still
        playing (by the playback estimate), the client is told to stop it (`TurnCut`); the history keeps what was
        heard."""
        if turn is not self.turn:
            return
        if self.responding:
            turn.interrupt(turn.played_samples, "server_vad")
        elif (at := barge_in.cut_point(turn, time.monotonic(), self._heard_of_current() or 0)) is not None:
            heard = turn.heard_after_done(at)
            if heard is not None and self.history.cut(turn, heard, at, "server_vad_after_done"):
                self.send(events.TurnCut(turn_id=turn.inp.turn_id, played_samples=at, sample_rate=turn.audio_rate,
                                         heard_text=heard))

    async def _spoken(self, utterance: Utterance, samples: int, end_ts: float, streamed: Words | None = None) -> None:
        """An utterance the vad ended becomes a turn (with the part before it, if any); `streamed`: its words,
        already taken from the asr stream."""
        self.send(events.SpeechEnded(ts_ms=end_ts))
        turn_id, sees = self.next_turn_id(), self.models.current.sees
        inp, first_words = self.resumption.joined(TurnInput(  # with the part before it, if any
            turn_id=turn_id, source="speech", audio_wav=utterance.wav, audio_ms=utterance.audio_ms,
            images=utterance.images if sees else [], image_ts=utterance.image_ts if sees else [],
            t_input_end=utterance.received_at, endpoint_ms=(time.monotonic() - utterance.received_at) * 1000.0))
        if streamed is None:
            streamed = self.hearing.finish(samples, (inp.audio_ms - utterance.audio_ms) / 1000)
        inp.words = SpokenWords(hearing=self.hearing, turn_id=turn_id, wav=inp.audio_wav, streamed=streamed,
                                cascade=self._text_only_model(), model_name=self.models.current.llm_name,
                                send=self.send)
        if inp.words.cascade:
            inp.words.prefix = first_words  # the streamed words are the last part's only
        await self.resumption.ended(inp)

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
        return self.models.current.text_only

    def next_turn_id(self) -> str:
        self.turns += 1
        return f"{self.id}-{self.turns}"

    def open(self, start: Opening) -> None:
        self.start = start
        self.vad = VadLink(stub=self.vad_stub, settings=turn_taking(self.cfg.vad), sample_rate=start.sample_rate,
                           on_event=self._on_vad_event, on_failure=self._on_vad_failure,
                           connect_timeout_s=self.settings.request_timeout_s, batch_ms=self.gw.vad_batch_ms,
                           batching=self.awaiting_first_audio, in_utterance=lambda: self.intake.in_utterance,
                           answer_playing=lambda: answer_playing(self.turn, time.monotonic()))
        self.send(session_ready(self.id, start, self.cfg, self.models.current, self.health))
        _LOGGER.info("session_started", extra={"client_vad": start.client_vad, "camera": start.camera,
                                               "turn_hold": start.turn_hold})

    @property
    def responding(self) -> bool:
        return self.turn_task is not None and not self.turn_task.done()

    async def begin_turn(self, inp: TurnInput, settings: TurnSettings | None = None) -> None:
        """Answer `inp` (with the session's own turn settings unless given), cutting a turn still running."""
        if self.responding:
            assert self.turn is not None
            self.turn.interrupt(self.turn.played_samples, "new_turn")
            with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(self.turn_task), INTERRUPT_WAIT_S)
        self.turn = Turn(inp=inp, settings=settings or self.turn_settings(), history=self.history.window(),
                         llm=self.llm, tts=self.tts,
                         session_id=self.id, send=self.send)
        self._set_state(State.THINKING, inp.source)
        self.turn_task = asyncio.create_task(self._run_turn(self.turn), name=f"turn-{inp.turn_id}")

    def turn_settings(self) -> TurnSettings:
        """What a turn is asked with, from the gateway's settings and session.start (a wire may adjust them)."""
        assert self.start is not None
        return TurnSettings(system_prompt=self.gw.system_prompt, voice=self.start.voice or self.gw.voice,
                            language=self.start.language, answer_wait_s=self.settings.answer_wait_s,
                            deadline_s=self.settings.turn_deadline_s, log_content=self.cfg.common.log_content)

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
            return  # dropped unheard: its utterance goes on in the next turn
        if result.outcome in (Outcome.BUSY, Outcome.ERROR):
            return
        # A spoken turn the model heard is recorded with its words and its audio's digest: the llm service matches
        # the digest to the conversation holding the audio (and reuses it), and rebuilds one from the words.
        self.history.record(turn, user_text=result.user_text, audio_sha256=result.audio_sha256,
                            answer=result.heard_text, interrupted=result.interrupted)

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
        self.send(events.Health(service=service, status=status))

    async def close(self) -> None:
        await self.resumption.close()
        await self.ducking.close()
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
