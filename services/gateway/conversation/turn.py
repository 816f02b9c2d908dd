"""One reply: llm tokens streamed into tts as they come, text and audio forwarded as soon as they exist.

A `Turn` is a handle like LiveKit's SpeechHandle: `interrupt()` is idempotent, cancels both gRPC calls explicitly
(never just abandons them) and makes the writer drop any audio of this turn still queued. When the turn ends it
knows what the user actually heard, which is what the history keeps.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from enum import Enum

import grpc

from services.common import logs
from services.gateway import metrics
from services.gateway.links.asr import SpokenWords, Unheard
from services.gateway.conversation import events
from sotto.v1 import common_pb2, llm_pb2, llm_pb2_grpc, tts_pb2, tts_pb2_grpc

_LOGGER = logging.getLogger(__name__)

Send = Callable[[events.Event, "Turn | None"], None]


@dataclass(kw_only=True)
class TurnInput:
    turn_id: str
    source: str                   # "speech" or "text"
    t_input_end: float            # monotonic: end of speech received, or text received
    text: str = ""                # typed text ("" for speech)
    audio_wav: bytes = b""        # empty for typed turns
    audio_ms: float = 0.0
    images: list[bytes] = field(default_factory=list)
    image_ts: list[float] = field(default_factory=list)
    endpoint_ms: float | None = None
    words: SpokenWords | None = None  # a spoken turn's words (services.gateway.links.asr)


@dataclass(kw_only=True)
class TurnSettings:
    system_prompt: str
    voice: str
    language: str
    answer_wait_s: float  # the llm's first text, then (the reply written) the first audio
    deadline_s: float
    log_content: bool = False     # SOTTO_LOG_CONTENT: the typed text and the answer may appear in the logs
    max_new_tokens: int | None = None  # None: the llm service's default reply length


@dataclass
class _Sentence:
    text: str
    first_sample: int
    end_sample: int


class Outcome(Enum):
    """How a turn ended; the value is the `finish_reason` of `turn.done` and the metrics' `outcome` label."""

    STOP = "stop"
    LENGTH = "length"
    CANCELLED = "cancelled"
    DEGRADED = "degraded"
    INTERRUPTED = "interrupted"
    BUSY = "busy"
    ERROR = "error"


# The llm's own finish reasons; one it leaves unset counts as a plain stop.
_LLM_FINISH = {llm_pb2.STOP: Outcome.STOP, llm_pb2.LENGTH: Outcome.LENGTH, llm_pb2.CANCELLED: Outcome.CANCELLED,
               llm_pb2.DEGRADED: Outcome.DEGRADED}


@dataclass(kw_only=True)
class TurnResult:
    outcome: Outcome
    text: str = ""
    heard_text: str = ""
    interrupted: bool = False
    user_text: str = ""           # typed text, or a spoken turn's words ("" when none came)
    audio_sha256: bytes = b""     # a spoken turn whose audio the model heard: that audio's digest
    timings: dict[str, float] = field(default_factory=dict)


class StageTimeout(Exception):
    def __init__(self, stage: str) -> None:
        super().__init__(stage)
        self.stage = stage


class Turn:
    def __init__(self, *, inp: TurnInput, settings: TurnSettings, history: list[common_pb2.Turn],
                 llm: llm_pb2_grpc.LlmServiceStub, tts: tts_pb2_grpc.TtsServiceStub, session_id: str,
                 send: Send) -> None:
        self.inp = inp
        self.settings = settings
        self.history = history
        self.llm = llm
        self.tts = tts
        self.session_id = session_id
        self.send = send
        self.interrupted = False
        self.played_samples = 0
        self.playback_reported = False  # the client said what it played of this answer (a report, its interrupt)
        self._calls: dict[str, grpc.aio.Call] = {}
        self._tts_queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._tts_text_ended = False
        self._text = ""
        self._fed: list[tuple[int, float]] = []  # (chars fed to tts so far, when)
        self._sentences: dict[int, _Sentence] = {}
        self._samples_sent = 0
        self._chunks_sent = 0
        self.first_audio_at: float | None = None  # monotonic, when the first audio chunk was queued
        self.audio_rate = 24000  # of the audio sent, from the first chunk
        self._llm_finished = asyncio.Event()
        self._timings: dict[str, float] = {}
        self._finish = Outcome.STOP
        self._done = asyncio.Event()
        self._user_text = inp.text

    # -- control ---------------------------------------------------------------------------------------------
    def interrupt(self, played_samples: int, trigger: str) -> None:
        """Stop the reply now: cancel both calls; queued audio of this turn is dropped by the writer."""
        if self.interrupted or self._done.is_set():
            return
        self.interrupted = True
        self.played_samples = played_samples
        metrics.INTERRUPTIONS.labels(trigger).inc()
        self._cancel_calls()
        _LOGGER.info("turn_interrupted", extra={"trigger": trigger, "played_samples": played_samples})

    def report_playback(self, played_samples: int) -> None:
        self.playback_reported = True
        self.played_samples = max(self.played_samples, played_samples)

    def _cancel_calls(self) -> None:
        for name, call in self._calls.items():
            if not call.done():
                call.cancel()
                metrics.CANCELLED_CALLS.labels(name).inc()

    # -- the pipeline ----------------------------------------------------------------------------------------
    async def run(self) -> TurnResult:
        t0 = time.monotonic()
        inp = self.inp
        self.send(events.TurnStarted(turn_id=inp.turn_id, source=inp.source, audio_ms=round(inp.audio_ms),
                                     images=len(inp.images)), None)
        _LOGGER.info("turn_started", extra={"source": inp.source, "audio_ms": round(inp.audio_ms),
                                            "images": len(inp.images),
                                            **logs.content(self.settings.log_content, text=inp.text)})
        metadata = (*logs.grpc_metadata(),)
        outcome, error = Outcome.STOP, None
        words = inp.words
        try:
            if words is not None and words.cascade:
                self._user_text = await words.message()  # a text-only model: the words are the message
            # The llm's request first: its prefill is on the way to the first audio, the tts stream's set-up is not.
            self._calls["llm"] = self.llm.Generate(self._llm_request(), timeout=self.settings.deadline_s,
                                                   metadata=metadata)
            self._calls["tts"] = self.tts.SynthesizeStream(self._tts_requests(), timeout=self.settings.deadline_s,
                                                           metadata=metadata)
            results = await asyncio.gather(self._pump_llm(t0), self._pump_tts(t0), return_exceptions=True)
            for res in results:
                if isinstance(res, BaseException) and not isinstance(res, asyncio.CancelledError):
                    raise res
            outcome = Outcome.INTERRUPTED if self.interrupted else self._finish
        except StageTimeout as exc:
            outcome, error = Outcome.ERROR, ("timeout", f"the {exc.stage} service did not answer within "
                                                  f"{self.settings.answer_wait_s * 1000:.0f} ms")
        except Unheard as exc:
            outcome, error = Outcome.ERROR, (exc.code, exc.message)
        except grpc.aio.AioRpcError as exc:
            if self.interrupted and exc.code() == grpc.StatusCode.CANCELLED:
                outcome = Outcome.INTERRUPTED
            elif exc.code() == grpc.StatusCode.RESOURCE_EXHAUSTED:
                outcome = Outcome.BUSY
            else:
                outcome, error = Outcome.ERROR, _error_of(exc)
        finally:
            self._cancel_calls()
            self._done.set()
        if outcome is Outcome.BUSY:
            metrics.BUSY.inc()
            self.send(events.Busy(turn_id=inp.turn_id, message="the model is busy with other requests; "
                            "try again in a moment"), None)
        if error is not None:
            metrics.ERRORS.labels(error[0]).inc()
            self.send(events.Error(code=error[0], message=error[1], turn_id=inp.turn_id), None)
        if self._samples_sent:
            self.send(events.AudioDone(turn_id=inp.turn_id, samples=self._samples_sent), None)
        heard = self.heard_text() if self.interrupted else self._text
        if words is not None and outcome not in (Outcome.BUSY, Outcome.ERROR):
            # For the history. The reply is out, so waiting costs it nothing; a reply cut before its first audio
            # does not start a recognition the next turn would wait for.
            self._user_text = await words.settle(start=not self.interrupted)
        elif words is not None:
            words.cancel()
        if words is not None and words.recognition_ms is not None:
            self._timings["asr_ms"] = words.recognition_ms
        self._timings["total_ms"] = _ms(time.monotonic() - t0)
        result = TurnResult(outcome=outcome, text=self._text, heard_text=heard, interrupted=self.interrupted,
                            user_text=self._user_text, audio_sha256=self._audio_sha256(),
                            timings=dict(self._timings))
        self.send(events.TurnDone(turn_id=inp.turn_id, text=self._text, heard_text=heard,
                                  interrupted=self.interrupted, finish_reason=outcome.value,
                                  timings=result.timings), None)
        self._observe(result)
        return result

    def _heard_audio(self) -> bytes:
        """The WAV the llm hears: none for typed turns and for the cascade, whose message is the words."""
        return b"" if self.inp.words is not None and self.inp.words.cascade else self.inp.audio_wav

    def _audio_sha256(self) -> bytes:
        audio = self._heard_audio()
        return hashlib.sha256(audio).digest() if audio else b""

    def _llm_request(self) -> llm_pb2.GenerateRequest:
        images = [llm_pb2.Image(data=d, mime_type="image/jpeg", capture_ts_ms=int(ts))
                  for d, ts in zip(self.inp.images, self.inp.image_ts)]
        return llm_pb2.GenerateRequest(
            session_id=self.session_id, turn_id=self.inp.turn_id, system_prompt=self.settings.system_prompt,
            history=self.history, user=llm_pb2.UserContent(audio_wav=self._heard_audio(), images=images,
                                                           text=self._user_text),
            sampling=llm_pb2.Sampling(max_new_tokens=self.settings.max_new_tokens))

    async def _tts_requests(self) -> AsyncIterator[tts_pb2.SynthesizeStreamRequest]:
        yield tts_pb2.SynthesizeStreamRequest(
            config=tts_pb2.VoiceConfig(voice=self.settings.voice, language=self.settings.language),
            turn_id=self.inp.turn_id)
        while (piece := await self._tts_queue.get()) is not None:
            yield tts_pb2.SynthesizeStreamRequest(text=piece, turn_id=self.inp.turn_id)

    async def _first(self, call: grpc.aio.Call, stage: str, timeout: float | None) -> object:
        try:
            async with asyncio.timeout(timeout):  # not wait_for: in 3.11 it can swallow an interrupt's cancel
                return await call.read()
        except TimeoutError:
            raise StageTimeout(stage) from None

    async def _pump_llm(self, t0: float) -> None:
        call = self._calls["llm"]
        try:
            message = await self._first(call, "llm", self.settings.answer_wait_s)
            while message is not grpc.aio.EOF and not self.interrupted:
                if message.HasField("done"):
                    done = message.done
                    self._finish = _LLM_FINISH.get(done.finish_reason, Outcome.STOP)
                    self._timings["llm_queue_ms"] = round(done.timings.queue_wait_ms, 1)
                    self._timings["llm_prefill_tokens"] = done.timings.prefill_tokens
                    self._timings["llm_decode_tokens"] = done.timings.decode_tokens
                    if done.timings.time_to_first_token_ms:
                        # The engine's own prefill inside the llm service: first_token_ms minus this and the
                        # queue wait is what the hops to the llm and back cost this turn.
                        self._timings["llm_engine_first_token_ms"] = round(done.timings.time_to_first_token_ms, 1)
                    # The reply is complete: its last sentence can be spoken now, not after the call's status.
                    self._end_tts_text()
                elif message.text_delta:
                    if "first_token_ms" not in self._timings:
                        self._timings["first_token_ms"] = _ms(time.monotonic() - t0)
                    self._text += message.text_delta
                    self._fed.append((len(self._text), time.monotonic()))
                    self._tts_queue.put_nowait(message.text_delta)
                    self.send(events.TextDelta(turn_id=self.inp.turn_id, text=message.text_delta), self)
                message = await call.read()
        finally:
            self._llm_finished.set()
            self._end_tts_text()

    def _end_tts_text(self) -> None:
        if not self._tts_text_ended:
            self._tts_text_ended = True
            self._tts_queue.put_nowait(None)

    async def _pump_tts(self, t0: float) -> None:
        """Forward audio chunks. One read is kept pending (cancelling a grpc.aio read would cancel the call)."""
        call = self._calls["tts"]
        read = asyncio.ensure_future(call.read())
        llm_done = asyncio.ensure_future(self._llm_finished.wait())
        try:
            while not self.interrupted:
                stalled_after = None
                if llm_done.done() and not self._samples_sent:
                    stalled_after = self.settings.answer_wait_s  # the llm is done: speech must start soon
                waiting = {read} if llm_done.done() else {read, llm_done}
                done, _ = await asyncio.wait(waiting, timeout=stalled_after, return_when=asyncio.FIRST_COMPLETED)
                if not done:
                    if not self._text.strip():
                        return  # nothing was said, so nothing will be spoken
                    raise StageTimeout("tts")
                if read not in done:
                    continue
                chunk = read.result()
                if chunk is grpc.aio.EOF:
                    return
                self._on_audio(chunk, t0)
                read = asyncio.ensure_future(call.read())
        finally:
            llm_done.cancel()
            if not read.done():
                read.cancel()

    def _on_audio(self, chunk: tts_pb2.AudioOut, t0: float) -> None:
        now = time.monotonic()
        if not self._samples_sent:
            self.first_audio_at, self.audio_rate = now, chunk.sample_rate or self.audio_rate
            self._timings["first_audio_ms"] = _ms(now - t0)
            self._timings["ttfa_ms"] = _ms(now - self.inp.t_input_end)
            if self.inp.endpoint_ms is not None:
                self._timings["endpoint_ms"] = round(self.inp.endpoint_ms, 1)
            fed_at = next((t for chars, t in self._fed if chars >= chunk.text_end), None)
            if fed_at is not None:
                self._timings["tts_first_chunk_ms"] = _ms(now - fed_at)
            self.send(events.AudioStarted(turn_id=self.inp.turn_id, sample_rate=chunk.sample_rate), self)
        samples = len(chunk.pcm16) // 2
        sentence = self._sentences.setdefault(
            chunk.sentence_index, _Sentence(chunk.sentence_text, chunk.sample_offset, chunk.sample_offset))
        sentence.end_sample = chunk.sample_offset + samples
        self.send(events.AudioChunk(turn_id=self.inp.turn_id, sequence=self._chunks_sent,
                                    sample_offset=chunk.sample_offset, pcm16=chunk.pcm16), self)
        if not self._chunks_sent and self.inp.words is not None:
            self.inp.words.reply_started()  # the first audio is queued: now the words may take the CPU
        self._chunks_sent += 1
        self._samples_sent += samples

    @property
    def samples_sent(self) -> int:
        return self._samples_sent

    @property
    def finished(self) -> bool:
        return self._done.is_set()

    def heard_after_done(self, played_samples: int) -> str | None:
        """A barge-in that arrives after `turn.done` (synthesis runs faster than playback): the text heard up to
        `played_samples`, or None when everything sent was heard."""
        if not self._done.is_set() or played_samples >= self._samples_sent:
            return None
        self.played_samples = played_samples
        return self.heard_text()

    def heard_text(self) -> str:
        """The sentences the user heard in full, plus the heard share of the one cut off (by words)."""
        heard: list[str] = []
        for index in sorted(self._sentences):
            s = self._sentences[index]
            if s.end_sample <= self.played_samples:
                heard.append(s.text.strip())
            elif s.first_sample < self.played_samples:
                words = s.text.split()
                share = (self.played_samples - s.first_sample) / max(1, s.end_sample - s.first_sample)
                heard.append(" ".join(words[: int(len(words) * share)]))
                break
            else:
                break
        return " ".join(w for w in heard if w).strip()

    def _observe(self, result: TurnResult) -> None:
        metrics.TURNS.labels(self.inp.source, result.outcome.value).inc()
        t = result.timings
        if "ttfa_ms" in t:
            metrics.TTFA.labels(self.inp.source).observe(t["ttfa_ms"] / 1000)
        for stage in ("endpoint_ms", "asr_ms", "llm_queue_ms", "first_token_ms", "tts_first_chunk_ms",
                      "first_audio_ms"):
            if stage in t:
                metrics.STAGE.labels(stage[:-3]).observe(t[stage] / 1000)
        metrics.TURN_SECONDS.observe(t["total_ms"] / 1000)
        _LOGGER.info("turn_done", extra={"outcome": result.outcome.value, "source": self.inp.source,
                                         "reply_chars": len(result.text), "heard_chars": len(result.heard_text),
                                         **t, **logs.content(self.settings.log_content, reply=result.text,
                                                             heard_text=result.heard_text)})


def _ms(seconds: float) -> float:
    return round(seconds * 1000.0, 1)


# What grpc.aio reports, in place of the call's real status, when a write to a request stream fails because the
# peer went away (grpc/grpc#36066): a killed tts mid-reply surfaces as INTERNAL with exactly these details.
_AIO_WRITE_FAILED = "Internal error from Core"


def _error_of(exc: grpc.aio.AioRpcError) -> tuple[str, str]:
    code = exc.code()
    if code == grpc.StatusCode.INTERNAL and exc.details() == _AIO_WRITE_FAILED:
        return "unavailable", "a model service is unavailable (its stream broke while the gateway was writing to it)"
    if code == grpc.StatusCode.DEADLINE_EXCEEDED:
        return "timeout", f"a model service missed its deadline ({exc.details()})"
    if code == grpc.StatusCode.INVALID_ARGUMENT:
        return "invalid", exc.details() or "the request was refused as invalid"
    if code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNIMPLEMENTED):
        return "unavailable", f"a model service is unavailable ({exc.details()})"
    return "internal", f"{code.name}: {exc.details()}"

