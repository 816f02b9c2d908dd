"""The direct path: the same LLM and TTS engines in this one process, on the same inputs, with no gRPC,
WebSocket or gateway between them.

`first_audio` computes the in-process equivalent of the stack's "turn start -> first audio" on the stack's own
schedule: the LLM decodes in this thread, each sentence goes to the TTS engine (in a second thread, as the tts
service's SynthesizeStream does) the moment the splitter completes it, so the TTS speaks the first sentence while
the LLM still decodes the rest, competing for the same cores exactly as the two services do. What remains between
the two paths is the gateway, gRPC and serialisation.

The microphone stays live after the end of speech: in a spoken turn the client goes on sending audio while the
reply is being prepared, and any design, one process or many, must run the VAD on it (the user may speak again).
So the direct path feeds the same VAD engine the same tail of audio on the same real-time schedule (in pieces of
SOTTO_GATEWAY_VAD_BATCH_MS until the first audio, as the gateway does), and only the hops that audio takes in the
stack (WebSocket, gateway, gRPC to the vad process) remain in the difference.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from services.common import config
from services.gateway.client import FRAME_MS
from services.gateway.links.vad import batch_windows
from services.llm.engine import LlmEngine, TextDelta
from services.llm.loading import SamplingDefaults, engine_config
from services.llm.wire import to_engine_request
from services.tts.loading import load_engine
from services.vad.loading import default_settings, load_model
from sotto.v1 import llm_pb2


@dataclass
class DirectTurn:
    first_token_ms: float | None = None
    first_sentence_ms: float | None = None   # request -> first sentence complete
    tts_first_chunk_ms: float | None = None  # first sentence complete -> first audio chunk
    first_audio_ms: float | None = None      # request -> first audio chunk
    reply: str = ""
    cpu_ms: float = 0.0                      # CPU of this process (all threads): the LLM and the whole reply spoken
    mic_tail_ms: float = 0.0                 # audio the VAD was fed after the turn started, as the stack's was
    vad_cpu_ms: float = 0.0                  # of cpu_ms, the VAD's


class DirectPath:
    """One LlmEngine and one TTS engine built from the stack's own settings by the services' own constructors
    (`engine_config`, `load_engine`), so the two paths cannot drift apart (threads, limits, phoneme runs, voice)."""

    def __init__(self, env: dict[str, str], model_path: str) -> None:
        common = config.load(config.CommonConfig, env)
        llm_cfg = config.load(config.LlmConfig, env)
        tts_cfg = config.load(config.TtsConfig, env)
        self.system_prompt = config.load(config.GatewayConfig, env).system_prompt
        self.defaults = SamplingDefaults(llm_cfg.temperature, llm_cfg.top_p, llm_cfg.top_k, llm_cfg.max_new_tokens)
        self.llm = LlmEngine(engine_config(llm_cfg, common, Path(model_path)))
        self.llm.warmup()
        self.tts = load_engine(tts_cfg, common).engine  # warmed up, default voice set as in the service
        self.voice = self.tts.default_voice
        self.speed = tts_cfg.speed
        vad_cfg = config.load(config.VadConfig, env)
        self.vad, self.vad_settings = load_model(vad_cfg.model), default_settings(vad_cfg)
        gateway = config.load(config.GatewayConfig, env)
        self.vad_batch_frames = batch_windows(gateway.vad_batch_ms)  # FRAME_MS frames are one window each

    def request(self, text: str = "", audio_wav: bytes = b"", jpegs: tuple[bytes, ...] = ()):
        """The engine request the LLM service would build from the gateway's protobuf request."""
        proto = llm_pb2.GenerateRequest(
            system_prompt=self.system_prompt,
            user=llm_pb2.UserContent(audio_wav=audio_wav, text=text,
                                     images=[llm_pb2.Image(data=j, mime_type="image/jpeg") for j in jpegs]))
        return to_engine_request(proto, self.defaults)

    def first_audio(self, request, mic_tail_ms: float = 0.0) -> DirectTurn:
        """`mic_tail_ms`: how much microphone audio the stack's client sent after the turn had started."""
        out = DirectTurn(mic_tail_ms=mic_tail_ms)
        splitter = self.tts.splitter()
        sentences: queue.Queue = queue.Queue()
        first_chunk: list[float] = []
        cpu0, started = time.process_time(), time.perf_counter()

        def ms() -> float:
            return round((time.perf_counter() - started) * 1000, 1)

        def speak() -> None:
            chunks = self.tts.synthesize_sentences(iter(sentences.get, None), self.voice, self.speed)
            if next(chunks, None) is not None:
                first_chunk.append(ms())
            for _ in chunks:  # the whole reply is spoken, as in the stack
                pass

        def feed(done: list) -> None:
            for sentence in done:
                if out.first_sentence_ms is None:
                    out.first_sentence_ms = ms()
                sentences.put(sentence)

        def listen() -> None:
            cpu = time.thread_time()
            frame = bytes(2 * 16 * FRAME_MS)  # the tail is the trailing silence the client sends
            held = 0
            with self.vad.open_stream(16000, self.vad_settings) as stream:
                for i in range(int(mic_tail_ms // FRAME_MS)):
                    time.sleep(max(0.0, started + (i + 1) * FRAME_MS / 1000 - time.perf_counter()))
                    held += 1
                    if held >= (1 if first_chunk else self.vad_batch_frames):
                        stream.push(frame * held)
                        held = 0
                if held:
                    stream.push(frame * held)
            out.vad_cpu_ms = round((time.thread_time() - cpu) * 1000, 1)

        threads = [threading.Thread(target=speak, name="direct-tts")]
        if mic_tail_ms >= FRAME_MS:  # a page client sends nothing after its audio.end: nothing to listen to
            threads.append(threading.Thread(target=listen, name="direct-mic"))
        for thread in threads:
            thread.start()
        try:
            for event in self.llm.generate(request):
                if isinstance(event, TextDelta):
                    if out.first_token_ms is None:
                        out.first_token_ms = ms()
                    out.reply += event.text
                    feed(splitter.push(event.text))
            feed(splitter.close())
        finally:
            sentences.put(None)
            for thread in threads:
                thread.join()
        out.cpu_ms = round((time.process_time() - cpu0) * 1000, 1)
        if first_chunk and out.first_sentence_ms is not None:
            out.first_audio_ms = first_chunk[0]
            out.tts_first_chunk_ms = round(first_chunk[0] - out.first_sentence_ms, 1)
        return out

    def close(self) -> None:
        self.llm.close()

