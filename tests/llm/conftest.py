"""Fixtures for the llm engine tests: the real LiteRT-LM engine on the tiny Gemma-4-shaped fixture,
speech synthesised by espeak-ng at test time, and small JPEG/PNG images made with Pillow.

The tiny model (tests/fixtures/models/tiny-gemma4-mm.litertlm, 2.9 MB) has seeded random weights: its
words are gibberish, but it runs the real audio and vision encoders; tiny-gemma4-text.litertlm is the
same model without encoders. Rebuild both (1-2 minutes each, in the kit's venv, see
tools/models/requirements-llm.txt) with
`python -m tools.models.llm_kit --out tests/fixtures/models --which tiny --force` and `--which tiny-text`.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from services.common.audio import wav_bytes
from services.llm import gpu
from tools.speech import speak

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"
TINY_MM = FIXTURES / "tiny-gemma4-mm.litertlm"
TINY_TEXT = FIXTURES / "tiny-gemma4-text.litertlm"
# SOTTO_LLM_BACKEND=gpu runs these tests on a GPU machine (docs/gpu.md); CI has none, so `auto` means the CPU there.
BACKEND = os.environ.get("SOTTO_LLM_BACKEND", "auto")
LIVE_GPU = gpu.probe().usable
EXPECTED_BACKEND = "gpu" if BACKEND != "cpu" and LIVE_GPU else "cpu"


@pytest.fixture(scope="session")
def tiny_engine(tmp_path_factory):
    from services.llm.engine import EngineConfig, LlmEngine

    engine = LlmEngine(EngineConfig(model_path=str(TINY_MM), backend=BACKEND,
                                    cache_dir=str(tmp_path_factory.mktemp("litert-cache"))))
    engine.warmup()
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_text_engine(tmp_path_factory):
    from services.llm.engine import EngineConfig, LlmEngine

    engine = LlmEngine(EngineConfig(model_path=str(TINY_TEXT), backend=BACKEND,
                                    cache_dir=str(tmp_path_factory.mktemp("litert-cache"))))
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def speech(tmp_path_factory):
    """speech(text) -> WAV bytes (PCM16 mono 16 kHz, espeak-ng through the shared fixture), cached per text."""
    folder = tmp_path_factory.mktemp("speech")
    cache: dict[str, bytes] = {}

    def make(text: str) -> bytes:
        if text not in cache:
            pcm = speak(text, "en-us", 16000, folder).astype("<i2").tobytes()
            cache[text] = wav_bytes(pcm, 16000)
        return cache[text]

    return make


def wav_seconds(data: bytes) -> float:
    import wave

    with wave.open(io.BytesIO(data)) as wav:
        return wav.getnframes() / wav.getframerate()


def image_bytes(fmt: str = "JPEG", size=(320, 240), color=(200, 40, 40)) -> bytes:
    from PIL import Image, ImageDraw

    image = Image.new("RGB", size, color)
    ImageDraw.Draw(image).ellipse((size[0] // 4, size[1] // 4, size[0] * 3 // 4, size[1] * 3 // 4), fill=(20, 20, 220))
    buffer = io.BytesIO()
    image.save(buffer, fmt)
    return buffer.getvalue()
