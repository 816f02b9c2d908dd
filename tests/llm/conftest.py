"""Fixtures for the llm engine tests: the real LiteRT-LM engine on the tiny Gemma-4-shaped fixture,
speech synthesised by espeak-ng at test time, and small JPEG/PNG images made with Pillow.

The tiny model (tests/fixtures/models/tiny-gemma4-mm.litertlm) has random weights: its words are
gibberish, but it runs the real audio and vision encoders. Rebuild it with
`python -m tools.models.llm_kit --out tests/fixtures/models --which tiny --force` (about a minute).
"""

from __future__ import annotations

import io
import shutil
import subprocess
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "models"
TINY_MM = FIXTURES / "tiny-gemma4-mm.litertlm"
TINY_TEXT = FIXTURES / "tiny-gemma4-text.litertlm"


@pytest.fixture(scope="session")
def tiny_engine(tmp_path_factory):
    from services.llm.engine import EngineConfig, LlmEngine

    engine = LlmEngine(EngineConfig(model_path=str(TINY_MM), cache_dir=str(tmp_path_factory.mktemp("litert-cache"))))
    engine.warmup()
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def tiny_text_engine(tmp_path_factory):
    from services.llm.engine import EngineConfig, LlmEngine

    engine = LlmEngine(EngineConfig(model_path=str(TINY_TEXT), cache_dir=str(tmp_path_factory.mktemp("litert-cache"))))
    yield engine
    engine.close()


def _speak(text: str, out: Path, rate: int = 16000) -> bytes:
    """espeak-ng speaks `text`; sox makes it PCM16 mono at `rate`."""
    if not shutil.which("espeak-ng") or not shutil.which("sox"):
        pytest.fail("speech fixtures need espeak-ng and sox: apt-get install -y espeak-ng sox")
    raw = out.with_suffix(".raw.wav")
    subprocess.run(["espeak-ng", "-w", str(raw), text], check=True)
    subprocess.run(["sox", str(raw), "-r", str(rate), "-c", "1", "-b", "16", str(out)], check=True)
    return out.read_bytes()


@pytest.fixture(scope="session")
def speech(tmp_path_factory):
    """speech(text) -> WAV bytes (PCM16 mono 16 kHz), cached per text."""
    folder = tmp_path_factory.mktemp("speech")
    cache: dict[str, bytes] = {}

    def make(text: str) -> bytes:
        if text not in cache:
            cache[text] = _speak(text, folder / f"utt{len(cache)}.wav")
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
