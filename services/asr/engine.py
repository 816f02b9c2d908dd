"""faster-whisper (CTranslate2, int8 on the CPU): 16 kHz float32 audio in, the words out. No gRPC.

The audio is handed over as a numpy array, so faster-whisper's own decoding (PyAV) is never used at run time.
Whisper encodes a fixed 30 s window whatever the clip's length, so a run's cost is the encoder plus one decoder
step per output token; `prefix` forces the words already known, whose tokens then cost one batched step instead
of one step each (services.asr.streaming uses it for the stable prefix).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from faster_whisper import WhisperModel

SAMPLE_RATE = 16000  # what Whisper's feature extractor is built for
_WARM_UP_S = 1.0
logging.getLogger("faster_whisper").setLevel(logging.WARNING)  # it logs every clip's duration at INFO


@dataclass(frozen=True)
class EngineSettings:
    threads: int        # CTranslate2 intra-op threads (0: all cores)
    beam_size: int
    language: str       # default language code, e.g. "en"
    max_audio_s: float  # longest clip accepted


@dataclass(frozen=True)
class Recognition:
    text: str
    audio_s: float
    seconds: float      # wall time of the run


class WhisperEngine:
    """One loaded Whisper model. Not thread-safe by contract: the service runs it on one worker thread."""

    def __init__(self, model_dir: Path, settings: EngineSettings) -> None:
        self.model_dir = model_dir
        self.settings = settings
        self._model = WhisperModel(str(model_dir), device="cpu", compute_type="int8", cpu_threads=settings.threads,
                                   num_workers=1, local_files_only=True)
        self.english_only = not self._model.model.is_multilingual

    def check(self, seconds: float, language: str = "") -> None:
        """Raise ValueError naming what is accepted when a clip this long or the language cannot be recognised."""
        if seconds > self.settings.max_audio_s:
            raise ValueError(f"{seconds:.1f} s of audio is over the {self.settings.max_audio_s:g} s limit "
                             "(SOTTO_ASR_MAX_AUDIO_S)")
        if language and self.english_only and language != "en":
            raise ValueError(f"the model {self.model_dir.name} is English-only: language must be 'en' or empty, "
                             f"got {language!r}")

    def transcribe(self, samples: np.ndarray, *, prefix: str = "", language: str = "") -> Recognition:
        """The words of `samples` (float32 mono at 16 kHz), beginning with `prefix` when one is given."""
        self.check(len(samples) / SAMPLE_RATE, language)
        started = time.monotonic()
        segments, _info = self._model.transcribe(
            samples, language=language or self.settings.language or None, beam_size=self.settings.beam_size,
            prefix=prefix or None, without_timestamps=True, condition_on_previous_text=False,
            vad_filter=False, temperature=0.0)
        text = " ".join(segment.text.strip() for segment in segments).strip()  # the generator runs the model
        return Recognition(text, len(samples) / SAMPLE_RATE, time.monotonic() - started)

    def warm_up(self) -> None:
        """One run on a tone, so the first request pays no allocation or lazy initialisation."""
        t = np.arange(int(_WARM_UP_S * SAMPLE_RATE), dtype=np.float32) / SAMPLE_RATE
        self.transcribe((0.1 * np.sin(2 * np.pi * 220.0 * t)).astype(np.float32))
