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


def _greedy(model, backend: str, activations: str, prompts, cache) -> list[tuple[str, list[int]]]:
    engine = LlmEngine(EngineConfig(model_path=str(model), cache_dir=str(cache), backend=backend,
                                    gpu_activations=activations, gpu_check=False))
    try:
        assert engine.info.backend == backend
        replies = []
        for prompt in prompts:
            *_, done = engine.generate(GenerateRequest(text=prompt, sampling=Sampling.greedy(CHECK_TOKENS)))
            replies.append((done.text, engine.tokenize(done.text)))
        return replies
    finally:
        engine.close()


def test_each_kit_model_answers_on_the_gpu_as_on_the_cpu(kit_model, tmp_path):
    """Unchecked engines, the service's GPU settings: on the self-check's prompt the GPU's first greedy tokens equal
    the CPU's (the rule `auto` applies at start); on other prompts the GPU gives a real reply wherever the CPU does
    (text, none of the model's special tokens). Exact agreement is not asked there: the two backends compute with
    different arithmetic, and a 135M model's greedy choice at a near-tie can go either way (docs/gpu.md)."""
    prompts = (selfcheck.PROMPT, *PROMPTS)
    gpu_replies = _greedy(kit_model, "gpu", EngineConfig.gpu_activations, prompts, tmp_path / "gpu")
    cpu_replies = _greedy(kit_model, "cpu", EngineConfig.gpu_activations, prompts, tmp_path / "cpu")
    (gpu_text, gpu_ids), (cpu_text, cpu_ids) = gpu_replies[0], cpu_replies[0]
    same, agreed = selfcheck.agreement(cpu_ids, gpu_ids, CHECK_TOKENS)
    assert same, f"the check prompt: the GPU left the CPU after {agreed} tokens: GPU {gpu_text!r}, CPU {cpu_text!r}"
    for prompt, (gpu_text, _), (cpu_text, _) in zip(prompts, gpu_replies, cpu_replies):
        if cpu_text.strip() and "<|" not in cpu_text:
            assert gpu_text.strip() and "<|" not in gpu_text, f"{prompt!r}: GPU {gpu_text!r}, CPU {cpu_text!r}"


def test_fp16_activations_are_caught_where_they_break_smollm2(instruct_model, tmp_path):
    """LiteRT-LM's own GPU default (fp16 activations) makes SmolLM2 emit <|endoftext|> at every step on an H100:
    the self-check must refuse it (auto then serves on the CPU, and says why). On a GPU where fp16 computes this model
    right, the check passes and the GPU serves: either way the service never answers with garbage."""
    engine = LlmEngine(EngineConfig(model_path=str(instruct_model), cache_dir=str(tmp_path), gpu_activations="fp16"))
    try:
        check = engine.gpu_check
        assert check is not None and check.cpu_text.strip()
        if check.passed:
            assert engine.info.backend == "gpu" and check.gpu_text == check.cpu_text
        else:
            assert engine.info.backend == "cpu"
            assert "the GPU failed the self-check (SOTTO_LLM_GPU_ACTIVATIONS=fp16)" in engine.info.backend_reason
        *_, done = engine.generate(GenerateRequest(text=selfcheck.PROMPT, sampling=Sampling.greedy(12)))
        assert "<|" not in done.text and "paris" in done.text.lower(), done.text
    finally:
        engine.close()
