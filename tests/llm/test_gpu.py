"""The llm on a GPU: LiteRT-LM's WebGPU backend (Metal on a Mac, Vulkan on a Linux NVIDIA host).

CI has no GPU, so these skip there and say why. On a GPU machine, run them and the whole engine and service suite on
the GPU with `SOTTO_LLM_BACKEND=gpu .venv/bin/python -m pytest tests/llm` (docs/gpu.md).
"""

from __future__ import annotations

import pytest

from services.llm import gpu
from services.llm.engine import EngineConfig, GenerateRequest, LlmEngine, Sampling, TextDelta
from tests.llm.conftest import TINY_MM, TINY_TEXT, image_bytes

PROBE = gpu.probe()
pytestmark = pytest.mark.skipif(
    not PROBE.usable, reason=f"no usable GPU here ({PROBE.reason}); run by hand on a GPU machine: docs/gpu.md")


def test_auto_runs_the_model_and_the_vision_encoder_on_the_gpu(tmp_path, speech):
    engine = LlmEngine(EngineConfig(model_path=str(TINY_MM), cache_dir=str(tmp_path)))
    try:
        info = engine.info
        assert (info.backend, info.vision_backend, info.audio_backend) == ("gpu", "gpu", "cpu")
        assert info.backend_reason == PROBE.device
        plain = GenerateRequest(text="Describe.", sampling=Sampling.greedy(8))
        media = GenerateRequest(text="Describe.", audio=(speech("What colour is this?"),), images=(image_bytes(),),
                                sampling=Sampling.greedy(8))
        *_, text_only = engine.generate(plain)
        *deltas, with_media = engine.generate(media)
        assert with_media.prefill_tokens > text_only.prefill_tokens + 50  # the audio and the image were encoded
        assert any(isinstance(d, TextDelta) and d.text for d in deltas)
    finally:
        engine.close()


def test_an_explicit_gpu_serves_a_text_model(tmp_path):
    engine = LlmEngine(EngineConfig(model_path=str(TINY_TEXT), cache_dir=str(tmp_path), backend="gpu"))
    try:
        assert engine.info.backend == "gpu"
        *_, done = engine.generate(GenerateRequest(text="Hello.", sampling=Sampling.greedy(16)))
        assert done.decode_tokens > 0 and done.text
    finally:
        engine.close()
