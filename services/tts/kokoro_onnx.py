"""Kokoro on ONNX Runtime (kokoro-onnx): the default off Apple Silicon.

A model run in progress is aborted the moment the request's cancel is set (``onnx_session``), so a barge-in
frees the engine without waiting for the sentence to finish rendering.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from services.tts.engine import CancelEvent
from services.tts.kokoro_base import KokoroBase
from services.tts.onnx_session import cpu_session


class KokoroOnnx(KokoroBase):
    """Kokoro on ONNX Runtime (kokoro-onnx): the CPU default."""

    name = "kokoro-onnx"

    def __init__(self, model_path: str | Path, voices_path: str | Path, threads: int | None = None,
                 spin_wait: bool = False, **options) -> None:
        from kokoro_onnx import Kokoro

        self._session = cpu_session(model_path, threads, spin_wait)
        self._kokoro = Kokoro.from_session(self._session, str(voices_path))
        super().__init__(list(self._kokoro.voices.keys()), self._kokoro.tokenizer, **options)

    @classmethod
    def from_folder(cls, folder: str | Path, **options) -> KokoroOnnx:
        """A folder holding one ``kokoro-*.onnx`` and one ``voices-*.bin`` (release or kit names)."""
        folder = Path(folder)
        models, voices = sorted(folder.glob("kokoro-*.onnx")), sorted(folder.glob("voices*.bin"))
        if not (models and voices):
            raise FileNotFoundError(f"{folder} needs a kokoro-*.onnx and a voices-*.bin file")
        return cls(models[0], voices[0], **options)

    def _render(self, phonemes: str, voice: str, speed: float, cancel: CancelEvent) -> np.ndarray:
        self._session.cancel = cancel
        try:
            audio, _ = self._kokoro.create(phonemes, voice, speed, is_phonemes=True, trim=True)
        except Exception:
            if cancel.is_set():  # the run was aborted on purpose
                return np.zeros(0, np.float32)
            raise
        return np.asarray(audio, np.float32)
