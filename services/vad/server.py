"""The vad gRPC service (sotto.v1.VadService): streaming speech start / end per audio source.

The servicer only translates between protobuf and ``services.vad.engine``: the first message
carries the settings, every message may carry audio, the client's end of speech (which closes an
open segment at once, or asks the turn model's verdict) and whether an answer is playing (the
barge-in gate), and each engine event becomes a ``VadEvent``. Small chunks are endpointed on the
event loop, large ones and every turn-model verdict on the single inference thread (see
``_INLINE_WINDOWS``). The turn model judges a pause from its first silent window, on that thread, while
the stream goes on reading audio: by the turn silence its verdict is usually there, so the model's own
time is no longer added to every turn's end. A stream that ends, fails or is cancelled frees its state at
once.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor

import grpc

from services.common import config, grpc_server, logs
from services.vad.engine import (
    EndReason,
    SileroVad,
    SpeechEvent,
    SpeechEventKind,
    TurnGuess,
    VadSettings,
    VadStream,
)
from services.vad.loading import default_settings, load_model, load_turn_model
from services.vad.metrics import (
    ACTIVE_STREAMS,
    BARGE_INS_SUPPRESSED,
    ENDPOINT_DECISION,
    TURN_GUESSES,
    TURN_VERDICTS,
)
from services.vad.smart_turn import COMPLETE_ABOVE, SmartTurn
from sotto.v1 import vad_pb2, vad_pb2_grpc

_LOGGER = logging.getLogger(__name__)
# A chunk needing at most this many windows runs on the event loop: for a short chunk the hop to the
# inference thread costs more CPU than the windows themselves (see docs/performance.md). Longer chunks go
# to the inference thread, so a 1 s chunk never stalls the other streams.
_INLINE_WINDOWS = 2

_EVENT_KINDS = {
    SpeechEventKind.STARTED: vad_pb2.VadEvent.SPEECH_STARTED,
    SpeechEventKind.ENDED: vad_pb2.VadEvent.SPEECH_ENDED,
    SpeechEventKind.PROBABILITY: vad_pb2.VadEvent.PROBABILITY,
    SpeechEventKind.HELD: vad_pb2.VadEvent.TURN_HELD,
}


class InvalidStream(ValueError):
    """The client's stream breaks the contract; the message says how."""


def settings_from_proto(message: vad_pb2.VadSettings, defaults: VadSettings) -> VadSettings:
    """Proto settings (0 = server default) -> validated engine settings; ValueError if out of range. The early turn
    silence is the server's, kept within what the client's turn silence and padding allow."""
    speech_pad_ms = message.speech_pad_ms or defaults.speech_pad_ms
    turn_silence_ms = message.turn_silence_ms or defaults.turn_silence_ms
    return VadSettings(
        threshold=message.threshold or defaults.threshold,
        min_speech_ms=message.min_speech_ms or defaults.min_speech_ms,
        min_silence_ms=message.min_silence_ms or defaults.min_silence_ms,
        speech_pad_ms=speech_pad_ms,
        semantic=defaults.semantic and not message.silence_only,
        turn_silence_ms=turn_silence_ms,
        early_turn_silence_ms=min(turn_silence_ms, max(defaults.early_turn_silence_ms, 2 * speech_pad_ms)),
        max_turn_silence_ms=message.max_turn_silence_ms or defaults.max_turn_silence_ms,
        barge_in_threshold=message.barge_in_threshold or defaults.barge_in_threshold,
        barge_in_min_speech_ms=message.barge_in_min_speech_ms or defaults.barge_in_min_speech_ms,
        barge_in_level_db=defaults.barge_in_level_db,  # the service's own: the user's level is learned here
    )


def event_to_proto(event: SpeechEvent) -> vad_pb2.VadEvent:
    return vad_pb2.VadEvent(
        kind=_EVENT_KINDS[event.kind],
        start_sample=event.start_sample,
        end_sample=event.end_sample or 0,
        start_ts_ms=round(event.start_ms),
        end_ts_ms=round(event.end_ms) if event.end_ms is not None else 0,
        probability=event.probability or 0.0,
        processed_samples=event.processed_samples,
        turn_probability=event.turn_probability or 0.0,
    )


def observe(event: SpeechEvent) -> None:
    """The endpointing metrics of one event."""
    if event.kind is SpeechEventKind.SUPPRESSED:
        BARGE_INS_SUPPRESSED.inc()
    elif event.kind is SpeechEventKind.HELD and event.turn_probability is not None:
        TURN_VERDICTS.labels("incomplete").inc()
    elif event.kind is SpeechEventKind.ENDED and event.reason is not None:
        if event.reason in (EndReason.COMPLETE, EndReason.TIMEOUT):
            TURN_VERDICTS.labels(event.reason.value).inc()
        if event.decision_ms is not None and event.reason is not EndReason.STREAM_END:
            ENDPOINT_DECISION.labels(event.reason.value).observe(event.decision_ms / 1000)


class VadServicer(vad_pb2_grpc.VadServiceServicer):
    """Holds the shared model, the default settings and the count of open streams."""

    def __init__(self, defaults: VadSettings, max_streams: int, executor: ThreadPoolExecutor,
                 model: SileroVad | None = None, turn_model: SmartTurn | None = None):
        self.model = model  # set by the service's load step; no call reaches the servicer before
        self.turn_model = turn_model  # likewise; None: turns end on silence alone
        self.defaults = defaults
        self.max_streams = max_streams
        self.active_streams = 0
        self._executor = executor

    async def StreamAudio(
        self, request_iterator: AsyncIterator[vad_pb2.VadRequest], context: grpc.aio.ServicerContext
    ) -> AsyncIterator[vad_pb2.VadEvent]:
        if self.active_streams >= self.max_streams:
            details = f"busy: {self.max_streams} audio streams already open (SOTTO_VAD_MAX_STREAMS)"
            _LOGGER.info("stream_refused", extra={"reason": details})
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, details)
        self.active_streams += 1
        ACTIVE_STREAMS.inc()
        stream: VadStream | None = None
        guess: asyncio.Future | None = None  # the turn model judging the current pause, on the inference thread
        try:
            settings, emit_probabilities, requests = await _read_settings(request_iterator, self.defaults)
            # Headers now, not with a first event that may be minutes away: the client's sign that the stream
            # is accepted and heard (the gateway gives up a stream not accepted within its request timeout).
            await context.send_initial_metadata(())
            last_sequence, playing = -1, False
            async for request in requests:
                events: list[SpeechEvent] = []
                playing = request.answer_playing if request.HasField("answer_playing") else playing
                if request.HasField("audio") and stream is None:
                    stream = self._open(request.audio.sample_rate, settings, emit_probabilities)
                if stream is not None:
                    events += stream.set_answer_playing(playing)
                if request.HasField("audio"):
                    chunk = request.audio
                    _check_chunk(chunk, stream, last_sequence)
                    last_sequence = chunk.sequence
                    # 0 means "not given": the chunk continues the stream's capture clock.
                    if stream.windows_after(len(chunk.pcm16)) <= _INLINE_WINDOWS:
                        events += stream.push(chunk.pcm16, chunk.capture_ts_ms or None)
                    else:
                        events += await self._run(stream.push, chunk.pcm16, chunk.capture_ts_ms or None)
                if request.end_of_speech and stream is not None:
                    events += stream.ask_verdict() if request.ask_verdict else stream.flush()
                if guess is not None and (guess.done() or stream.awaiting_guess):
                    events += _settle(stream, *await guess)
                    guess = None
                if stream is not None and stream.guess_due:
                    guess = asyncio.ensure_future(self._run(_judge, stream, stream.take_guess()))
                if stream is not None and stream.verdict_due:
                    events += await self._run(stream.decide)
                for event in events:
                    observe(event)
                    if event.kind in _EVENT_KINDS:
                        yield event_to_proto(event)
            if stream is None:
                raise InvalidStream("empty stream: send settings in the first message, then audio chunks")
            for event in stream.flush():
                yield event_to_proto(event)
        except (InvalidStream, ValueError) as exc:
            _LOGGER.info("stream_rejected", extra={"reason": str(exc)})
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            if guess is not None:
                guess.cancel()
            self.active_streams -= 1
            ACTIVE_STREAMS.dec()
            if stream is not None:
                # Queued behind any window still running on the inference thread, never racing it.
                self._executor.submit(stream.close)

    def _open(self, sample_rate: int, settings: VadSettings, emit_probabilities: bool) -> VadStream:
        assert self.model is not None
        return self.model.open_stream(sample_rate, settings, emit_probabilities, self.turn_model)

    async def _run(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)


def _judge(stream: VadStream, guess: TurnGuess) -> tuple[TurnGuess, float, float]:
    """A guess's probability and the model's time in ms, for ``VadStream.settle``; runs on the inference thread."""
    began = time.perf_counter()
    probability = stream.judge(guess)
    return guess, probability, (time.perf_counter() - began) * 1000


def _settle(stream: VadStream, guess: TurnGuess, probability: float, model_ms: float) -> list[SpeechEvent]:
    outcome = "complete" if probability > COMPLETE_ABOVE else "incomplete"
    TURN_GUESSES.labels(outcome if stream.guess_current(guess) else "dropped").inc()
    return stream.settle(guess, probability, model_ms)


async def _read_settings(requests: AsyncIterator[vad_pb2.VadRequest], defaults: VadSettings
                         ) -> tuple[VadSettings, bool, AsyncIterator[vad_pb2.VadRequest]]:
    """Take the first message's settings; return them with the stream, first message included."""
    first = await anext(aiter(requests), None)
    if first is None:
        raise InvalidStream("empty stream: the first message must carry settings")
    if not first.HasField("settings"):
        raise InvalidStream("the first message must carry settings (send VadSettings() for the defaults)")
    settings = settings_from_proto(first.settings, defaults)

    async def with_first() -> AsyncIterator[vad_pb2.VadRequest]:
        yield first
        async for request in requests:
            yield request

    return settings, first.settings.emit_probabilities, with_first()


def _check_chunk(chunk: vad_pb2.AudioChunk, stream: VadStream, last_sequence: int) -> None:
    if chunk.sample_rate != stream.sample_rate:
        raise InvalidStream(f"sample rate changed from {stream.sample_rate} to {chunk.sample_rate} Hz mid-stream")
    if chunk.sequence < last_sequence:
        raise InvalidStream(f"chunk sequence {chunk.sequence} after {last_sequence}: chunks out of order")


def build() -> tuple[grpc_server.ServiceSpec, config.CommonConfig]:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    cfg = config.exit_on_error(lambda: config.load(config.VadConfig))
    logs.setup("vad", common.log_level)
    defaults = config.exit_on_error(lambda: default_settings(cfg))
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vad-infer")
    servicer = VadServicer(defaults, cfg.max_streams, executor)

    def register(server: grpc.aio.Server) -> None:
        vad_pb2_grpc.add_VadServiceServicer_to_server(servicer, server)

    async def load() -> dict[str, str]:
        loop = asyncio.get_running_loop()
        servicer.model = await loop.run_in_executor(executor, load_model, cfg.model)
        servicer.turn_model = await loop.run_in_executor(executor, load_turn_model, cfg, common)
        turn = str(servicer.turn_model.model_path) if servicer.turn_model else "off (silence alone)"
        return {"engine": "silero-vad onnxruntime", "model": str(servicer.model.model_path), "turn_model": turn}

    async def close() -> None:
        executor.shutdown(wait=False, cancel_futures=True)

    spec = grpc_server.ServiceSpec("vad", ["sotto.v1.VadService"], cfg.port, cfg.metrics_port, register, load, close)
    return spec, common


if __name__ == "__main__":
    grpc_server.main(build)
