"""What every engine shares, whatever model speaks: requests in, sentences out, audio cut into chunks.

Validating the text, splitting it into sentences (``text.py``), reading each as words, the pauses between
sentences (none inside a phrase cut in two: its seam is trimmed to a breath), and cutting the audio into chunks
of exactly ``CHUNK_SAMPLES`` (the last of a sentence may be shorter), checking the cancel before each. A subclass
says which voices and languages it takes (``check``), turns a sentence's words into model runs (``_runs``) and
renders one run to float audio at ``sample_rate`` (``_render``).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import numpy as np

from services.common import config
from services.common.audio import float_to_pcm16
from services.tts.engine import SAMPLE_RATE, AudioChunk, CancelEvent, InvalidInput
from services.tts.text import Sentence, SentenceSplitter, speakable, split_sentences

_TTS = config.TtsConfig()  # the settings' defaults: the one place they are written

CHUNK_SAMPLES = _TTS.chunk_samples
SPEED_RANGE = (0.5, 2.0)
NEVER_CANCELLED = CancelEvent()
# Where one phrase is spoken as two units, each model run starts and ends in its own silence (Piper's: about 50 ms
# before, 170-280 ms after); the seam keeps this much of it, a breath rather than a pause.
SEAM_SILENCE_S = 0.04
SILENT = 0.01  # peak level below which a run's edge counts as silence


class SentenceEngine:
    """Validation, sentences, pauses and chunking; subclasses map words to model runs and render them."""

    name = "engine"
    sample_rate = SAMPLE_RATE

    def __init__(self, default_voice: str, max_chars: int = _TTS.max_text_chars, first_max_chars: int = 12,
                 chunk_samples: int = CHUNK_SAMPLES, sentence_pause: float = 0.25, clause_pause: float = 0.1,
                 first_unit_words: int = _TTS.first_unit_words) -> None:
        self.default_voice = default_voice
        self.max_chars = max_chars
        self.first_max_chars = first_max_chars
        self.first_unit_words = first_unit_words
        self.chunk_samples = chunk_samples
        self._sentence_pause, self._clause_pause = sentence_pause, clause_pause

    # -- what a subclass provides ----------------------------------------------------------------

    def voices(self) -> list[str]:
        raise NotImplementedError

    def voice_language(self, voice: str) -> str:
        """The language `voice` was made for ('' when unknown), as ListVoices reports it."""
        raise NotImplementedError

    def check(self, voice: str | None, speed: float, lang: str | None) -> tuple[str, str]:
        """Resolve (voice, lang) or raise InvalidInput naming what is accepted."""
        raise NotImplementedError

    def _runs(self, words: str, voice: str, lang: str) -> list:
        """The model inputs that speak `words` in `voice`, in order (empty: nothing to speak)."""
        raise NotImplementedError

    def _render(self, run, voice: str, speed: float, cancel: CancelEvent) -> np.ndarray:
        """Float audio in [-1, 1] at `sample_rate` for one run (empty when the run was cancelled)."""
        raise NotImplementedError

    # -- requests ------------------------------------------------------------------------------

    def check_speed(self, speed: float) -> None:
        if not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
            raise InvalidInput(f"speed {speed} is out of range; use {SPEED_RANGE[0]} to {SPEED_RANGE[1]}")

    def check_voice(self, voice: str | None) -> str:
        voice = voice or self.default_voice
        if voice not in self.voices():
            raise InvalidInput(f"unknown voice {voice!r}; available voices: {', '.join(self.voices())}")
        return voice

    def check_text(self, text: str) -> None:
        if not text or not text.strip():
            raise InvalidInput("text is empty; send at least one word")
        if len(text) > self.max_chars:
            raise InvalidInput(f"text is {len(text)} characters; the limit is {self.max_chars}")

    def splitter(self) -> SentenceSplitter:
        return SentenceSplitter(first_max_chars=self.first_max_chars, first_unit_words=self.first_unit_words)

    def synthesize(self, text: str, voice: str | None = None, speed: float = 1.0,
                   lang: str | None = None, cancel: CancelEvent | None = None) -> Iterator[AudioChunk]:
        """Validate eagerly (errors raise here, not at the first next()), then stream chunks."""
        self.check_text(text)
        voice, lang = self.check(voice, speed, lang)
        sentences = split_sentences(text, self.first_max_chars, self.first_unit_words)
        if not any(speakable(s.text) for s in sentences):
            raise InvalidInput("text has nothing to speak (only markup, code or emoji)")
        return self.synthesize_sentences(sentences, voice, speed, lang, cancel)

    def synthesize_sentences(self, sentences: Iterable[Sentence], voice: str | None = None,
                             speed: float = 1.0, lang: str | None = None,
                             cancel: CancelEvent | None = None) -> Iterator[AudioChunk]:
        """Speak sentences as they arrive (the iterable may block while the text streams in)."""
        voice, lang = self.check(voice, speed, lang)
        return self._stream(sentences, voice, speed, lang, cancel or NEVER_CANCELLED)

    def _pause_before(self, previous: Sentence | None) -> int:
        if previous is None or previous.continues:
            return 0  # the first sound of an answer is never delayed; a phrase cut in two goes straight on
        seconds = self._clause_pause if previous.text.rstrip()[-1:] in ",;:—–-" else self._sentence_pause
        return int(seconds * self.sample_rate)

    def _seam(self, audio: np.ndarray, lead: bool, trail: bool) -> np.ndarray:
        """`audio` with its leading and/or trailing silence cut to SEAM_SILENCE_S."""
        loud = np.flatnonzero(np.abs(audio) > SILENT) if lead or trail else ()
        if not len(loud):
            return audio
        keep = int(SEAM_SILENCE_S * self.sample_rate)
        start = max(0, loud[0] - keep) if lead else 0
        end = min(len(audio), loud[-1] + 1 + keep) if trail else len(audio)
        return audio[start:end]

    def _stream(self, sentences: Iterable[Sentence], voice: str, speed: float, lang: str,
                cancel: CancelEvent) -> Iterator[AudioChunk]:
        offset = 0
        previous: Sentence | None = None
        for sentence in sentences:
            if cancel.is_set():
                return
            words = speakable(sentence.text)
            runs = self._runs(words, voice, lang) if words else []
            if not runs:
                continue
            pending = b"\0\0" * self._pause_before(previous)
            joined = previous is not None and previous.continues
            previous = sentence
            # Bounded runs: bounded memory per run, and the first chunks of a long sentence leave before the rest
            # is rendered. Chunks stay chunk_samples long across runs; only the sentence's last may be shorter.
            step = self.chunk_samples * 2
            for n, run in enumerate(runs):
                audio = self._render(run, voice, speed, cancel)
                if cancel.is_set():
                    return
                final = n == len(runs) - 1
                pending += float_to_pcm16(self._seam(audio, lead=joined and n == 0,
                                                     trail=final and sentence.continues))
                while len(pending) >= step or (final and pending):
                    if cancel.is_set():
                        return
                    piece, pending = pending[:step], pending[step:]
                    yield AudioChunk(piece, sentence.index, sentence.start, sentence.end,
                                     offset, final and not pending, sentence.text)
                    offset += len(piece) // 2
