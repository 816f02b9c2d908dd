"""The asr gRPC service (sotto.v1.AsrService): the words of an utterance, recognised while it is spoken.

The servicer only translates between protobuf and ``services.asr.streaming`` / ``services.asr.engine``. All model
runs go to one worker thread. A stream's background (partial) run starts only while that thread is idle, so
background work never queues up in front of a final answer or of another stream; at `end` the stream waits for
its own partial run, if one is under way, then decodes what is not yet stable.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np

from services.asr.engine import SAMPLE_RATE, WhisperEngine
from services.asr.loading import load_engine
from services.asr.metrics import ACTIVE_STREAMS, RECOGNITION_SECONDS
from services.asr.streaming import UtteranceRecognizer
from services.common import audio, config, grpc_server, logs
from sotto.v1 import asr_pb2, asr_pb2_grpc

_LOGGER = logging.getLogger(__name__)



class InvalidAudio(ValueError):
    """The client's audio or stream breaks the contract; the message says what is accepted."""


def clip_samples(request: asr_pb2.TranscribeRequest) -> np.ndarray:
    """A unary request's audio as float32 mono at 16 kHz; InvalidAudio naming what is accepted."""
    if request.wav:
        try:
            wav = audio.read_wav(request.wav)
        except ValueError as exc:
            raise InvalidAudio(f"wav: {exc}; send a PCM16 WAV at {SAMPLE_RATE} Hz") from None
        if wav.sample_width != 2 or wav.sample_rate != SAMPLE_RATE or wav.channels not in (1, 2):
            raise InvalidAudio(f"wav must be 16-bit PCM at {SAMPLE_RATE} Hz, mono or stereo; got "
                               f"{wav.sample_width * 8}-bit, {wav.sample_rate} Hz, {wav.channels} channel(s) "
                               f"(convert with `sox in.wav -r {SAMPLE_RATE} -b 16 out.wav`)")
        samples = audio.pcm16_to_float(wav.pcm)
        samples = samples.reshape(-1, wav.channels).mean(axis=1) if wav.channels == 2 else samples
    elif request.pcm16:
        check_rate(request.sample_rate)
        if len(request.pcm16) % 2:
            raise InvalidAudio(f"pcm16 needs an even number of bytes, got {len(request.pcm16)}")
        samples = audio.pcm16_to_float(request.pcm16)
    else:
        raise InvalidAudio("no audio: send a WAV file in `wav`, or PCM16 mono in `pcm16` with `sample_rate`")
    if not len(samples):
        raise InvalidAudio("the audio holds no samples")
    return samples.astype(np.float32)


def check_rate(sample_rate: int) -> None:
    if sample_rate not in (0, SAMPLE_RATE):
        raise InvalidAudio(f"sample_rate must be {SAMPLE_RATE} (or 0 for it), got {sample_rate}")


class AsrServicer(asr_pb2_grpc.AsrServiceServicer):
    """Holds the engine, its worker thread and the count of open streams."""

    def __init__(self, cfg: config.AsrConfig, log_content: bool, executor: ThreadPoolExecutor) -> None:
        self.engine: WhisperEngine | None = None  # set by the load step; no call reaches the servicer before
        self.cfg = cfg
        self.active_streams = 0
        self._log_content = log_content
        self._executor = executor
        self._running = 0  # runs submitted to the worker thread and not finished

    async def StreamTranscribe(self, request_iterator: AsyncIterator[asr_pb2.AsrRequest],
                               context: grpc.aio.ServicerContext) -> AsyncIterator[asr_pb2.AsrEvent]:
        if self.active_streams >= self.cfg.max_streams:
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, f"busy: {self.cfg.max_streams} utterance "
                                "streams already open (SOTTO_ASR_MAX_STREAMS)")
        self.active_streams += 1
        ACTIVE_STREAMS.inc()
        partial: asyncio.Future | None = None
        try:
            requests = aiter(request_iterator)
            first = await anext(requests, None)
            if first is None or not first.HasField("settings"):
                raise InvalidAudio("the first message must carry settings (send AsrSettings() for the defaults)")
            check_rate(first.settings.sample_rate)
            await context.send_initial_metadata(())  # accepted: the client need not wait for the first event
            assert self.engine is not None
            utterance = UtteranceRecognizer(self.engine, language=first.settings.language,
                                            interval_s=self.cfg.partial_interval_ms / 1000)
            request = first
            while True:
                if request.pcm16:
                    utterance.add(request.pcm16)
                if partial is not None and partial.done():
                    grew, partial = partial.result(), None
                    if grew and first.settings.partials:
                        yield asr_pb2.AsrEvent(stable=utterance.stable_text)
                if request.end:
                    yield asr_pb2.AsrEvent(final=await self._final(utterance, request.utterance_samples, partial))
                    return
                if partial is None and self._running == 0 and utterance.partial_due():
                    partial = self._submit("partial", utterance.recognise_partial, *utterance.start_partial())
                request = await anext(requests, None)
                if request is None:
                    raise InvalidAudio("the stream ended before a message with `end`")
        except InvalidAudio as exc:
            await self._reject(context, exc)
        except ValueError as exc:  # the engine's limits (length, language)
            await self._reject(context, exc)
        finally:
            self.active_streams -= 1
            ACTIVE_STREAMS.dec()

    async def _final(self, utterance: UtteranceRecognizer, utterance_samples: int,
                     partial: asyncio.Future | None) -> asr_pb2.Transcript:
        ended = time.monotonic()
        if partial is not None:
            await partial  # its hypothesis may cover the whole utterance, and the worker runs one thing at a time
        if not utterance.samples:
            raise InvalidAudio("no audio before `end`: send PCM16 in `pcm16`")
        words = await self._submit("final_run", utterance.recognise_final, utterance_samples)
        seconds = time.monotonic() - ended
        RECOGNITION_SECONDS.labels("final").observe(seconds)
        audio_ms = min(utterance_samples or utterance.samples, utterance.samples) * 1000 / SAMPLE_RATE
        _LOGGER.info("utterance_recognised", extra={
            "audio_ms": round(audio_ms), "recognition_ms": round(seconds * 1000, 1),
            "model_ms": round(words.recognition_s * 1000, 1), "stable_chars": words.stable_chars,
            "partial_runs": words.partial_runs, "covered": words.covered, "chars": len(words.text),
            **logs.content(self._log_content, transcript=words.text)})
        return asr_pb2.Transcript(text=words.text, audio_ms=audio_ms, recognition_ms=seconds * 1000,
                                  stable_chars=words.stable_chars, partial_runs=words.partial_runs,
                                  covered=words.covered)

    async def Transcribe(self, request: asr_pb2.TranscribeRequest,
                         context: grpc.aio.ServicerContext) -> asr_pb2.Transcript:
        assert self.engine is not None
        try:
            samples = clip_samples(request)
            self.engine.check(len(samples) / SAMPLE_RATE, request.language)
        except ValueError as exc:
            await self._reject(context, exc)
        started = time.monotonic()
        result = await self._submit("clip", self.engine.transcribe, samples, language=request.language)
        seconds = time.monotonic() - started
        _LOGGER.info("clip_recognised", extra={"audio_ms": round(result.audio_s * 1000),
                                               "recognition_ms": round(seconds * 1000, 1),
                                               **logs.content(self._log_content, transcript=result.text)})
        return asr_pb2.Transcript(text=result.text, audio_ms=result.audio_s * 1000, recognition_ms=seconds * 1000)

    def _submit(self, kind: str, fn: Callable, *args, **kwargs) -> asyncio.Future:
        """Run on the worker thread; the future's result is `fn`'s."""
        self._running += 1

        def timed():
            started = time.monotonic()
            try:
                return fn(*args, **kwargs)
            finally:
                if kind != "final_run":  # a final is observed from `end` to its words, by _final
                    RECOGNITION_SECONDS.labels(kind).observe(time.monotonic() - started)

        future = asyncio.get_running_loop().run_in_executor(self._executor, timed)
        future.add_done_callback(self._finished)
        return future

    def _finished(self, _future: asyncio.Future) -> None:
        self._running -= 1

    @staticmethod
    async def _reject(context: grpc.aio.ServicerContext, exc: Exception) -> None:
        _LOGGER.info("request_rejected", extra={"reason": str(exc)})
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))


def build() -> tuple[grpc_server.ServiceSpec, config.CommonConfig]:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    cfg = config.exit_on_error(lambda: config.load(config.AsrConfig))
    logs.setup("asr", common.log_level)
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr-infer")
    servicer = AsrServicer(cfg, common.log_content, executor)

    def register(server: grpc.aio.Server) -> None:
        asr_pb2_grpc.add_AsrServiceServicer_to_server(servicer, server)

    async def load() -> dict[str, str]:
        engine, offline = await asyncio.get_running_loop().run_in_executor(executor, load_engine, cfg, common)
        servicer.engine = engine
        return {"engine": "faster-whisper ctranslate2 int8", "model": str(engine.model_dir),
                "offline_kit": str(offline).lower(), "threads": str(engine.settings.threads)}

    async def close() -> None:
        executor.shutdown(wait=False, cancel_futures=True)

    spec = grpc_server.ServiceSpec("asr", ["sotto.v1.AsrService"], cfg.port, cfg.metrics_port, register, load, close)
    return spec, common


if __name__ == "__main__":
    grpc_server.main(build)
