"""The tts gRPC service (sotto.v1.TtsService): translates between protobuf and the engine (Kokoro or Piper).

The engine is blocking and runs one synthesis at a time, so every engine call (load, warm-up, each
step of a synthesis) runs on one worker thread, and each chunk is sent as soon as it exists. When a
call ends early (client cancel, deadline, barge-in) the engine's cancel event is set from the RPC's
done callback: the engine stops within one chunk and the thread is free for the next call.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import time
from collections.abc import AsyncIterator, Callable, Iterator
from concurrent.futures import ThreadPoolExecutor

import grpc

from services.common import config, grpc_server, logs
from services.tts.engine import CancelEvent, InvalidInput
from services.tts.loading import load_engine
from services.tts.metrics import ACTIVE_STREAMS, AUDIO_SECONDS, FIRST_CHUNK_SECONDS
from services.tts.text import Sentence
from sotto.v1 import tts_pb2, tts_pb2_grpc

_LOGGER = logging.getLogger(__name__)
_END = object()




def _audio_out(chunk, sample_rate: int) -> tts_pb2.AudioOut:
    return tts_pb2.AudioOut(pcm16=chunk.pcm, sample_rate=sample_rate, sentence_index=chunk.sentence_index,
                            text_start=chunk.text_start, text_end=chunk.text_end,
                            sentence_text=chunk.sentence_text, sample_offset=chunk.sample_offset,
                            sentence_end=chunk.last_in_sentence)


class TtsServicer(tts_pb2_grpc.TtsServiceServicer):
    def __init__(self, cfg: config.TtsConfig, executor: ThreadPoolExecutor) -> None:
        self._cfg = cfg
        self._executor = executor
        self.engine = None  # set by the service's load step; no call reaches the servicer before

    async def _call(self, fn, *args):
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn, *args)

    def _settings(self, voice_config: tts_pb2.VoiceConfig) -> tuple[str | None, float, str | None]:
        return (voice_config.voice or None, voice_config.speed or self._cfg.speed,
                voice_config.language or None)

    async def _speak(self, method: str, chunks: Iterator,
                     text_at: Callable[[], float]) -> AsyncIterator[tts_pb2.AudioOut]:
        """Step the engine's iterator on the worker thread; yield each chunk as it comes.

        `text_at()` is when the first text to speak arrived, the origin of the first-chunk latency."""
        ACTIVE_STREAMS.inc()
        try:
            chunk = await self._call(next, chunks, None)
            if chunk is not None:
                FIRST_CHUNK_SECONDS.labels(method).observe(time.perf_counter() - text_at())
            while chunk is not None:
                AUDIO_SECONDS.inc(chunk.samples / self.engine.sample_rate)
                yield _audio_out(chunk, self.engine.sample_rate)
                chunk = await self._call(next, chunks, None)
        finally:
            ACTIVE_STREAMS.dec()
            self._executor.submit(chunks.close)  # ordered before the next call's work

    async def Synthesize(self, request, context):
        engine = self.engine
        started = time.perf_counter()
        cancel = CancelEvent()
        context.add_done_callback(lambda _: cancel.set())
        voice, speed, lang = self._settings(request.config)
        try:
            chunks = await self._call(lambda: engine.synthesize(request.text, voice, speed, lang, cancel))
        except InvalidInput as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        _LOGGER.info("synthesize", extra={"chars": len(request.text), "voice": voice or engine.default_voice})
        async for out in self._speak("Synthesize", chunks, lambda: started):
            yield out

    async def SynthesizeStream(self, request_iterator, context):
        engine = self.engine
        cancel = CancelEvent()
        context.add_done_callback(lambda _: cancel.set())
        first = await anext(aiter(request_iterator), None)
        if first is None:
            return
        voice_config = first.config if first.WhichOneof("item") == "config" else tts_pb2.VoiceConfig()
        voice, speed, lang = self._settings(voice_config)
        sentences: queue.Queue = queue.Queue()
        splitter = engine.splitter()
        received = time.perf_counter()
        sentence_at: list[float] = []  # when the first complete sentence arrived

        def put_sentence(sentence: Sentence) -> None:
            if not sentence_at:
                sentence_at.append(time.perf_counter())
            sentences.put(sentence)

        async def read() -> None:
            total = 0
            try:
                items = [first] if first.WhichOneof("item") == "text" else []
                async for request in _chain(items, request_iterator):
                    if request.WhichOneof("item") != "text":
                        continue
                    total += len(request.text)
                    if total > engine.max_chars:
                        raise InvalidInput(f"text is over {engine.max_chars} characters, the limit")
                    for sentence in splitter.push(request.text):
                        put_sentence(sentence)
                for sentence in splitter.close():
                    put_sentence(sentence)
            finally:
                sentences.put(_END)

        def arriving() -> Iterator[Sentence]:
            """Sentences as they complete. A blocking get, not a timed poll, which would wake this thread 20 times
            a second while the llm prefills. `read` puts _END when it ends, and so does this handler's exit: a
            reader cancelled before its first step never runs its own `finally`."""
            while (item := sentences.get()) is not _END and not cancel.is_set():
                yield item

        try:
            chunks = await self._call(lambda: engine.synthesize_sentences(arriving(), voice, speed, lang, cancel))
        except InvalidInput as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        reader = asyncio.create_task(read(), name="tts::SynthesizeStream.read")
        try:
            async for out in self._speak("SynthesizeStream", chunks,
                                         lambda: sentence_at[0] if sentence_at else received):
                yield out
            await reader  # surfaces an input error (too long) after the audio already sent
        except InvalidInput as exc:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        finally:
            cancel.set()
            sentences.put(_END)  # the engine thread must never be left waiting for text
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)

    async def ListVoices(self, request, context):
        engine = self.engine
        voices = [tts_pb2.Voice(name=v, language=engine.voice_language(v)) for v in engine.voices()]
        return tts_pb2.ListVoicesResponse(voices=voices, default_voice=engine.default_voice)


async def _chain(first: list, rest: AsyncIterator) -> AsyncIterator:
    for item in first:
        yield item
    async for item in rest:
        yield item


def build() -> tuple[grpc_server.ServiceSpec, config.CommonConfig]:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    cfg = config.exit_on_error(lambda: config.load(config.TtsConfig))
    logs.setup("tts", common.log_level)
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts-engine")
    servicer = TtsServicer(cfg, executor)

    def register(server: grpc.aio.Server) -> None:
        tts_pb2_grpc.add_TtsServiceServicer_to_server(servicer, server)

    async def load() -> dict[str, str]:
        loop = asyncio.get_running_loop()
        loaded = await loop.run_in_executor(executor, load_engine, cfg, common)
        engine = servicer.engine = loaded.engine
        info = {"engine": engine.name, "backend": loaded.backend, "model": str(loaded.model),
                "voices": str(len(engine.voices())), "default_voice": engine.default_voice}
        return info | ({"reason": loaded.reason} if loaded.reason else {})

    async def close() -> None:
        executor.shutdown(wait=False, cancel_futures=True)

    spec = grpc_server.ServiceSpec("tts", ["sotto.v1.TtsService"], cfg.port, cfg.metrics_port, register, load,
                                   close)
    return spec, common


if __name__ == "__main__":
    grpc_server.main(build)
