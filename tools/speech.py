"""Spoken fixtures from text: espeak-ng speaks, sox resamples (seeded dither), numpy trims.

Used by the tests (VAD timing, spoken turns) and by the bench's spoken cases, so both hear the same speech.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np

from services.common.audio import read_wav, wav_bytes

_SILENT = 64  # |sample| at or below this counts as espeak's own silence (about -54 dBFS)


def require_tools() -> None:
    missing = [tool for tool in ("espeak-ng", "sox") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"{', '.join(missing)} missing: apt-get install -y espeak-ng sox (make system-deps)")


def write_wav(path: Path, samples: np.ndarray, rate: int) -> Path:
    path.write_bytes(wav_bytes(samples.astype("<i2").tobytes(), rate))
    return path


def speak(text: str, voice: str, rate: int, workdir: Path, words_per_minute: int | None = None) -> np.ndarray:
    """Synthesize ``text`` (at espeak's default speed, or ``words_per_minute``), resample to ``rate`` Hz mono
    PCM16, trim espeak's own silence."""
    require_tools()
    stem = workdir / f"{abs(hash((text, voice, words_per_minute)))}"
    raw, resampled = stem.with_suffix(".raw.wav"), stem.with_suffix(f".{rate}.wav")
    speed = ["-s", str(words_per_minute)] if words_per_minute else []
    subprocess.run(["espeak-ng", "-v", voice, *speed, "-w", str(raw), text], check=True)
    # -R: the same dither every run; unseeded, about 1 in 300 copies of the first utterance ends a turn at its
    # comma with a 150 ms minimum silence, and a fixture must not change between runs
    subprocess.run(["sox", "-R", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(resampled)], check=True)
    wav = read_wav(resampled.read_bytes())
    if (wav.sample_width, wav.channels, wav.sample_rate) != (2, 1, rate):
        raise RuntimeError(f"sox wrote {resampled} as {wav.sample_width * 8}-bit, {wav.channels} channel(s), "
                           f"{wav.sample_rate} Hz; asked for 16-bit mono {rate} Hz")
    samples = np.frombuffer(wav.pcm, dtype="<i2").copy()
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) > _SILENT)
    return samples[loud[0] : loud[-1] + 1]
