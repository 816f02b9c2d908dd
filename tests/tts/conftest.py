"""Shared fixtures: the offline Kokoro kit (built once, cached), real engines, Silero VAD."""

from __future__ import annotations

import os
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
    from services.tts.engine import KokoroOnnx

    engine = KokoroOnnx.from_folder(kit / "onnx")
    engine.warmup()
    return engine


@pytest.fixture(scope="session")
def vad() -> Vad:
    return Vad()
