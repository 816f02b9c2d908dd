"""Kokoro on ONNX Runtime (kokoro-onnx): the default off Apple Silicon.

A model run in progress is aborted the moment the request's cancel is set (ONNX Runtime's run-level
terminate flag), so a barge-in frees the engine without waiting for the sentence to finish rendering.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from services.tts.engine import CancelEvent
from services.tts.kokoro_base import NEVER_CANCELLED, KokoroBase


class _AbortableSession:
    """An onnxruntime session whose runs end at their next step once the current request's `cancel` is set.

    kokoro-onnx calls `run` itself, so the request's event is handed over as an attribute before each create."""

    def __init__(self, session) -> None:
        self._session = session
        self.cancel: CancelEvent = NEVER_CANCELLED

    def __getattr__(self, name):
        return getattr(self._session, name)

    def run(self, output_names, input_feed, run_options=None):
        import onnxruntime as ort

        options = ort.RunOptions()
        with self.cancel.calling(lambda: setattr(options, "terminate", True)):
            return self._session.run(output_names, input_feed, options)


class KokoroOnnx(KokoroBase):
    """Kokoro on ONNX Runtime (kokoro-onnx): the CPU default."""

    name = "kokoro-onnx"

    def __init__(self, model_path: str | Path, voices_path: str | Path, threads: int | None = None,
                 spin_wait: bool = False, **options) -> None:
        import onnxruntime as ort
        from kokoro_onnx import Kokoro

        session_options = ort.SessionOptions()
        session_options.intra_op_num_threads = threads or os.cpu_count() or 1
        # ORT's own default spins idle threads between the steps of a run. The LLM decodes on the same cores
        # while the first sentence is synthesised, and a spinning thread holds a core the LLM needs, so on a
        # small machine the first audio comes later: off unless asked for (see docs/performance.md).
        session_options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_wait else "0")
        # Every sentence has its own input length; ORT would cache a memory pattern for each one, so memory
        # would creep up with the variety of sentences spoken over a long session.
        session_options.enable_mem_pattern = False
        session = ort.InferenceSession(str(model_path), sess_options=session_options,
                                       providers=["CPUExecutionProvider"])
        self._session = _AbortableSession(session)
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
