"""ONNX Runtime sessions as the tts engines run them: sized for a small shared machine, and abortable mid-run.

A model run in progress is aborted the moment the request's cancel is set (ONNX Runtime's run-level terminate
flag), so a barge-in frees the engine without waiting for the sentence to finish rendering.
"""

from __future__ import annotations

import os
from pathlib import Path

from services.tts.engine import CancelEvent
from services.tts.sentence_engine import NEVER_CANCELLED


class AbortableSession:
    """An onnxruntime session whose runs end at their next step once the current request's `cancel` is set.

    The model libraries (kokoro-onnx, piper) call `run` themselves, so the request's event is handed over as an
    attribute before each of their calls."""

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


def cpu_session(model_path: str | Path, threads: int | None = None, spin_wait: bool = False) -> AbortableSession:
    import onnxruntime as ort

    session_options = ort.SessionOptions()
    session_options.intra_op_num_threads = threads or os.cpu_count() or 1
    # ORT's own default spins idle threads between the steps of a run. The LLM decodes on the same cores
    # while the first sentence is synthesised, and a spinning thread holds a core the LLM needs, so on a
    # small machine the first audio comes later: off unless asked for (see docs/performance.md).
    session_options.add_session_config_entry("session.intra_op.allow_spinning", "1" if spin_wait else "0")
    # Every sentence has its own input length; ORT would cache a memory pattern for each one, so memory
    # would creep up with the variety of sentences spoken over a long session.
    session_options.enable_mem_pattern = False
    return AbortableSession(ort.InferenceSession(str(model_path), sess_options=session_options,
                                                 providers=["CPUExecutionProvider"]))
