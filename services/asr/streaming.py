"""One utterance recognised while it is spoken: the stable prefix by local agreement, and the final words.

While audio arrives the growing buffer is re-recognised (a *partial* run) whenever the speaker pauses, and in a long
utterance every interval, with the words already stable forced as the output's prefix. A word becomes stable once
two consecutive hypotheses agree on it (local agreement, as in whisper_streaming), except the last word of the
newest hypothesis, which the next audio may still complete. At the end only the unconfirmed tail is decoded, after
the stable prefix; and when the newest hypothesis already covered the whole utterance (the audio after it is only
the quiet that ended the utterance), it is the answer and nothing runs at all. A partial run also starts as soon as
the speaker pauses, so that such a hypothesis usually exists: Whisper encodes a fixed 30 s window per run, so
decoding fewer words saves little, while not running at all saves the whole recognition.

"Quiet" is relative: audio whose RMS is under a tenth (-20 dB) of the utterance's own, so microphone gain and a
steady noise floor do not matter.

The object holds no lock: the service calls `add`, `snapshot`, `partial_due` and `stable_text` on its event loop
and runs `recognise_partial` / `recognise_final` on the model's single worker thread, one at a time per stream.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

import numpy as np

from services.asr.engine import SAMPLE_RATE, WhisperEngine
from services.common.audio import pcm16_to_float

_NOT_WORD = re.compile(r"[^\w']+")
QUIET_RATIO = 0.1  # RMS below this share of the utterance's counts as the pause after speech
PAUSE_S = 0.2      # a pause this long starts a partial run before the interval is up


def normalise(word: str) -> str:
    """A word as agreement compares it: case and punctuation aside ("France?" agrees with "france")."""
    return _NOT_WORD.sub("", word.lower())


def agreed_words(previous: list[str], current: list[str]) -> int:
    """How many leading words of `current` agree with `previous`, never counting `current`'s last word."""
    count = 0
    for before, now in zip(previous, current[:-1]):
        if normalise(before) != normalise(now):
            break
        count += 1
    return count


@dataclass(frozen=True)
class FinalWords:
    text: str
    recognition_s: float  # model time spent after the end (0 when the newest hypothesis covered it all)
    stable_chars: int     # characters of `text` that were stable before the end
    partial_runs: int
    covered: bool         # the newest hypothesis made while the user spoke was the answer: nothing ran after the end


class UtteranceRecognizer:
    """The audio of one utterance, its hypotheses and its stable words."""

    def __init__(self, engine: WhisperEngine, *, language: str, interval_s: float) -> None:
        self._engine = engine
        self._language = language
        self._interval = int(interval_s * SAMPLE_RATE)  # 0: no partial runs
        self._pcm = bytearray()
        self._energy = 0.0  # sum of squares of the int16 samples so far
        self._stable: list[str] = []
        self._previous: list[str] = []
        self._hypothesis = ""
        self._hypothesis_samples = 0  # audio the newest hypothesis was made on
        self._last_partial_at = 0     # buffer length when the last partial run started
        self.partial_runs = 0

    @property
    def samples(self) -> int:
        return len(self._pcm) // 2

    @property
    def stable_text(self) -> str:
        return " ".join(self._stable)

    def add(self, pcm16: bytes) -> None:
        if len(pcm16) % 2:
            raise ValueError(f"PCM16 audio needs an even number of bytes, got {len(pcm16)}")
        self._pcm += pcm16
        chunk = np.frombuffer(pcm16, dtype="<i2").astype(np.float64)
        self._energy += float(np.dot(chunk, chunk))
        self._engine.check(self.samples / SAMPLE_RATE, self._language)

    def partial_due(self) -> bool:
        if self._interval <= 0 or (self._hypothesis and self._quiet_after(self._hypothesis_samples)):
            return False  # off, or nothing but quiet since the newest hypothesis
        new = self.samples - self._last_partial_at
        return new >= self._interval or (new >= PAUSE_S * SAMPLE_RATE and self._quiet_after(
            self.samples - int(PAUSE_S * SAMPLE_RATE)))

    def _quiet_after(self, sample: int) -> bool:
        """Whether the audio from `sample` to the end is quiet for this utterance (nothing after it: quiet)."""
        tail = np.frombuffer(self._pcm, dtype="<i2")[max(0, sample):].astype(np.float64)
        if not len(tail):
            return True
        return float(np.dot(tail, tail)) / len(tail) < QUIET_RATIO ** 2 * self._energy / self.samples

    def snapshot(self, samples: int = 0) -> np.ndarray:
        """The first `samples` of the utterance (0: all) as float32, copied: the buffer may grow meanwhile."""
        end = 2 * samples if samples else len(self._pcm)
        return pcm16_to_float(bytes(self._pcm[:end]))

    def start_partial(self) -> tuple[np.ndarray, str]:
        """Mark a partial run as started now; returns its audio and prefix."""
        self._last_partial_at = self.samples
        return self.snapshot(), self.stable_text

    def recognise_partial(self, audio: np.ndarray, prefix: str) -> bool:
        """Run one hypothesis; True when the stable prefix grew."""
        words = self._engine.transcribe(audio, prefix=prefix, language=self._language).text.split()
        self.partial_runs += 1
        self._hypothesis, self._hypothesis_samples = " ".join(words), len(audio)
        agreed = max(agreed_words(self._previous, words), len(self._stable))
        self._previous = words
        kept = [normalise(w) for w in words[: len(self._stable)]] == [normalise(w) for w in self._stable]
        grew = agreed > len(self._stable) and kept
        if grew:
            self._stable = words[:agreed]
        return grew

    def recognise_final(self, utterance_samples: int = 0) -> FinalWords:
        """The utterance's words: the first `utterance_samples` (0: all audio received) are the utterance."""
        total = min(utterance_samples or self.samples, self.samples)
        stable = self.stable_text
        # The newest hypothesis is the answer when the audio it did not hear, or heard beyond the utterance, is quiet.
        if self._hypothesis and self._quiet_after(min(self._hypothesis_samples, total)):
            return FinalWords(self._hypothesis, 0.0, len(stable), self.partial_runs, covered=True)
        started = time.monotonic()
        text = self._engine.transcribe(self.snapshot(total), prefix=stable, language=self._language).text
        return FinalWords(text, time.monotonic() - started, len(stable) if text.startswith(stable) else 0,
                          self.partial_runs, covered=False)
