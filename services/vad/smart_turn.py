"""Pipecat's smart-turn v3 end-of-turn model on ONNX Runtime: is the utterance complete, from its sound alone.

The model (``smart-turn-v3.2-cpu.onnx``, BSD-2-Clause, Daily) ships inside the ``pipecat-ai`` wheel; the vad
service never imports Pipecat: ``python -m tools.models.smart_turn`` (the Makefile's ``turn-model``) extracts the
one file into ``$SOTTO_MODEL_DIR/smart-turn/``. Input: the features of ``turn_features``; output: the probability
that the turn is complete (> 0.5: complete).
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort

from services.vad.turn_features import SAMPLE_RATE, input_features

MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
MODEL_SUBDIR = "smart-turn"
MODEL_SHA256 = "2bb026316b14a660486a75b1733cd3fbab8c2fd0314dc9af7be49f8cca967e4f"
COMPLETE_ABOVE = 0.5


def default_model_path(model_dir: Path) -> Path:
    return model_dir / MODEL_SUBDIR / MODEL_FILE


def missing_model_message(path: Path) -> str:
    return (f"the turn model {path} is missing: run `make turn-model` (python -m tools.models.smart_turn), set "
            "SOTTO_VAD_TURN_MODEL to the file, or SOTTO_VAD_SEMANTIC_TURN=false to end turns on silence alone")


class SmartTurn:
    """One ``InferenceSession`` with one intra-op thread: an 8 s window costs tens of ms, and a second thread only
    competes with the other services on a small machine (docs/performance.md)."""

    def __init__(self, model_path: str | os.PathLike, intra_op_threads: int = 1):
        self.model_path = Path(model_path)
        if not self.model_path.is_file():
            raise FileNotFoundError(missing_model_message(self.model_path))
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        self._session = ort.InferenceSession(str(self.model_path), sess_options=options,
                                             providers=["CPUExecutionProvider"])

    def completeness(self, audio: np.ndarray, sample_rate: int = SAMPLE_RATE) -> float:
        """Probability that float mono ``audio`` (the utterance up to now, any length) ends a complete turn."""
        if sample_rate != SAMPLE_RATE:
            raise ValueError(f"the turn model takes {SAMPLE_RATE} Hz audio, got {sample_rate} Hz")
        (probability,) = self._session.run(None, {"input_features": input_features(audio)})
        return float(np.asarray(probability).reshape(-1)[0])

    def warm_up(self) -> None:
        """One inference, so the first real verdict pays no allocation or graph set-up."""
        self.completeness(np.zeros(SAMPLE_RATE, dtype=np.float32))
