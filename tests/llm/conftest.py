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
import subprocess
import sys
from pathlib import Path

import pytest

from services.common.audio import wav_bytes
from services.llm import gpu
from tools.speech import speak

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "models"
TINY_MM = FIXTURES / "tiny-gemma4-mm.litertlm"
TINY_TEXT = FIXTURES / "tiny-gemma4-text.litertlm"
# SOTTO_LLM_BACKEND=gpu runs these tests on a GPU machine (docs/gpu.md); CI has none, so `auto` means the CPU there.
BACKEND = os.environ.get("SOTTO_LLM_BACKEND", "auto")
LIVE_GPU = gpu.probe().usable
EXPECTED_BACKEND = "gpu" if BACKEND != "cpu" and LIVE_GPU else "cpu"


# The instruction-tuned offline model (SmolLM2-135M-Instruct, tools/models/llm_kit.py `instruct`).
INSTRUCT_NAME = "smollm2-135m-instruct-p64.litertlm"
KIT_OUT = Path(os.environ.get("SOTTO_MODEL_DIR") or Path.home() / ".cache" / "sotto" / "models") / "offline"


def _kit_python() -> str:
    explicit = os.environ.get("SOTTO_LLM_KIT_PYTHON")
    if explicit:
        return explicit
    local = ROOT / ".venv-models" / "bin" / "python"
    return str(local) if local.exists() else sys.executable


@pytest.fixture(scope="session")
def instruct_model() -> Path:
    """SOTTO_LLM_INSTRUCT_MODEL, or the kit's output (built with the kit's Python when missing)."""
    explicit = os.environ.get("SOTTO_LLM_INSTRUCT_MODEL")
    model = Path(explicit) if explicit else KIT_OUT / INSTRUCT_NAME
    if not model.exists():
        python = _kit_python()
        build = subprocess.run(
            [python, "-m", "tools.models.llm_kit", "--out", str(model.parent), "--which", "instruct"],
            cwd=ROOT, capture_output=True, text=True, timeout=1800, check=False,
        )
        if build.returncode != 0:
            pytest.fail(
                f"building the instruct model with {python} failed; install the kit with "
                f"`pip install -r tools/models/requirements-llm.txt` (torch==2.13.0 first) into a venv and set "
                f"SOTTO_LLM_KIT_PYTHON to its python:\n{build.stderr[-2000:]}"
            )
    return model


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
