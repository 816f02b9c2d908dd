"""Speech fixtures for the VAD tests: espeak-ng speaks, sox resamples, numpy mixes.

Truth is where the (trimmed) speech was placed, so every timing in the tests is exact.
"""

from __future__ import annotations

import shutil
import subprocess
import wave
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

UTTERANCES = (
    ("en-us", "Hello there, could you tell me what the weather is like today?"),
    ("en-gb", "Please turn the kitchen lights off."),
    ("en-us+f3", "What time does the train to Boston leave?"),
)
_SILENT = 64  # |sample| at or below this counts as espeak's own silence (about -54 dBFS)


def require_tools() -> None:
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:
        pytest.fail(f"{', '.join(missing)} missing: apt-get install -y espeak-ng sox")


def read_wav(path: Path) -> tuple[np.ndarray, int]:
    with wave.open(str(path)) as wav:
        assert wav.getsampwidth() == 2 and wav.getnchannels() == 1
        return np.frombuffer(wav.readframes(wav.getnframes()), dtype="<i2").copy(), wav.getframerate()


def write_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    with wave.open(str(path), "wb") as wav:
        wav.setnchannels(1)
        wav.setsampwidth(2)
        wav.setframerate(rate)
        wav.writeframes(samples.astype("<i2").tobytes())
    return path


def speak(text: str, voice: str, rate: int, workdir: Path) -> np.ndarray:
    """Synthesize ``text``, resample to ``rate`` Hz mono PCM16, trim espeak's own silence."""
    require_tools()
    stem = workdir / f"{abs(hash((text, voice)))}"
    raw, resampled = stem.with_suffix(".raw.wav"), stem.with_suffix(f".{rate}.wav")
    subprocess.run(["espeak-ng", "-v", voice, "-w", str(raw), text], check=True)
    # -R: the same dither every run; unseeded, about 1 in 300 copies of the first utterance ends a turn at its
    # comma with a 150 ms minimum silence, and a fixture must not change between runs
    subprocess.run(["sox", "-R", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(resampled)], check=True)
    samples, _ = read_wav(resampled)
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > _SILENT)
    return samples[loud[0] : loud[-1] + 1]


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
