"""Is this audio speech? The vad service's own Silero engine (services.vad.engine) judges it, window by window."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.vad.engine import SileroVad

_WINDOW = 512  # samples at 16 kHz, what the model takes
_CONTEXT = 64  # samples of the previous window the v5+ model expects in front


def resample(audio: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Linear resampling: plenty for a voice-activity decision."""
    n = int(round(len(audio) * dst / src))
    return np.interp(np.arange(n) * (src / dst), np.arange(len(audio)), audio).astype(np.float32)


def plausible_duration(text: str, seconds: float) -> bool:
    """Between 1.5 and 5 words a second, with a little slack for very short texts."""
    words = len(text.split())
    return words / 5.0 - 0.3 <= seconds <= words / 1.5 + 0.8


@dataclass(frozen=True)
class SpeechReport:
    duration_s: float
    speech_s: float  # windows with speech probability >= threshold

    @property
    def speech_fraction(self) -> float:
        return self.speech_s / self.duration_s if self.duration_s else 0.0


class Vad:
    def __init__(self) -> None:
        self._model = SileroVad()

    def probabilities(self, audio16k: np.ndarray) -> np.ndarray:
        state = np.zeros((2, 1, 128), np.float32)
        context = np.zeros((1, _CONTEXT), np.float32)
        probs = []
        for start in range(0, len(audio16k) - _WINDOW + 1, _WINDOW):
            window = audio16k[start:start + _WINDOW][None, :].astype(np.float32)
            x = np.concatenate([context, window], axis=1)
            out, state = self._model.infer(x, state, 16000)
            probs.append(float(np.ravel(out)[0]))
            context = window[:, -_CONTEXT:]
        return np.array(probs)

    def report(self, pcm16: bytes, sample_rate: int, threshold: float = 0.5) -> SpeechReport:
        audio = np.frombuffer(pcm16, "<i2").astype(np.float32) / 32768.0
        audio16k = resample(audio, sample_rate, 16000)
        probs = self.probabilities(audio16k)
        return SpeechReport(len(audio) / sample_rate, float((probs >= threshold).sum()) * _WINDOW / 16000)
