"""Fake vad/llm/tts gRPC peers with knobs, to isolate the gateway (real servers on port 0, real gRPC).

They subclass the generated servicers, as LiveKit's fakes subclass the real interfaces. End-to-end tests never
use them: those run the real services.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
import numpy as np

from sotto.v1 import asr_pb2, asr_pb2_grpc, llm_pb2, llm_pb2_grpc, tts_pb2, tts_pb2_grpc, vad_pb2, vad_pb2_grpc


class FakeVad(vad_pb2_grpc.VadServiceServicer):
    """Energy threshold: loud samples are speech; `silence_ms` of quiet ends it."""

    def __init__(self, silence_ms: int = 200) -> None:
        self.silence = silence_ms * 16
        self.streams = 0
        self.fail_with: grpc.StatusCode | None = None
        self.chunk_samples: list[int] = []  # the size of each audio message received, in order
        self.start_delay_s = 0.0  # a real vad reports a start only after its minimum speech: later than the audio
        self.holds = 0  # how many of the client's ends of speech asking a verdict are answered TURN_HELD
        self.ends: list[bool] = []  # each end of speech received: whether it asked for a verdict
        self.playing: list[bool] = []  # each answer_playing change received, in order
        self.settings: list[vad_pb2.VadSettings] = []  # each stream's settings, in order

    async def StreamAudio(self, request_iterator: AsyncIterator[vad_pb2.VadRequest], context) -> AsyncIterator:
        self.streams += 1
        if self.fail_with is not None:
            await context.abort(self.fail_with, f"fake failure {self.fail_with.name}")
        await context.send_initial_metadata(())  # accepted, as the real vad says at once
        pos, start, last_loud = 0, None, 0
        first_ts = None
        async for req in request_iterator:
            if req.HasField("settings"):
                self.settings.append(req.settings)
            if req.HasField("answer_playing"):
                self.playing.append(req.answer_playing)
            if req.end_of_speech:
                self.ends.append(req.ask_verdict)
                if start is not None and req.ask_verdict and self.holds:
                    self.holds -= 1
                    yield vad_pb2.VadEvent(kind=vad_pb2.VadEvent.TURN_HELD, start_sample=start,
                                           start_ts_ms=int(first_ts + start / 16), turn_probability=0.1)
            if not req.HasField("audio"):
                continue
            pcm = np.frombuffer(req.audio.pcm16, dtype="<i2")
            self.chunk_samples.append(len(pcm))
            if first_ts is None:
                first_ts = req.audio.capture_ts_ms - pos / 16
            for i in np.flatnonzero(np.abs(pcm) > 1000)[:1]:
                if start is None:
                    start = pos + int(i)
                    if self.start_delay_s:
                        await asyncio.sleep(self.start_delay_s)
                    yield vad_pb2.VadEvent(kind=vad_pb2.VadEvent.SPEECH_STARTED, start_sample=start,
                                           start_ts_ms=int(first_ts + start / 16))
            loud = np.flatnonzero(np.abs(pcm) > 1000)
            if len(loud):
                last_loud = pos + int(loud[-1])
            pos += len(pcm)
            if start is not None and pos - last_loud > self.silence:
                yield vad_pb2.VadEvent(kind=vad_pb2.VadEvent.SPEECH_ENDED, start_sample=start, end_sample=last_loud,
                                       start_ts_ms=int(first_ts + start / 16), end_ts_ms=int(first_ts + last_loud / 16))
                start = None


@dataclass
class FakeLlm(llm_pb2_grpc.LlmServiceServicer):
    deltas: list[str] = field(default_factory=lambda: ["Hello", " there.", " How", " are", " you?"])
    delta_delay_s: float = 0.01
    first_delay_s: float = 0.0
    open_after_done: asyncio.Event | None = None  # if given, the call stays open after `done` until it is set
    engine_first_token_ms: float = 1.0  # what `done` reports as the engine's own time to first token
    prefill_tokens: int = 12  # what `done` reports as the prompt's length; decode tokens are the deltas
    fail_with: grpc.StatusCode | None = None
    requests: list[llm_pb2.GenerateRequest] = field(default_factory=list)
    cancelled: int = 0  # calls that ended before their handler finished (see count_unfinished)
    audio_input: bool = True  # what GetModelInfo says (False: a text-only model, spoken turns go as words)
    image_input: bool = True  # what GetModelInfo says (False: a model that cannot see)

    async def Generate(self, request, context) -> AsyncIterator[llm_pb2.GenerateEvent]:
        self.requests.append(request)
        if self.fail_with is not None:
            await context.abort(self.fail_with, f"fake failure {self.fail_with.name}")
        finished = count_unfinished(self, context)
        await asyncio.sleep(self.first_delay_s)
        for delta in self.deltas:
            yield llm_pb2.GenerateEvent(text_delta=delta)
            await asyncio.sleep(self.delta_delay_s)
        timings = llm_pb2.GenerateTimings(queue_wait_ms=0.5, time_to_first_token_ms=self.engine_first_token_ms,
                                          prefill_tokens=self.prefill_tokens, decode_tokens=len(self.deltas))
        yield llm_pb2.GenerateEvent(done=llm_pb2.GenerateDone(finish_reason=llm_pb2.STOP, timings=timings,
                                                              text="".join(self.deltas)))
        if self.open_after_done is not None:
            await self.open_after_done.wait()
        finished.set()

    async def GetModelInfo(self, request, context) -> llm_pb2.ModelInfo:
        return llm_pb2.ModelInfo(model="fake", backend="cpu", audio_input=self.audio_input,
                                 image_input=self.image_input)


@dataclass
class FakeAsr(asr_pb2_grpc.AsrServiceServicer):
    """Hears `words` in every utterance and clip, after `delay_s`; `fail_with` refuses every call."""

    words: str = "What is the capital of France?"
    delay_s: float = 0.0
    fail_with: grpc.StatusCode | None = None
    streamed: list[int] = field(default_factory=list)  # per finished stream: the utterance_samples it was told
    received: list[int] = field(default_factory=list)  # per finished stream: the samples it received
    clips: list[bytes] = field(default_factory=list)

    async def StreamTranscribe(self, request_iterator, context) -> AsyncIterator[asr_pb2.AsrEvent]:
        if self.fail_with is not None:
            await context.abort(self.fail_with, f"fake failure {self.fail_with.name}")
        samples = 0
        async for request in request_iterator:
            samples += len(request.pcm16) // 2
            if request.end:
                await asyncio.sleep(self.delay_s)
                self.streamed.append(request.utterance_samples)
                self.received.append(samples)
                yield asr_pb2.AsrEvent(final=asr_pb2.Transcript(text=self.words, recognition_ms=1.0))
                return

    async def Transcribe(self, request, context) -> asr_pb2.Transcript:
        if self.fail_with is not None:
            await context.abort(self.fail_with, f"fake failure {self.fail_with.name}")
        await asyncio.sleep(self.delay_s)
        self.clips.append(request.wav)
        return asr_pb2.Transcript(text=self.words, recognition_ms=1.0)


@dataclass
class FakeTts(tts_pb2_grpc.TtsServiceServicer):
    """Speaks each sentence (ending in . ? !) as `chunks_per_sentence` chunks of 2048 samples."""

    chunks_per_sentence: int = 2
    chunk_delay_s: float = 0.005
    cancelled: int = 0  # as FakeLlm.cancelled
    texts: list[str] = field(default_factory=list)
    fail_with: tuple[grpc.StatusCode, str] | None = None  # ends the call with this status at the first text
    # Once `chunks_sent` (counted over all calls) reaches this, the stream sends nothing more until cancelled.
    stall_after_chunks: int | None = None
    # What it says (24 kHz PCM16, cut into chunks from the call's start): a recording, for tests that need audio
    # like speech; None: a tone.
    voice: np.ndarray | None = None
    chunks_sent: int = field(default=0, init=False)

    async def SynthesizeStream(self, request_iterator, context) -> AsyncIterator[tts_pb2.AudioOut]:
        finished = count_unfinished(self, context)
        text, done_upto, index, offset = "", 0, 0, 0
        async for req in request_iterator:
            if req.WhichOneof("item") != "text":
                continue
            if self.fail_with is not None:
                await context.abort(*self.fail_with)
            text += req.text
            while (end := _sentence_end(text, done_upto)) is not None:
                async for chunk in self._speak(text, done_upto, end, index, offset):
                    offset += 2048
                    yield chunk
                done_upto, index = end, index + 1
        if text[done_upto:].strip():
            async for chunk in self._speak(text, done_upto, len(text), index, offset):
                yield chunk
        self.texts.append(text)
        finished.set()

    async def _speak(self, text: str, start: int, end: int, index: int, offset: int) -> AsyncIterator:
        tone = (np.sin(np.arange(2048) / 8) * 8000).astype("<i2").tobytes()
        for i in range(self.chunks_per_sentence):
            at = (offset + i * 2048) % len(self.voice) if self.voice is not None else 0
            pcm = tone if self.voice is None else np.resize(self.voice[at:], 2048).astype("<i2").tobytes()
            await asyncio.sleep(self.chunk_delay_s)
            if self.chunks_sent == self.stall_after_chunks:
                await asyncio.Event().wait()  # until the call is cancelled
            self.chunks_sent += 1
            yield tts_pb2.AudioOut(pcm16=pcm, sample_rate=24000, sentence_index=index, text_start=start,
                                   text_end=end, sentence_text=text[start:end], sample_offset=offset + i * 2048,
                                   sentence_end=i == self.chunks_per_sentence - 1)

    async def ListVoices(self, request, context) -> tts_pb2.ListVoicesResponse:
        return tts_pb2.ListVoicesResponse(voices=[tts_pb2.Voice(name="af_heart", language="en-us")],
                                          default_voice="af_heart")


def count_unfinished(servicer: FakeLlm | FakeTts, context: grpc.aio.ServicerContext) -> asyncio.Event:
    """Adds one to `servicer.cancelled` if the call ends before the returned event is set.

    Counted from the call's end, not from a CancelledError in the handler: a cancel that lands while the handler
    waits at a `yield` (gRPC writing its message) is never raised inside it, and `context.cancelled()` is still
    False when the done callback runs (grpc 1.85)."""
    finished = asyncio.Event()

    def note_end(_context: grpc.aio.ServicerContext) -> None:
        servicer.cancelled += not finished.is_set()

    context.add_done_callback(note_end)
    return finished


def _sentence_end(text: str, start: int) -> int | None:
    for i in range(start, len(text)):
        if text[i] in ".?!":
            return i + 1
    return None


async def start_fake(servicer: object, add, name: str, address: str = "127.0.0.1:0") -> tuple[grpc.aio.Server, str]:
    server = grpc.aio.server()
    add(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    await health_servicer.set(name, health_pb2.HealthCheckResponse.SERVING)
    port = server.add_insecure_port(address)
    await server.start()
    return server, f"127.0.0.1:{port}"
