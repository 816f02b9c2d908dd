"""The llm on a GPU: LiteRT-LM's WebGPU backend (Metal on a Mac, Vulkan on a Linux NVIDIA host).

CI has no GPU, so these skip there and say why. On a GPU machine, run them and the whole engine and service suite on
the GPU with `SOTTO_LLM_BACKEND=gpu .venv/bin/python -m pytest tests/llm -rs` (docs/gpu.md). Each kit model must
answer on the GPU as on the CPU: the same greedy tokens, by the rule the service's self-check applies at start.
"""

from __future__ import annotations

import pytest

from services.llm import gpu, selfcheck
from services.llm.engine import EngineConfig, GenerateRequest, LlmEngine, Sampling, TextDelta
from tests.llm.conftest import TINY_MM, TINY_TEXT, image_bytes

PROBE = gpu.probe()
pytestmark = pytest.mark.skipif(
    not PROBE.usable, reason=f"no usable GPU here ({PROBE.reason}); run by hand on a GPU machine: docs/gpu.md")

PROMPTS = ("What is the capital of France?", "Name three colours.", "Write a sentence about the sea.")
CHECK_TOKENS = EngineConfig.gpu_check_tokens


def test_auto_runs_the_model_and_the_vision_encoder_on_the_gpu(tmp_path, speech):
    engine = LlmEngine(EngineConfig(model_path=str(TINY_MM), cache_dir=str(tmp_path)))
    try:
        info = engine.info
        assert (info.backend, info.vision_backend, info.audio_backend) == ("gpu", "gpu", "cpu")
        assert info.backend_reason == f"{PROBE.device}; self-check passed: {CHECK_TOKENS} greedy tokens equal the CPU's"
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
        assert engine.info.backend == "gpu" and engine.gpu_check.passed
        *_, done = engine.generate(GenerateRequest(text="Hello.", sampling=Sampling.greedy(16)))
        assert done.decode_tokens > 0 and done.text
    finally:
        engine.close()


@pytest.fixture(params=["tiny-multimodal", "tiny-text", "smollm2-instruct"])
def kit_model(request):
    if request.param == "smollm2-instruct":
        return request.getfixturevalue("instruct_model")
    return {"tiny-multimodal": TINY_MM, "tiny-text": TINY_TEXT}[request.param]


def test_each_kit_model_answers_on_the_gpu_as_on_the_cpu(kit_model, tmp_path):
    """Unchecked GPU engine against the CPU engine: greedy replies to three prompts agree token for token."""
    replies = {}
    for backend in ("gpu", "cpu"):
        engine = LlmEngine(EngineConfig(model_path=str(kit_model), cache_dir=str(tmp_path / backend), backend=backend,
                                        gpu_check=False))
        try:
            assert engine.info.backend == backend
            replies[backend] = []
            for prompt in PROMPTS:
                *_, done = engine.generate(GenerateRequest(text=prompt, sampling=Sampling.greedy(CHECK_TOKENS)))
                replies[backend].append((done.text, engine.tokenize(done.text)))
        finally:
            engine.close()
    for prompt, (gpu_text, gpu_ids), (cpu_text, cpu_ids) in zip(PROMPTS, replies["gpu"], replies["cpu"]):
        assert gpu_text.strip() or not cpu_text.strip(), f"the GPU said nothing to {prompt!r} (the CPU said {cpu_text!r})"
        same, agreed = selfcheck.agreement(cpu_ids, gpu_ids, CHECK_TOKENS)
        assert same, f"{prompt!r}: the GPU left the CPU after {agreed} tokens: GPU {gpu_text!r}, CPU {cpu_text!r}"
