"""Deterministic fake microphone and camera inputs for headless Chromium.

- speech: espeak-ng utterances placed at fixed times in a 48 kHz mono WAV (--use-file-for-fake-audio-capture)
- camera: a Y4M clip (a text header, then raw I420 frames; --use-file-for-fake-video-capture)
"""

from __future__ import annotations

import shutil
import subprocess
import wave
from collections.abc import Sequence
from pathlib import Path

import numpy as np


def _require(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise RuntimeError(f"{tool} is needed for the speech fixtures: apt-get install -y espeak-ng sox")
    return path


def _espeak(text: str, path: Path) -> tuple[np.ndarray, int]:
    subprocess.run([_require("espeak-ng"), "-v", "en-us", "-s", "150", "-w", str(path), text], check=True)
    with wave.open(str(path)) as w:
        rate = w.getframerate()
        samples = np.frombuffer(w.readframes(w.getnframes()), dtype="<i2")
    return samples, rate


def speech_timeline(path: Path, utterances: Sequence[tuple[float, str]], total_s: float) -> dict[str, float]:
    """Writes `path`: each (start_s, text) spoken by espeak-ng at start_s, silence elsewhere, 48 kHz mono PCM16.

    Returns each utterance's end time in seconds. Chromium plays the file once (%noloop) from when capture opens.
    """
    work = path.parent
    pieces = [(start, *_espeak(text, work / f"utt{i}.wav")) for i, (start, text) in enumerate(utterances)]
    rate = pieces[0][2]
    timeline = np.zeros(int(total_s * rate), dtype="<i2")
    ends = {}
    for (start, samples, r), (_, text) in zip(pieces, utterances, strict=True):
        assert r == rate, "espeak-ng wrote different sample rates"
        at = int(start * rate)
        timeline[at:at + len(samples)] = samples[: len(timeline) - at]
        ends[text] = start + len(samples) / rate
    raw = work / "timeline-raw.wav"
    with wave.open(str(raw), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(timeline.tobytes())
    subprocess.run([_require("sox"), "-R", str(raw), "-r", "48000", "-b", "16", "-c", "1", str(path)], check=True)
    return ends


def camera_y4m(path: Path, width: int = 1280, height: int = 720, frames: int = 10, fps: int = 10) -> Path:
    """A colourful moving test pattern (gradients and a bright square), I420, looped by Chromium."""
    x_grid = np.broadcast_to(np.arange(width), (height, width))
    cy, cx = np.mgrid[0:height // 2, 0:width // 2]
    with open(path, "wb") as out:
        out.write(f"YUV4MPEG2 W{width} H{height} F{fps}:1 Ip A1:1 C420jpeg\n".encode())
        for n in range(frames):
            luma = ((x_grid + 8 * n) * 255 // width).astype(np.uint8)
            left = (width // 4 + 20 * n) % (width - 200)
            luma[height // 3: height // 3 + 200, left:left + 200] = 235
            u = ((cx * 255) // (width // 2)).astype(np.uint8)
            v = ((cy * 255) // (height // 2)).astype(np.uint8)
            out.write(b"FRAME\n" + luma.tobytes() + u.tobytes() + v.tobytes())
    return path
