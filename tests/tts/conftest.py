"""Shared fixtures: the offline Kokoro kit (built once, cached), real engines, Silero VAD, and a watch on the ONNX
engine's model runs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tests.tts.speech import Vad
from tools.models import kokoro_kit


def _model_dir() -> Path:
    return Path(os.environ.get("SOTTO_MODEL_DIR") or Path.home() / ".cache" / "sotto" / "models")


@pytest.fixture(scope="session")
def kit() -> Path:
    """The offline kit in the model cache (what `make models-offline` builds); built if missing."""
    out = _model_dir() / "kokoro-kit"
    kokoro_kit.build(out)
    return out


@pytest.fixture(scope="session")
def onnx_engine(kit):
    from services.tts.kokoro_onnx import KokoroOnnx

    engine = KokoroOnnx.from_folder(kit / "onnx")
    engine.warmup()
    return engine


@pytest.fixture(scope="session")
def vad() -> Vad:
    return Vad()


class ModelRuns:
    """Stands in for the ONNX engine's onnxruntime session: says when a model run starts and how each ended
    ("finished", or "aborted" when onnxruntime stopped it), so a test can cancel during a run and see it cut."""

    def __init__(self, session) -> None:
        self._session = session
        self.started = threading.Event()
        self.outcomes: list[str] = []

    def __getattr__(self, name):
        return getattr(self._session, name)

    def run(self, *args, **kwargs):
        self.started.set()
        try:
            result = self._session.run(*args, **kwargs)
        except Exception:
            self.outcomes.append("aborted")
            raise
        self.outcomes.append("finished")
        return result


@pytest.fixture
def onnx_runs(onnx_engine, monkeypatch) -> ModelRuns:
    """The session's ONNX engine, watched for the length of one test."""
    runs = ModelRuns(onnx_engine._session._session)
    monkeypatch.setattr(onnx_engine._session, "_session", runs)
    return runs
