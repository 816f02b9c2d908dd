"""The MLX engine (mlx[cpu] here) on the kit's converted float weights. Slow: MLX's CPU backend runs Kokoro
many times slower than real time, so the texts are short."""

from __future__ import annotations

import pytest

from services.tts.engine import SAMPLE_RATE
from services.tts.kokoro_base import CHUNK_SAMPLES

pytestmark = pytest.mark.slow

TEXT = "Hello there, nice to meet you."
VOICE = "jf_alpha"


@pytest.fixture(scope="module")
def mlx_engine(kit):
    pytest.importorskip("mlx.core")
    pytest.importorskip("kokoro_mlx")
    from services.tts.kokoro_mlx import KokoroMlx

    return KokoroMlx(kit / "mlx", memory_fraction=0.5)


def test_mlx_speaks_and_matches_onnx_duration(mlx_engine, onnx_engine, vad):
    chunks = list(mlx_engine.synthesize(TEXT, VOICE, lang="en-us"))
    assert all(c.samples == CHUNK_SAMPLES for c in chunks if not c.last_in_sentence)
    report = vad.report(b"".join(c.pcm for c in chunks), SAMPLE_RATE)
    assert report.speech_fraction >= 0.6, report
    assert 1.0 <= report.duration_s <= 4.5, report
    onnx_seconds = sum(c.samples for c in onnx_engine.synthesize(TEXT, VOICE, lang="en-us")) / SAMPLE_RATE
    assert abs(report.duration_s - onnx_seconds) <= 0.25 * onnx_seconds, (report.duration_s, onnx_seconds)


def test_mlx_memory_limit_follows_the_budget(mlx_engine):
    assert mlx_engine.memory_limit > 0
