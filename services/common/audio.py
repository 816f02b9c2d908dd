"""Audio helpers every service shares: PCM16 <-> float32 and WAV files held in memory."""

from __future__ import annotations

import io
import wave
from dataclasses import dataclass

import numpy as np

# The speech rate of the system: what the page sends, the vad and the asr hear and the llm's audio input takes
# (PCM16 mono). Defined here once; session.start's and the Realtime API's 16 kHz say the same.
SPEECH_RATE = 16000
# Silero VAD decides once per window of this many samples at each rate it accepts (the model's design).
VAD_WINDOW_SAMPLES = {16000: 512, 8000: 256}


def pcm16_to_float(pcm: bytes) -> np.ndarray:
    """Little-endian signed 16-bit PCM to float32 in [-1, 1)."""
    if len(pcm) % 2:
        raise ValueError(f"PCM16 needs an even number of bytes, got {len(pcm)}")
    return np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0


def float_to_pcm16(samples: np.ndarray) -> bytes:
    """float in [-1, 1] to little-endian PCM16, clipping what is outside."""
    clipped = np.clip(np.asarray(samples, dtype=np.float32), -1.0, 32767.0 / 32768.0)
    return (clipped * 32768.0).round().astype("<i2").tobytes()


def wav_bytes(pcm: bytes, sample_rate: int, channels: int = 1) -> bytes:
    """Wrap PCM16 in a WAV container, in memory."""
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm)
    return buf.getvalue()


@dataclass(frozen=True)
class WavInfo:
    sample_rate: int
    channels: int
    sample_width: int
    frames: int
    pcm: bytes

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate if self.sample_rate else 0.0


def read_wav(data: bytes) -> WavInfo:
    """Parse a WAV held in memory; raises ValueError with the reason when it is not a readable PCM WAV."""
    try:
        with wave.open(io.BytesIO(data), "rb") as w:
            frames = w.getnframes()
            return WavInfo(w.getframerate(), w.getnchannels(), w.getsampwidth(), frames, w.readframes(frames))
    except (wave.Error, EOFError) as exc:
        raise ValueError(f"not a PCM WAV file ({exc})") from None
