"""The smart-turn model's input: Whisper-style log-mel features of the utterance's last 8 s, in numpy.

The recipe is the one the model was trained with (transformers' ``WhisperFeatureExtractor`` with
``chunk_length=8``, as Pipecat's smart-turn v3 computes it): the last 8 s at 16 kHz, left-padded with zeros,
normalised to zero mean and unit variance, a reflect-padded STFT (periodic Hann 400, hop 160, power), 80 Slaney
mel bands over 0-8 kHz, log10, the last frame dropped, clamped at max - 8 and scaled by (x + 4) / 4.
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

SAMPLE_RATE = 16000
WINDOW_S = 8
WINDOW_SAMPLES = SAMPLE_RATE * WINDOW_S
N_FFT = 400
HOP = 160
N_MELS = 80
FRAMES = WINDOW_SAMPLES // HOP  # 800


def _hz_to_mel(hz: np.ndarray) -> np.ndarray:
    """Slaney's mel scale: linear below 1 kHz, logarithmic above."""
    hz = np.asarray(hz, dtype=np.float64)
    log_step = 27.0 / np.log(6.4)
    return np.where(hz < 1000.0, 3.0 * hz / 200.0, 15.0 + np.log(np.maximum(hz, 1e-9) / 1000.0) * log_step)


def _mel_to_hz(mel: np.ndarray) -> np.ndarray:
    mel = np.asarray(mel, dtype=np.float64)
    log_step = np.log(6.4) / 27.0
    return np.where(mel < 15.0, 200.0 * mel / 3.0, 1000.0 * np.exp(log_step * (mel - 15.0)))


def mel_filters(n_mels: int = N_MELS, n_fft: int = N_FFT, rate: int = SAMPLE_RATE) -> np.ndarray:
    """Slaney-normalised triangular filters, shape (n_fft // 2 + 1, n_mels)."""
    edges = _mel_to_hz(np.linspace(_hz_to_mel(0.0), _hz_to_mel(rate / 2), n_mels + 2))
    bins = np.linspace(0, rate // 2, n_fft // 2 + 1)
    slopes = edges[None, :] - bins[:, None]
    widths = np.diff(edges)
    down = -slopes[:, :-2] / widths[:-1]
    up = slopes[:, 2:] / widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    return filters * (2.0 / (edges[2:] - edges[:-2]))[None, :]  # equal area per band


_FILTERS = mel_filters()
_HANN = np.hanning(N_FFT + 1)[:-1]  # periodic, as torch.hann_window


def last_window(audio: np.ndarray) -> np.ndarray:
    """The last 8 s of float audio at 16 kHz, left-padded with zeros to exactly 8 s."""
    if audio.ndim != 1:
        raise ValueError(f"audio must be 1-D (mono), got shape {audio.shape}")
    audio = audio[-WINDOW_SAMPLES:].astype(np.float32)
    return np.pad(audio, (WINDOW_SAMPLES - len(audio), 0))


def input_features(audio: np.ndarray) -> np.ndarray:
    """float32 [1, 80, 800] for ``input_features``, from float mono audio at 16 kHz in [-1, 1)."""
    x = last_window(audio)
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x.astype(np.float64), N_FFT // 2, mode="reflect")
    frames = sliding_window_view(padded, N_FFT)[::HOP]
    power = np.abs(np.fft.rfft(frames * _HANN, axis=-1)) ** 2
    log_mel = np.log10(np.maximum(power @ _FILTERS, 1e-10)).T[:, :-1]
    log_mel = np.maximum(log_mel, log_mel.max() - 8.0)
    return ((log_mel + 4.0) / 4.0).astype(np.float32)[None]
