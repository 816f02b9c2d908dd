"""Speech fixtures for the VAD tests: tools.speech speaks, numpy mixes.

Truth is where the (trimmed) speech was placed, so every timing in the tests is exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

UTTERANCES = (
    ("en-us", "Hello there, could you tell me what the weather is like today?"),
    ("en-gb", "Please turn the kitchen lights off."),
    ("en-us+f3", "What time does the train to Boston leave?"),
)


@dataclass
class Scene:
    """A mixed recording and where each utterance truly is (in samples)."""

    audio: np.ndarray
    rate: int
    truth: list[tuple[int, int]]

    def truth_ms(self) -> list[tuple[float, float]]:
        return [(a * 1000 / self.rate, b * 1000 / self.rate) for a, b in self.truth]


def compose(parts: list[np.ndarray], gaps_s: list[float], rate: int, noise_dbfs: float | None = None,
            seed: int = 0) -> Scene:
    """Lay ``parts`` out with ``gaps_s`` of silence before each (plus one trailing gap), then add
    white noise at ``noise_dbfs`` RMS if given."""
    assert len(gaps_s) == len(parts) + 1
    pieces, truth, position = [], [], 0
    for gap, part in zip(gaps_s, parts + [None]):
        pieces.append(np.zeros(int(gap * rate), dtype=np.float64))
        position += len(pieces[-1])
        if part is not None:
            pieces.append(part.astype(np.float64))
            truth.append((position, position + len(part)))
            position += len(part)
    audio = np.concatenate(pieces)
    if noise_dbfs is not None:
        audio += white_noise(len(audio), noise_dbfs, seed).astype(np.float64)
    return Scene(np.clip(audio, -32768, 32767).astype(np.int16), rate, truth)


def white_noise(n: int, dbfs: float, seed: int = 0) -> np.ndarray:
    rms = 32768 * 10 ** (dbfs / 20)
    return np.clip(np.random.default_rng(seed).normal(0, rms, n), -32768, 32767).astype(np.int16)


TURN_TEXTS = {
    "complete": "What is the capital of France?",
    "filler": "So I was thinking um... uh",
    "rest": "we could go to the beach tomorrow.",
}


def silence(seconds: float, rate: int = 16000) -> np.ndarray:
    return np.zeros(int(seconds * rate), dtype=np.int16)
