"""What both Kokoro-82M engines share; each subclass only renders phonemes to audio.

Validating a request, splitting it into sentences (``text.py``), reading each as words, espeak G2P (through
kokoro-onnx's tokenizer, so neither backend needs torch or spaCy), the pauses between sentences, and cutting
the audio into chunks of exactly ``CHUNK_SAMPLES`` (the last of a sentence may be shorter).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator

import numpy as np

from services.common.audio import float_to_pcm16
from services.tts.engine import SAMPLE_RATE, AudioChunk, CancelEvent, InvalidInput
from services.tts.text import Sentence, SentenceSplitter, speakable, split_sentences
from services.tts.voices import language_of

CHUNK_SAMPLES = 2048
LANGUAGES = ("en-us", "en-gb")
SPEED_RANGE = (0.5, 2.0)
MAX_PHONEMES = 510  # the model's context, less the two pad tokens
NEVER_CANCELLED = CancelEvent()
# phonemizer warns "words count mismatch" on every call when punctuation is kept, as Kokoro needs.
logging.getLogger("phonemizer").setLevel(logging.ERROR)


def _pause_before(previous: Sentence | None, sentence_pause: float, clause_pause: float) -> int:
    if previous is None:
        return 0  # the first sound of an answer is never delayed
    seconds = clause_pause if previous.text.rstrip()[-1:] in ",;:—–-" else sentence_pause
    return int(seconds * SAMPLE_RATE)


class KokoroBase:
    """Validation, sentences, G2P, pauses and chunking; subclasses render phonemes to audio."""

    name = "kokoro"
    sample_rate = SAMPLE_RATE

    def __init__(self, voice_names: Iterable[str], tokenizer, default_voice: str | None = None,
                 default_language: str = "en-us", max_chars: int = 4000, first_max_chars: int = 24,
                 chunk_samples: int = CHUNK_SAMPLES, sentence_pause: float = 0.25,
                 clause_pause: float = 0.1, max_phonemes: int = MAX_PHONEMES) -> None:
        self._voice_names = sorted(voice_names)
        self._tokenizer = tokenizer
        self.default_voice = default_voice or ("af_heart" if "af_heart" in self._voice_names
                                               else self._voice_names[0])
        self.default_language = default_language
        self.max_chars = max_chars
        self.first_max_chars = first_max_chars
        self.chunk_samples = chunk_samples
        self._sentence_pause, self._clause_pause = sentence_pause, clause_pause
        self.max_phonemes = min(max_phonemes, MAX_PHONEMES)

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
        self._render(longest.rsplit(" ", 1)[0], self.default_voice, 1.0, NEVER_CANCELLED)

    # -- requests ------------------------------------------------------------------------------

    def check(self, voice: str | None, speed: float, lang: str | None) -> tuple[str, str]:
        """Resolve (voice, lang) or raise InvalidInput naming what is accepted.

        Without a language, a British voice speaks British English and any other voice the configured
        language: espeak here knows only the two Englishes, so a Japanese voice reads English text."""
        voice = voice or self.default_voice
        if voice not in self._voice_names:
            raise InvalidInput(f"unknown voice {voice!r}; available voices: {', '.join(self._voice_names)}")
        if not SPEED_RANGE[0] <= speed <= SPEED_RANGE[1]:
            raise InvalidInput(f"speed {speed} is out of range; use {SPEED_RANGE[0]} to {SPEED_RANGE[1]}")
        if not lang:
            lang = "en-gb" if language_of(voice, "") == "en-gb" else self.default_language
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
        return self._stream(sentences, voice, speed, lang, cancel or NEVER_CANCELLED)

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
