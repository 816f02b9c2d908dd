"""Kokoro-82M engines: text in, 24 kHz PCM16 chunks out, sentence by sentence. No gRPC here.

Two responsibilities:

* the :class:`TtsEngine` protocol and the work both backends share: validating a request,
  splitting it into sentences (``text.py``), reading each as words, espeak G2P (through
  kokoro-onnx's tokenizer, so neither backend needs torch or spaCy), trimming, and cutting the
  audio into chunks of exactly ``CHUNK_SAMPLES`` (the last of a sentence may be shorter);
* two backends that turn phonemes into audio: :class:`KokoroOnnx` (onnxruntime, the default
  off Apple Silicon) and :class:`KokoroMlx` (kokoro-mlx, the default on macOS arm64).

An engine runs one synthesis at a time; callers serialise (one worker thread per engine).
Cancellation: ``cancel`` (a :class:`CancelEvent`) is checked before every chunk, and the ONNX
backend also aborts a model run in progress the moment it is set, so a barge-in frees the engine
within one chunk.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np

from services.common.audio import float_to_pcm16
from services.tts import core_wait
from services.tts.text import Sentence, SentenceSplitter, speakable, split_sentences

SAMPLE_RATE = 24000
CHUNK_SAMPLES = 2048
LANGUAGES = ("en-us", "en-gb")
SPEED_RANGE = (0.5, 2.0)
_MAX_PHONEMES = 510  # the model's context, less the two pad tokens
# phonemizer warns "words count mismatch" on every call when punctuation is kept, as Kokoro needs.
logging.getLogger("phonemizer").setLevel(logging.ERROR)


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


_NEVER = CancelEvent()


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
    pool_threads: frozenset[int]

    def voices(self) -> list[str]: ...

    def warmup(self) -> None: ...

    def synthesize(self, text: str, voice: str | None = None, speed: float = 1.0,
                   lang: str | None = None, cancel: CancelEvent | None = None
                   ) -> Iterator[AudioChunk]: ...

    def synthesize_sentences(self, sentences: Iterable[Sentence], voice: str | None = None,
                             speed: float = 1.0, lang: str | None = None,
                             cancel: CancelEvent | None = None) -> Iterator[AudioChunk]: ...


def default_backend() -> str:
    """MLX on Apple Silicon (Metal), ONNX Runtime everywhere else."""
    return "mlx" if sys.platform == "darwin" and platform.machine() == "arm64" else "onnx"


def _pause_before(previous: Sentence | None, sentence_pause: float, clause_pause: float) -> int:
    if previous is None:
        return 0  # the first sound of an answer is never delayed
    seconds = clause_pause if previous.text.rstrip()[-1:] in ",;:—–-" else sentence_pause
    return int(seconds * SAMPLE_RATE)


class _KokoroBase:
    """Validation, sentences, G2P, pauses and chunking; subclasses render phonemes to audio."""

    name = "kokoro"
    sample_rate = SAMPLE_RATE
    # Native threads, besides the caller's, that a synthesis computes on; measured for their waits for a core.
    pool_threads: frozenset[int] = frozenset()

    def __init__(self, voice_names: Iterable[str], tokenizer, default_voice: str | None = None,
                 default_language: str = "en-us", max_chars: int = 4000, first_max_chars: int = 24,
                 chunk_samples: int = CHUNK_SAMPLES, sentence_pause: float = 0.25,
                 clause_pause: float = 0.1, max_phonemes: int = _MAX_PHONEMES) -> None:
        self._voice_names = sorted(voice_names)
        self._tokenizer = tokenizer
        self.default_voice = default_voice or ("af_heart" if "af_heart" in self._voice_names
                                               else self._voice_names[0])
        self.default_language = default_language
        self.max_chars = max_chars
        self.first_max_chars = first_max_chars
        self.chunk_samples = chunk_samples
        self._sentence_pause, self._clause_pause = sentence_pause, clause_pause
        self.max_phonemes = min(max_phonemes, _MAX_PHONEMES)

    def voices(self) -> list[str]:
        return list(self._voice_names)

    def warmup(self) -> None:
        """A short sentence, then one run of the longest allowed size: ONNX Runtime's memory arena grows to the
        largest run it has seen and never shrinks, so sizing it here keeps the service's memory flat later."""
        for _ in self.synthesize("Hello there, I am ready."):
            pass
        words = "This sentence only sizes the memory of the longest model run before the first request."
        phonemes = self._tokenizer.phonemize(words, self.default_language)
        longest = " ".join([phonemes] * (self.max_phonemes // max(1, len(phonemes)) + 1))[: self.max_phonemes]
        self._render(longest.rsplit(" ", 1)[0], self.default_voice, 1.0, _NEVER)

    # -- requests ------------------------------------------------------------------------------

    def check(self, voice: str | None, speed: float, lang: str | None) -> tuple[str, str]:
        """Resolve (voice, lang) or raise InvalidInput naming what is accepted."""
        voice = voice or self.default_voice
        if voice not in self._voice_names:
            raise InvalidInput(f"unknown voice {voice!r}; available voices: {', '.join(self._voice_names)}")
        if not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
            raise InvalidInput(f"speed {speed} is out of range; use {SPEED_RANGE[0]} to {SPEED_RANGE[1]}")
        lang = lang or ("en-gb" if voice.startswith("b") else self.default_language)
        if lang not in LANGUAGES:
            raise InvalidInput(f"unsupported language {lang!r}; use one of {', '.join(LANGUAGES)}")
        return voice, lang

    def check_text(self, text: str) -> None:
        if not text or not text.strip():
            raise InvalidInput("text is empty; send at least one word")
        if len(text) > self.max_chars:
            raise InvalidInput(f"text is {len(text)} characters; the limit is {self.max_chars}")

    def splitter(self) -> SentenceSplitter:
        return SentenceSplitter(first_max_chars=self.first_max_chars)

    def synthesize(self, text: str, voice: str | None = None, speed: float = 1.0,
                   lang: str | None = None, cancel: CancelEvent | None = None) -> Iterator[AudioChunk]:
        """Validate eagerly (errors raise here, not at the first next()), then stream chunks."""
        self.check_text(text)
        voice, lang = self.check(voice, speed, lang)
        sentences = split_sentences(text, self.first_max_chars)
        if not any(speakable(s.text) for s in sentences):
            raise InvalidInput("text has nothing to speak (only markup, code or emoji)")
        return self.synthesize_sentences(sentences, voice, speed, lang, cancel)

    def synthesize_sentences(self, sentences: Iterable[Sentence], voice: str | None = None,
                             speed: float = 1.0, lang: str | None = None,
                             cancel: CancelEvent | None = None) -> Iterator[AudioChunk]:
        """Speak sentences as they arrive (the iterable may block while the text streams in)."""
        voice, lang = self.check(voice, speed, lang)
        return self._stream(sentences, voice, speed, lang, cancel or _NEVER)

    def _stream(self, sentences: Iterable[Sentence], voice: str, speed: float, lang: str,
                cancel: CancelEvent) -> Iterator[AudioChunk]:
        from kokoro_onnx.chunker import split_phonemes

        offset = 0
        previous: Sentence | None = None
        for sentence in sentences:
            if cancel.is_set():
                return
            words = speakable(sentence.text)
            phonemes = self._tokenizer.phonemize(words, lang) if words else ""
            if not phonemes.strip():
                continue
            silence = b"\0\0" * _pause_before(previous, self._sentence_pause, self._clause_pause)
            previous = sentence
            # Runs of at most max_phonemes (split at word boundaries): bounded memory per run, and the first
            # chunks of a long sentence leave before the rest is rendered. Chunks stay chunk_samples long across
            # runs; only the sentence's last may be shorter.
            pending = silence
            batches = split_phonemes(phonemes, self.max_phonemes)
            step = self.chunk_samples * 2
            for n, batch in enumerate(batches):
                audio = self._render(batch, voice, speed, cancel)
                if cancel.is_set():
                    return
                pending += float_to_pcm16(audio)
                final = n == len(batches) - 1
                while len(pending) >= step or (final and pending):
                    if cancel.is_set():
                        return
                    piece, pending = pending[:step], pending[step:]
                    yield AudioChunk(piece, sentence.index, sentence.start, sentence.end,
                                     offset, final and not pending, sentence.text)
                    offset += len(piece) // 2

    def _render(self, phonemes: str, voice: str, speed: float, cancel: CancelEvent) -> np.ndarray:
        raise NotImplementedError


def _espeak_tokenizer(vocab: dict[str, int] | None = None):
    from kokoro_onnx.tokenizer import Tokenizer

    return Tokenizer(vocab=vocab)


class _AbortableSession:
    """An onnxruntime session whose runs end at their next step once the current request's `cancel` is set.

    kokoro-onnx calls `run` itself, so the request's event is handed over as an attribute before each create."""

    def __init__(self, session) -> None:
        self._session = session
        self.cancel: CancelEvent = _NEVER

    def __getattr__(self, name):
        return getattr(self._session, name)

    def run(self, output_names, input_feed, run_options=None):
        import onnxruntime as ort

        options = ort.RunOptions()
        with self.cancel.calling(lambda: setattr(options, "terminate", True)):
            return self._session.run(output_names, input_feed, options)


class KokoroOnnx(_KokoroBase):
    """Kokoro on ONNX Runtime (kokoro-onnx): the CPU default."""

    name = "kokoro-onnx"

    def __init__(self, model_path: str | Path, voices_path: str | Path, threads: int | None = None,
                 spin_wait: bool = False, **options) -> None:
        import onnxruntime as ort
        from kokoro_onnx import Kokoro

        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = threads or os.cpu_count() or 1
        # ORT's own default spins idle threads between steps of a run. Here the LLM decodes on the same cores
        # while the first sentence is synthesised, and a spinning thread then holds a core the other needs: on 2
        # cores with one kept busy, a first sentence took 652 ms spinning against 534 ms not (308 and 354 ms idle).
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_wait else "0")
        # Every sentence has its own input length; ORT would cache a memory pattern for each one, so memory
        # would creep up with the variety of sentences spoken (seen as +90 MB over a 20-minute soak).
        session_options.enable_mem_pattern = False
        before = core_wait.thread_ids()
        session = ort.InferenceSession(str(model_path), sess_options=session_options,
                                       providers=["CPUExecutionProvider"])
        self.pool_threads = frozenset(core_wait.thread_ids() - before)  # ORT's intra-op pool: threads - 1
        self._session = _AbortableSession(session)
        self._kokoro = Kokoro.from_session(self._session, str(voices_path))
        super().__init__(list(self._kokoro.voices.keys()), self._kokoro.tokenizer, **options)

    @classmethod
    def from_folder(cls, folder: str | Path, **options) -> KokoroOnnx:
        """A folder holding one ``kokoro-*.onnx`` and one ``voices-*.bin`` (release or kit names)."""
        folder = Path(folder)
        models, voices = sorted(folder.glob("kokoro-*.onnx")), sorted(folder.glob("voices*.bin"))
        if not (models and voices):
            raise FileNotFoundError(f"{folder} needs a kokoro-*.onnx and a voices-*.bin file")
        return cls(models[0], voices[0], **options)

    def _render(self, phonemes: str, voice: str, speed: float, cancel: CancelEvent) -> np.ndarray:
        self._session.cancel = cancel
        try:
            audio, _ = self._kokoro.create(phonemes, voice, speed, is_phonemes=True, trim=True)
        except Exception:
            if cancel.is_set():  # the run was aborted on purpose
                return np.zeros(0, np.float32)
            raise
        return np.asarray(audio, np.float32)


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


class KokoroMlx(_KokoroBase):
    """Kokoro on MLX (kokoro-mlx): Metal on Apple Silicon; selectable but slow on Linux CPU.

    Loads a local folder (config.json, one safetensors with PyTorch key names, voices/*.safetensors).
    G2P is espeak, as for ONNX, instead of kokoro-mlx's misaki (which wants spaCy, torch and a
    model download). A model run cannot be interrupted: cancel takes effect after it.
    """

    name = "kokoro-mlx"

    def __init__(self, model_dir: str | Path, memory_fraction: float = 0.65, **options) -> None:
        import mlx.core as mx
        from kokoro_mlx.model import KokoroModel
        from kokoro_mlx.voices import VoiceManager

        self._mx = mx
        total = int(mx.device_info().get("memory_size") or _physical_memory())
        if total and 0 < memory_fraction <= 1:
            mx.set_memory_limit(int(total * memory_fraction))
        self.memory_limit = mx.get_memory_limit()
        self._model = KokoroModel.from_pretrained(Path(model_dir))
        self._voice_files = VoiceManager(Path(model_dir))
        tokenizer = _espeak_tokenizer(self._model.vocab or None)
        super().__init__(self._voice_files.list_voices(), tokenizer, **options)

    def _render(self, phonemes: str, voice: str, speed: float, cancel: CancelEvent) -> np.ndarray:
        from kokoro_onnx.chunker import split_phonemes
        from kokoro_onnx.trim import trim

        pack = self._voice_files.load_voice(voice)
        parts = []
        for batch in split_phonemes(phonemes, _MAX_PHONEMES):
            if cancel.is_set():
                break
            tokens = len(self._tokenizer.tokenize(batch))
            style = self._voice_files.get_style(pack, tokens + 1)  # row n-1 for n tokens, as ONNX
            audio = np.array(self._model.forward(batch, style, speed), dtype=np.float32)
            parts.append(trim(audio)[0])
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)


def create_engine(backend: str | None, folder: str | Path, memory_fraction: float = 0.65,
                  threads: int | None = None, spin_wait: bool = False, **options) -> _KokoroBase:
    """Build the configured backend ('onnx', 'mlx'; None or 'auto' picks the platform default).

    `threads` and `spin_wait` are ONNX Runtime's; MLX schedules its own work on the GPU."""
    backend = default_backend() if backend in (None, "auto") else backend
    if backend == "onnx":
        return KokoroOnnx.from_folder(folder, threads=threads, spin_wait=spin_wait, **options)
    if backend == "mlx":
        return KokoroMlx(folder, memory_fraction=memory_fraction, **options)
    raise ValueError(f"unknown TTS backend {backend!r}; use 'onnx' or 'mlx'")
