"""The TTS engine interface: text in, 24 kHz PCM16 chunks out, sentence by sentence. No gRPC here.

What the service and the benchmark rely on: the :class:`TtsEngine` protocol, the :class:`AudioChunk` it
yields, the :class:`CancelEvent` that stops it, the :class:`InvalidInput` it raises, and
:func:`create_engine`, which builds the configured backend: :class:`~services.tts.kokoro_onnx.KokoroOnnx`
(ONNX Runtime, the default off Apple Silicon), :class:`~services.tts.kokoro_mlx.KokoroMlx` (MLX, the
default on macOS arm64) or :class:`~services.tts.piper.PiperEngine` (Piper voices, the English voice offline).
Each backend is imported only when it is built, so importing this module loads no runtime.

An engine runs one synthesis at a time; callers serialise (one worker thread per engine). ``cancel`` is
checked before every chunk, so a barge-in frees the engine within one chunk.
"""

from __future__ import annotations

import platform
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from services.common import config
from services.tts.text import Sentence, SentenceSplitter

_COMMON = config.CommonConfig()  # the settings' defaults: the one place they are written

SAMPLE_RATE = 24000


class InvalidInput(ValueError):
    """A request the engine cannot serve; the message says what is accepted."""


class CancelEvent(threading.Event):
    """A threading.Event that also calls back when set.

    A plain Event has no callbacks, so aborting a model run on cancel would need a thread polling it during
    every run: hundreds of wake-ups per second stealing the cores synthesis runs on. Here the abort is
    called from `set()` itself, in the cancelling thread.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def set(self) -> None:
        with self._lock:
            super().set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    @contextmanager
    def calling(self, callback: Callable[[], None]) -> Iterator[None]:
        """Within the block, `callback()` runs when the event is set (at once if it already is)."""
        with self._lock:
            already = self.is_set()
            if not already:
                self._callbacks.append(callback)
        if already:
            callback()
        try:
            yield
        finally:
            with self._lock:
                if callback in self._callbacks:
                    self._callbacks.remove(callback)


@dataclass(frozen=True)
class AudioChunk:
    """PCM16 (little-endian, mono, 24 kHz) for part of one sentence."""

    pcm: bytes
    sentence_index: int
    text_start: int  # span of the sentence in the original input, [start, end)
    text_end: int
    sample_offset: int  # first sample's position in the whole synthesis
    last_in_sentence: bool
    sentence_text: str = ""

    @property
    def samples(self) -> int:
        return len(self.pcm) // 2


class TtsEngine(Protocol):
    name: str
    sample_rate: int
    default_voice: str
    max_chars: int

    def voices(self) -> list[str]: ...

    def voice_language(self, voice: str) -> str:
        """The language `voice` was made for ('' when unknown)."""

    def warmup(self) -> None: ...

    def splitter(self) -> SentenceSplitter:
        """A splitter for text that arrives in pieces, cutting sentences as this engine's `synthesize` does."""

    def synthesize(self, text: str, voice: str | None = None, speed: float = 1.0,
                   lang: str | None = None, cancel: CancelEvent | None = None
                   ) -> Iterator[AudioChunk]: ...

    def synthesize_sentences(self, sentences: Iterable[Sentence], voice: str | None = None,
                             speed: float = 1.0, lang: str | None = None,
                             cancel: CancelEvent | None = None) -> Iterator[AudioChunk]: ...


def default_backend() -> str:
    """MLX on Apple Silicon (Metal), ONNX Runtime everywhere else."""
    return "mlx" if sys.platform == "darwin" and platform.machine() == "arm64" else "onnx"


def create_engine(backend: str | None, folder: str | Path | dict[str, Path],
                  memory_fraction: float = _COMMON.memory_budget, threads: int | None = None,
                  spin_wait: bool = False, **options) -> TtsEngine:
    """Build the configured backend ('onnx', 'mlx', 'piper'; None or 'auto' picks the platform's Kokoro).

    `folder`: Kokoro's model folder, or Piper's voices (name -> .onnx). `threads` and `spin_wait` are ONNX
    Runtime's; MLX schedules its own work on the GPU."""
    backend = default_backend() if backend in (None, "auto") else backend
    if backend == "piper":
        from services.tts.piper import PiperEngine

        options.pop("default_language", None)  # a Piper voice speaks the one language it was trained on
        return PiperEngine(folder, threads=threads, spin_wait=spin_wait, **options)
    if backend == "onnx":
        from services.tts.kokoro_onnx import KokoroOnnx

        return KokoroOnnx.from_folder(folder, threads=threads, spin_wait=spin_wait, **options)
    if backend == "mlx":
        from services.tts.kokoro_mlx import KokoroMlx

        return KokoroMlx(folder, memory_fraction=memory_fraction, **options)
    raise ValueError(f"unknown TTS backend {backend!r}; use 'onnx', 'mlx' or 'piper'")
