"""Spoken fixtures from text: espeak-ng speaks, sox resamples (seeded dither), numpy trims.

Used by the tests (VAD timing, spoken turns) and by the bench's spoken cases, so both hear the same speech.
"""

from __future__ import annotations

import shutil
import subprocess
import wave
from pathlib import Path

import numpy as np

_SILENT = 64  # |sample| at or below this counts as espeak's own silence (about -54 dBFS)


def require_tools() -> None:
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: apt-get install -y espeak-ng sox (make system-deps)")


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
