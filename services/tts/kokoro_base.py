"""What both Kokoro-82M engines share; each subclass only renders phonemes to audio.

Voices and languages, and espeak G2P (through kokoro-onnx's tokenizer, so neither backend needs torch or spaCy)
with each sentence's phonemes cut into bounded model runs; sentences, pauses and chunking are the shared
``SentenceEngine``'s.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from services.common import config
from services.tts.engine import InvalidInput
from services.tts.sentence_engine import CHUNK_SAMPLES, NEVER_CANCELLED, SentenceEngine
from services.tts.voices import language_of

_TTS = config.TtsConfig()  # the settings' defaults: the one place they are written

LANGUAGES = ("en-us", "en-gb")
MAX_PHONEMES = 510  # the model's context, less the two pad tokens
# phonemizer warns "words count mismatch" on every call when punctuation is kept, as Kokoro needs.
logging.getLogger("phonemizer").setLevel(logging.ERROR)


class KokoroBase(SentenceEngine):
    """Voices, languages and G2P; subclasses render phonemes to audio."""

    name = "kokoro"

    def __init__(self, voice_names: Iterable[str], tokenizer, default_voice: str | None = None,
                 default_language: str = _TTS.language, max_chars: int = _TTS.max_text_chars, first_max_chars: int = 12,
                 chunk_samples: int = CHUNK_SAMPLES, sentence_pause: float = 0.25,
                 clause_pause: float = 0.1, max_phonemes: int = MAX_PHONEMES,
                 first_unit_words: int = _TTS.first_unit_words) -> None:
        self._voice_names = sorted(voice_names)
        self._tokenizer = tokenizer
        super().__init__(default_voice or ("af_heart" if "af_heart" in self._voice_names else self._voice_names[0]),
                         max_chars=max_chars, first_max_chars=first_max_chars, chunk_samples=chunk_samples,
                         sentence_pause=sentence_pause, clause_pause=clause_pause, first_unit_words=first_unit_words)
        self.default_language = default_language
        self.max_phonemes = min(max_phonemes, MAX_PHONEMES)

    def voices(self) -> list[str]:
        return list(self._voice_names)

    def voice_language(self, voice: str) -> str:
        return language_of(voice, "")

    def warmup(self) -> None:
        """A short sentence, then one run of the longest allowed size: ONNX Runtime's memory arena grows to the
        largest run it has seen and never shrinks, so sizing it here keeps the service's memory flat later."""
        for _ in self.synthesize("Hello there, I am ready."):
            pass
        words = "This sentence only sizes the memory of the longest model run before the first request."
        phonemes = self._tokenizer.phonemize(words, self.default_language)
        longest = " ".join([phonemes] * (self.max_phonemes // max(1, len(phonemes)) + 1))[: self.max_phonemes]
        self._render(longest.rsplit(" ", 1)[0], self.default_voice, 1.0, NEVER_CANCELLED)

    def check(self, voice: str | None, speed: float, lang: str | None) -> tuple[str, str]:
        """Without a language, a British voice speaks British English and any other voice the configured
        language: espeak here knows only the two Englishes, so a Japanese voice reads English text."""
        voice = self.check_voice(voice)
        self.check_speed(speed)
        if not lang:
            lang = "en-gb" if language_of(voice, "") == "en-gb" else self.default_language
        if lang not in LANGUAGES:
            raise InvalidInput(f"unsupported language {lang!r}; use one of {', '.join(LANGUAGES)}")
        return voice, lang

    def _runs(self, words: str, voice: str, lang: str) -> list[str]:
        """Runs of at most max_phonemes, split at word boundaries."""
        from kokoro_onnx.chunker import split_phonemes

        phonemes = self._tokenizer.phonemize(words, lang)
        return split_phonemes(phonemes, self.max_phonemes) if phonemes.strip() else []
