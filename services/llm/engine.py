"""The llm engine adapter: LiteRT-LM behind a small, synchronous, streaming interface.

Two responsibilities:
1. Own one `litert_lm.Engine` (loaded once, sized to a memory budget, warmed up) and one
   conversation per session (reused or rebuilt, see conversations.py).
2. Turn a `GenerateRequest` into a stream of events: `TextDelta`s as tokens decode, then one
   `Finished` with the timings, token counts and finish reason. A `Generation` can be cancelled
   from any thread, and a generation that runs past the time limit ends as `degraded`.

No gRPC here, and no torch: the servicer translates, the offline kit builds models.
One LiteRT-LM engine runs one generation at a time, so generations take turns on a lock.
"""

from __future__ import annotations

import dataclasses
import enum
import io
import logging
import platform
import sys
import threading
import time
import wave
from pathlib import Path
from typing import Iterator, Union

from services.llm import media
from services.llm.conversations import ConversationCache, Turn
from services.llm.errors import EngineError, InvalidInput
from services.llm.memory import DEFAULT_KV_BYTES_PER_TOKEN, MemoryPlan, plan_memory
from services.llm.native_log import stderr_tap

_LOGGER = logging.getLogger(__name__)

DEFAULT_CACHE_DIR = Path.home() / ".cache" / "sotto" / "litert-lm"
_LOCK_POLL_S = 0.01


class FinishReason(str, enum.Enum):
    STOP = "stop"  # the model ended its turn
    LENGTH = "length"  # max new tokens (or the context) ran out
    CANCELLED = "cancelled"  # the caller cancelled
    DEGRADED = "degraded"  # the time limit ran out; the text is partial


@dataclasses.dataclass(frozen=True)
class Sampling:
    """Sampling settings; top_k is always passed, since LiteRT-LM samples greedily without it."""

    temperature: float = 0.7
    top_p: float = 0.9
    top_k: int = 40
    seed: int | None = None
    max_new_tokens: int = 25

    @classmethod
    def greedy(cls, max_new_tokens: int = 25) -> "Sampling":
        return cls(temperature=0.0, top_p=1.0, top_k=1, seed=0, max_new_tokens=max_new_tokens)


def _unheld_content(role: str) -> str:
    """What a rebuilt conversation says for a turn whose content was media only (a spoken question): the
    history is text, and the audio lived only in the discarded conversation's KV cache."""
    return "(spoken; the audio is no longer available)" if role == "user" else "(no reply)"


@dataclasses.dataclass(frozen=True)
class GenerateRequest:
    """One user turn. `history` holds the earlier turns as (role, text); the user turns' text must
    be what was sent, and the assistant turns' text what was returned, for a session to be reused."""

    text: str = ""
    audio: tuple[bytes, ...] = ()  # WAV files
    images: tuple[bytes, ...] = ()  # JPEG or PNG files
    system_prompt: str = ""
    history: tuple[Turn, ...] = ()
    sampling: Sampling = Sampling()
    session_id: str | None = None


@dataclasses.dataclass(frozen=True)
class TextDelta:
    text: str


@dataclasses.dataclass(frozen=True)
class Finished:
    text: str
    finish_reason: FinishReason
    time_to_first_token_s: float | None
    prefill_tokens: int
    decode_tokens: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    total_s: float
    context_tokens: int  # tokens the conversation holds after this turn
    reused_conversation: bool


Event = Union[TextDelta, Finished]


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    name: str
    path: str
    audio: bool
    vision: bool
    backend: str
    vision_backend: str | None
    audio_backend: str | None
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
    max_sessions: int = 16
    time_limit_s: float = 5.0
    media_limits: media.MediaLimits = media.MediaLimits()
    memory_budget_fraction: float = 0.65
    kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN
    model_name: str | None = None  # default: the file name without extension


def default_backend() -> str:
    """GPU (WebGPU on Metal) on Apple Silicon, CPU (XNNPACK) elsewhere."""
    return "gpu" if sys.platform == "darwin" and platform.machine() == "arm64" else "cpu"


class LlmEngine:
    """A loaded model plus its session conversations. Thread-safe; one generation at a time."""

    def __init__(self, config: EngineConfig):
        import litert_lm

        self._lm = litert_lm
        self.config = config
        path = Path(config.model_path).expanduser()
        if not path.is_file():
            raise EngineError(f"model file not found: {path}", "set SOTTO_LLM_MODEL or build one with tools/models/llm_kit")
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
            _LOGGER.warning("context lowered from %d to %d tokens to fit: %s", wanted, plan.context_tokens, plan.describe())
        backend = default_backend() if config.backend == "auto" else config.backend
        vision_backend = (default_backend() if config.vision_backend == "auto" else config.vision_backend) if modalities.vision else None
        audio_backend = config.audio_backend if modalities.audio else None
        Path(config.cache_dir).expanduser().mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        try:
            self._engine = self._create(path, plan, backend, vision_backend, audio_backend)
        except EngineError as exc:
            if config.backend != "auto" or backend == "cpu":
                raise
            # "auto" picked the GPU and it failed (no WebGPU device, driver...): serve on the CPU.
            _LOGGER.warning("GPU backend failed, falling back to CPU: %s", exc)
            backend = "cpu"
            vision_backend = "cpu" if vision_backend else None
            self._engine = self._create(path, plan, backend, vision_backend, audio_backend)
        self.load_seconds = time.monotonic() - started
        self.info = ModelInfo(
            name=config.model_name or path.name.removesuffix(".litertlm"),
            path=str(path),
            audio=bool(modalities.audio),
            vision=bool(modalities.vision),
            backend=backend,
            vision_backend=vision_backend,
            audio_backend=audio_backend,
            context_tokens=plan.context_tokens,
            memory=plan,
        )
        self._lock = threading.Lock()
        self._sessions = ConversationCache(config.max_sessions, close=_close_quietly)
        _LOGGER.info("loaded %s in %.2f s: %s", self.info.name, self.load_seconds, self.info)

    def _create(self, path: Path, plan: MemoryPlan, backend: str, vision_backend: str | None, audio_backend: str | None):
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
            raise EngineError(f"cannot load model {path.name} on {backend}", tap.reason_since(mark) or str(exc)) from exc

    def _backend(self, name: str, threads: int | None):
        if name == "cpu":
            return self._lm.Backend.CPU(thread_count=threads)
        if name == "gpu":
            return self._lm.Backend.GPU()
        raise ValueError(f"unknown backend {name!r}: use auto, cpu or gpu")

    # -- public API ---------------------------------------------------------------------------

    def generate(self, request: GenerateRequest) -> "Generation":
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

    def forget(self, session_id: str) -> None:
        """Close the session's conversation, if any."""
        with self._lock:
            self._sessions.drop(session_id)

    def close(self) -> None:
        with self._lock:
            self._sessions.clear()
            self._engine.close()

    # -- internals ----------------------------------------------------------------------------

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

    def _new_conversation(self, request: GenerateRequest):
        s = request.sampling
        sampler = self._lm.SamplerConfig(top_k=s.top_k, top_p=s.top_p, temperature=s.temperature, seed=s.seed)
        history = [{"role": turn.role, "content": turn.text or _unheld_content(turn.role)} for turn in request.history]
        tap = stderr_tap()
        mark = tap.mark()
        try:
            return self._engine.create_conversation(
                messages=history or None,
                system_message=request.system_prompt or None,
                sampler_config=sampler,
            )
        except RuntimeError as exc:
            raise EngineError("cannot create a conversation", tap.reason_since(mark) or str(exc)) from exc

    def _message(self, request: GenerateRequest):
        lm = self._lm
        if not (request.audio or request.images):
            # Plain string content: chat templates written for text-only models expect a string.
            return {"role": "user", "content": request.text}
        parts = [lm.Content.AudioBytes(clip) for clip in request.audio]
        parts += [lm.Content.ImageBytes(image) for image in request.images]
        if request.text:
            parts.append(request.text)
        return lm.Message.user(lm.Contents.of(*parts))


def _conversation_key(request: GenerateRequest) -> tuple:
    s = request.sampling
    return (request.system_prompt, s.temperature, s.top_p, s.top_k, s.seed)


class Generation:
    """One request's run: iterate it for events; `cancel()` from any thread, any time, idempotent."""

    def __init__(self, engine: LlmEngine, request: GenerateRequest):
        self._engine = engine
        self._request = request
        self._state_lock = threading.Lock()
        self._conversation = None
        self._stop_reason: FinishReason | None = None
        self._ended = False  # the stream has ended: a late cancel or time limit changes nothing
        self._events = self._run()
        self.cancel_requested_at: float | None = None

    def __iter__(self) -> Iterator[Event]:
        return self._events

    def __next__(self) -> Event:
        return next(self._events)

    def cancel(self) -> None:
        self._stop(FinishReason.CANCELLED)

    def _stop(self, reason: FinishReason) -> None:
        with self._state_lock:
            if self._stop_reason is not None or self._ended:
                return
            self._stop_reason = reason
            if reason is FinishReason.CANCELLED:
                self.cancel_requested_at = time.monotonic()
            if self._conversation is not None:
                self._conversation.cancel_process()

    def _run(self) -> Iterator[Event]:
        engine, request = self._engine, self._request
        started = time.monotonic()
        while not engine._lock.acquire(timeout=_LOCK_POLL_S):
            if self._stop_reason is not None:
                yield self._finished("", started, None, None, 0, 0, reused=False)
                return
        timer = threading.Timer(engine.config.time_limit_s, self._stop, args=(FinishReason.DEGRADED,))
        timer.daemon = True
        conversation = None
        keep = False
        try:
            if self._stop_reason is not None:
                yield self._finished("", started, None, None, 0, 0, reused=False)
                return
            key = _conversation_key(request)
            conversation = engine._sessions.take(request.session_id, key, request.history)
            reused = conversation is not None
            if conversation is None:
                conversation = engine._new_conversation(request)
            tokens_before = conversation.token_count
            with self._state_lock:
                self._conversation = conversation
                stopped_early = self._stop_reason is not None
            if stopped_early:
                yield self._finished("", started, None, None, tokens_before, tokens_before, reused=reused)
                return
            timer.start()
            tap = stderr_tap()
            mark = tap.mark()
            stream = conversation.send_message_async(
                engine._message(request), max_output_tokens=request.sampling.max_new_tokens
            )
            parts: list[str] = []
            first_token_at = None
            try:
                for message in stream:
                    text = "".join(c.text for c in message.contents.contents if hasattr(c, "text"))
                    if not text or self._stop_reason is not None:
                        continue  # after a cancel, drain what the native thread still sends
                    if first_token_at is None:
                        first_token_at = time.monotonic()
                    parts.append(text)
                    yield TextDelta(text)
            except GeneratorExit:
                # The consumer walked away: stop the native decode (it would go on otherwise).
                self._stop(FinishReason.CANCELLED)
                _drain(stream)
                raise
            except RuntimeError as exc:
                raise EngineError("generation failed", tap.reason_since(mark) or str(exc)) from exc
            finally:
                timer.cancel()
                with self._state_lock:
                    self._ended = True
            reply = "".join(parts)
            finished = self._finished(
                reply, started, first_token_at, conversation, tokens_before, conversation.token_count, reused=reused
            )
            if finished.finish_reason is FinishReason.STOP:
                turns = request.history + (Turn("user", request.text), Turn("assistant", reply))
                engine._sessions.put(request.session_id, conversation, key, turns)
                keep = True
            yield finished
        finally:
            timer.cancel()
            with self._state_lock:
                self._conversation = None
            if conversation is not None and not keep:
                _close_quietly(conversation)  # cancelled, cut short or failed: rebuild next time
            engine._lock.release()

    def _finished(self, text, started, first_token_at, conversation, tokens_before, tokens_after, *, reused) -> Finished:
        request = self._request
        prefill = decode = 0
        prefill_rate = decode_rate = 0.0
        if conversation is not None and tokens_after > tokens_before:
            try:
                bench = conversation.get_benchmark_info()
                prefill, decode = bench.last_prefill_token_count, bench.last_decode_token_count
                prefill_rate, decode_rate = bench.last_prefill_tokens_per_second, bench.last_decode_tokens_per_second
            except RuntimeError:
                pass
            if prefill + decode != tokens_after - tokens_before:
                # No benchmark for this turn (e.g. cancelled in prefill): count from the KV cache.
                decode = min(decode, tokens_after - tokens_before)
                prefill = tokens_after - tokens_before - decode
        reason = self._stop_reason
        if reason is None:
            at_context_end = tokens_after >= self._engine.info.context_tokens - 1
            reason = FinishReason.LENGTH if decode >= request.sampling.max_new_tokens or at_context_end else FinishReason.STOP
        now = time.monotonic()
        return Finished(
            text=text,
            finish_reason=reason,
            time_to_first_token_s=None if first_token_at is None else first_token_at - started,
            prefill_tokens=prefill,
            decode_tokens=decode,
            prefill_tokens_per_s=prefill_rate,
            decode_tokens_per_s=decode_rate,
            total_s=now - started,
            context_tokens=tokens_after,
            reused_conversation=reused,
        )


def _drain(stream) -> None:
    try:
        for _ in stream:
            pass
    except RuntimeError:
        pass


def _close_quietly(conversation) -> None:
    try:
        conversation.close()
    except Exception:  # noqa: BLE001 - closing must never mask the real outcome
        _LOGGER.exception("closing a conversation failed")


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
