"""The llm engine adapter: LiteRT-LM behind a small, synchronous, streaming interface.

`LlmEngine` owns one `litert_lm.Engine` (loaded once, sized to a memory budget, warmed up) and one
conversation per session (reused or rebuilt, see conversations.py). `generate` checks a `GenerateRequest`
and returns its `Generation` (generation.py), which streams `TextDelta`s and then one `Finished`; the request
and event types are defined there and part of this module's interface too.

No gRPC here, and no torch: the servicer translates, the offline kit builds models.
One LiteRT-LM engine runs one generation at a time, so generations take turns on its lock.
"""

from __future__ import annotations

import dataclasses
import io
import logging
import threading
import time
import wave
from pathlib import Path

from services.common import config
from services.llm import gpu, media
from services.llm.context import ContextBudget
from services.llm.conversations import ConversationCache, Turn, close_quietly, content
from services.llm.errors import EngineError, InvalidInput
from services.llm.generation import (
    Event,
    FinishReason,
    Finished,
    GenerateRequest,
    Generation,
    Sampling,
    TextDelta,
)
from services.llm.memory import DEFAULT_KV_BYTES_PER_TOKEN, MemoryPlan, plan_memory
from services.llm.native_log import stderr_tap

_LLM, _COMMON = config.LlmConfig(), config.CommonConfig()  # the settings' defaults: written once

__all__ = ["DEFAULT_CACHE_DIR", "EngineConfig", "Event", "FinishReason", "Finished", "GenerateRequest", "Generation",
           "LlmEngine", "ModelInfo", "Sampling", "TextDelta", "choose_backend"]

_LOGGER = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "sotto" / "litert-lm"


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    name: str
    path: str
    audio: bool
    vision: bool
    backend: str
    vision_backend: str | None
    audio_backend: str | None
    backend_reason: str  # why this backend: the GPU's name, or what kept the GPU out
    context_tokens: int
    memory: MemoryPlan


@dataclasses.dataclass(frozen=True)
class EngineConfig:
    """Every limit of the engine; the service fills it from SOTTO_LLM_* settings."""

    model_path: str
    backend: str = "auto"  # auto | cpu | gpu
    vision_backend: str = "auto"  # auto | cpu | gpu
    audio_backend: str = "cpu"  # the audio encoder is CPU-only by the model's design
    cpu_threads: int | None = None
    context_tokens: int | None = None  # None: the model's own maximum
    cache_dir: str = str(DEFAULT_CACHE_DIR)
    max_sessions: int = _LLM.max_sessions
    time_limit_s: float = _LLM.max_inference_s
    media_limits: media.MediaLimits = media.MediaLimits()
    memory_budget_fraction: float = _COMMON.memory_budget
    kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN
    model_name: str | None = None  # default: the file name without extension


@dataclasses.dataclass(frozen=True)
class BackendChoice:
    backend: str  # cpu | gpu
    reason: str
    probe: gpu.GpuProbe


def choose_backend(wanted: str) -> BackendChoice:
    """`auto`: the GPU where the probe finds one (Metal on Apple Silicon, Vulkan on Linux), else the CPU (XNNPACK)."""
    if wanted == "cpu":
        return BackendChoice("cpu", "SOTTO_LLM_BACKEND=cpu", gpu.GpuProbe(False))
    if wanted not in ("auto", "gpu"):
        raise ValueError(f"unknown backend {wanted!r}: use auto, cpu or gpu")
    found = gpu.probe()
    if found.usable:
        return BackendChoice("gpu", found.device, found)
    if wanted == "gpu":
        return BackendChoice("gpu", found.reason, found)
    return BackendChoice("cpu", f"no GPU: {found.reason}", found)


class LlmEngine:
    """A loaded model plus its session conversations. Thread-safe; one generation at a time."""

    def __init__(self, config: EngineConfig):
        import litert_lm

        self._lm = litert_lm
        self.config = config
        path = Path(config.model_path).expanduser()
        if not path.is_file():
            raise EngineError(f"model file not found: {path}",
                              "set SOTTO_LLM_MODEL or build one with tools/models/llm_kit")
        tap = stderr_tap()
        mark = tap.mark()
        try:
            with litert_lm.ModelInfo(str(path)) as info:
                modalities = info.input_modalities
                model_max = info.max_context_tokens
                dynamic = info.is_dynamic_context
        except RuntimeError as exc:
            raise EngineError(f"cannot read model {path}", tap.reason_since(mark) or str(exc)) from exc
        wanted = config.context_tokens or model_max
        if model_max > 0 and not dynamic:
            wanted = min(wanted, model_max)
        plan = plan_memory(
            path.stat().st_size,
            wanted,
            budget_fraction=config.memory_budget_fraction,
            kv_bytes_per_token=config.kv_bytes_per_token,
        )
        if plan.lowered:
            _LOGGER.warning("context lowered from %d to %d tokens to fit: %s", wanted, plan.context_tokens,
                            plan.describe())
        audio_backend = config.audio_backend if modalities.audio else None
        Path(config.cache_dir).expanduser().mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        self._engine, backend, vision_backend, backend_reason = self._create_on_best_backend(
            path, plan, modalities.vision, audio_backend)
        self.load_seconds = time.monotonic() - started
        self.info = ModelInfo(
            name=config.model_name or path.name.removesuffix(".litertlm"),
            path=str(path),
            audio=bool(modalities.audio),
            vision=bool(modalities.vision),
            backend=backend,
            vision_backend=vision_backend,
            audio_backend=audio_backend,
            backend_reason=backend_reason,
            context_tokens=plan.context_tokens,
            memory=plan,
        )
        self.context = ContextBudget(self._engine.tokenize, plan.context_tokens, self._markup_tokens())
        self.lock = threading.Lock()  # held by the running Generation
        self.sessions = ConversationCache(config.max_sessions, close=close_quietly)  # used under `lock`
        _LOGGER.info("loaded %s in %.2f s: %s", self.info.name, self.load_seconds, self.info)

    def _create_on_best_backend(self, path: Path, plan: MemoryPlan, vision: bool, audio_backend: str | None
                                ) -> tuple[object, str, str | None, str]:
        """The engine on the backend asked for; `auto` tries the GPU where one is usable and falls back to the CPU,
        saying why in one log line. An explicit `gpu` that cannot start is an error naming the missing piece."""
        config = self.config
        choice = choose_backend(config.backend)
        if choice.backend == "gpu" and not choice.probe.usable:
            raise EngineError("SOTTO_LLM_BACKEND=gpu, but no usable GPU", choice.probe.reason)

        def vision_on(main: str) -> str | None:
            if not vision:
                return None
            return main if config.vision_backend == "auto" else config.vision_backend

        backend, reason = choice.backend, choice.reason
        try:
            engine = self._create(path, plan, backend, vision_on(backend), audio_backend)
        except EngineError as exc:
            if config.backend != "auto" or backend == "cpu":
                raise
            backend, reason = "cpu", f"the GPU ({choice.probe.device}) failed to load the model: {exc}"
            engine = self._create(path, plan, backend, vision_on(backend), audio_backend)
        log = _LOGGER.warning if config.backend == "auto" and backend == "cpu" and choice.probe.reason else _LOGGER.info
        log("llm backend: %s (%s)", backend, reason)
        return engine, backend, vision_on(backend), reason

    def _create(self, path: Path, plan: MemoryPlan, backend: str, vision_backend: str | None,
                audio_backend: str | None):
        config = self.config
        tap = stderr_tap()
        mark = tap.mark()
        try:
            return self._lm.Engine(
                str(path),
                backend=self._backend(backend, config.cpu_threads),
                max_num_tokens=plan.context_tokens,
                cache_dir=str(Path(config.cache_dir).expanduser()),
                vision_backend=self._backend(vision_backend, config.cpu_threads) if vision_backend else None,
                audio_backend=self._backend(audio_backend, config.cpu_threads) if audio_backend else None,
                enable_benchmark=True,  # per-turn prefill/decode token counts and rates
            )
        except RuntimeError as exc:
            raise EngineError(f"cannot load model {path.name} on {backend}",
                              tap.reason_since(mark) or str(exc)) from exc

    def _markup_tokens(self) -> int:
        """The tokens the chat template puts around one message (and the reply's opening), from the template."""
        tap = stderr_tap()
        mark = tap.mark()
        try:
            conversation = self._engine.create_conversation()
            try:
                rendered = conversation.render_message_to_string({"role": "user", "content": "x"})
            finally:
                close_quietly(conversation)
            return len(self._engine.tokenize(rendered)) - len(self._engine.tokenize("x"))
        except RuntimeError as exc:
            raise EngineError("cannot read the model's chat template", tap.reason_since(mark) or str(exc)) from exc

    def _backend(self, name: str, threads: int | None):
        if name == "cpu":
            return self._lm.Backend.CPU(thread_count=threads)
        if name == "gpu":
            return self._lm.Backend.GPU()
        raise ValueError(f"unknown backend {name!r}: use auto, cpu or gpu")

    # -- public API ---------------------------------------------------------------------------

    def generate(self, request: GenerateRequest) -> Generation:
        """Check the request now (raising InvalidInput), and return its not-yet-started Generation."""
        self._check(request)
        return Generation(self, request)

    def warmup(self) -> Finished:
        """A real short generation through every encoder the model has (shaders compile, caches fill)."""
        request = GenerateRequest(
            text="Hello.",
            audio=(_silence_wav(0.5),) if self.info.audio else (),
            images=(_blank_png(64, 64),) if self.info.vision else (),
            sampling=Sampling.greedy(max_new_tokens=4),
        )
        *_, finished = self.generate(request)
        return finished

    def close(self) -> None:
        with self.lock:
            self.sessions.clear()
            self._engine.close()

    # -- checks, and what a running Generation asks of the engine (it holds `lock`) -------------

    def _check(self, request: GenerateRequest) -> None:
        limits = self.config.media_limits
        if request.audio and not self.info.audio:
            raise InvalidInput(f"model {self.info.name} does not accept audio: send text (or images) only")
        if request.images and not self.info.vision:
            raise InvalidInput(f"model {self.info.name} does not accept images: send text (or audio) only")
        if len(request.audio) > limits.max_audio_items:
            raise InvalidInput(f"{len(request.audio)} audio clips sent; the limit is {limits.max_audio_items}")
        if len(request.images) > limits.max_image_items:
            raise InvalidInput(f"{len(request.images)} images sent; the limit is {limits.max_image_items}")
        for clip in request.audio:
            media.check_wav(clip, limits)
        for image in request.images:
            media.check_image(image, limits)
        if not (request.text.strip() or request.audio or request.images):
            raise InvalidInput("the request is empty: send text, audio or an image")
        for turn in request.history:
            if turn.role not in ("user", "assistant"):
                raise InvalidInput(f"history role {turn.role!r} is not supported: use 'user' or 'assistant'")
        s = request.sampling
        if s.max_new_tokens < 1:
            raise InvalidInput(f"max_new_tokens must be at least 1, got {s.max_new_tokens}")
        if s.temperature < 0 or not 0 <= s.top_p <= 1 or s.top_k < 1:
            raise InvalidInput(
                f"bad sampling (temperature {s.temperature} >= 0, top_p {s.top_p} in [0, 1], top_k {s.top_k} >= 1)"
            )

    def new_conversation(self, request: GenerateRequest, history: tuple[Turn, ...]):
        """A fresh conversation holding the request's system prompt and `history` (the request's, or its newest
        turns)."""
        s = request.sampling
        sampler = self._lm.SamplerConfig(top_k=s.top_k, top_p=s.top_p, temperature=s.temperature, seed=s.seed)
        messages = [{"role": turn.role, "content": content(turn)} for turn in history]
        tap = stderr_tap()
        mark = tap.mark()
        try:
            return self._engine.create_conversation(
                messages=messages or None,
                system_message=request.system_prompt or None,
                sampler_config=sampler,
            )
        except RuntimeError as exc:
            raise EngineError("cannot create a conversation", tap.reason_since(mark) or str(exc)) from exc

    def message(self, request: GenerateRequest):
        """The request's user turn as LiteRT-LM takes it."""
        lm = self._lm
        if not (request.audio or request.images):
            # Plain string content: chat templates written for text-only models expect a string.
            return {"role": "user", "content": request.text}
        parts = [lm.Content.AudioBytes(clip) for clip in request.audio]
        parts += [lm.Content.ImageBytes(image) for image in request.images]
        if request.text:
            parts.append(request.text)
        return lm.Message.user(lm.Contents.of(*parts))


def _silence_wav(seconds: float, rate: int = 16000) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(b"\x00\x00" * int(seconds * rate))
    return buffer.getvalue()


def _blank_png(width: int, height: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("RGB", (width, height), (128, 128, 128)).save(buffer, "PNG")
    return buffer.getvalue()
