"""The GPU self-check decides where the llm serves: `auto` serves on the CPU (and says why) when the GPU's greedy
reply differs from the CPU's, an explicit `gpu` stops with an error naming the check, and a GPU that agrees serves.

CI has no GPU, so the "GPU" here is a fake: the probe reports one and the engine asked for it runs on the CPU (the
real model, the real LiteRT-LM). A failing GPU is made by a CPU reference that disagrees. The real comparison, on a
real GPU for every kit model, is tests/llm/test_gpu.py.
"""

from __future__ import annotations

import logging

import pytest

from services.llm import gpu, selfcheck
from services.llm.engine import EngineConfig, GenerateRequest, LlmEngine, Sampling
from services.llm.errors import EngineError
from tests.llm.conftest import TINY_TEXT

FAKE = gpu.GpuProbe(True, device="Fake GPU (Vulkan)")


@pytest.fixture
def fake_gpu(monkeypatch):
    """A probe that finds a GPU, and an engine whose 'gpu' backend is the CPU; records the backends loaded."""
    loaded: list[str] = []
    monkeypatch.setattr(gpu, "probe", lambda: FAKE)
    real_backend = LlmEngine._backend

    def backend(self, name, threads):
        loaded.append(name)
        return real_backend(self, "cpu" if name == "gpu" else name, threads)

    monkeypatch.setattr(LlmEngine, "_backend", backend)
    return loaded


@pytest.fixture
def disagreeing_cpu(monkeypatch):
    """The CPU's reference reply is something the model never says: the check must fail."""
    monkeypatch.setattr(selfcheck, "cpu_reference",
                        lambda *a, **k: selfcheck.Reference("Zebras zigzag quietly.", 0.0, False))


def _engine(tmp_path, backend: str, **options) -> LlmEngine:
    return LlmEngine(EngineConfig(model_path=str(TINY_TEXT), cache_dir=str(tmp_path), backend=backend, **options))


def test_the_agreement_rule_is_identical_leading_tokens():
    assert selfcheck.agreement([1, 2, 3, 4], [1, 2, 3, 4], 4) == (True, 4)
    assert selfcheck.agreement([1, 2, 3, 4, 5], [1, 2, 3, 4, 9], 4) == (True, 4)  # beyond the checked tokens
    assert selfcheck.agreement([1, 2, 3, 4], [1, 2, 7, 4], 4) == (False, 2)
    assert selfcheck.agreement([1, 2], [1, 2, 3], 4) == (False, 2)  # one stopped early, the other did not
    assert selfcheck.agreement([0] * 8, [5, 6], 8) == (False, 0)


def test_auto_serves_on_a_gpu_that_agrees_with_the_cpu(tmp_path, fake_gpu):
    engine = _engine(tmp_path, "auto")
    try:
        assert engine.info.backend == "gpu"
        assert engine.info.backend_reason == f"{FAKE.device}; self-check passed: 8 greedy tokens equal the CPU's"
        assert fake_gpu == ["cpu", "gpu"]  # the CPU's reply first, then the model on the GPU
        check = engine.gpu_check
        assert check.passed and check.gpu_text == check.cpu_text and not check.cached_reference
        *_, done = engine.generate(GenerateRequest(text="Hello.", sampling=Sampling.greedy(4)))
        assert done.decode_tokens > 0
    finally:
        engine.close()


def test_the_cpu_reply_is_cached_so_a_restart_loads_only_the_gpu(tmp_path, fake_gpu):
    _engine(tmp_path, "auto").close()
    fake_gpu.clear()
    engine = _engine(tmp_path, "auto")
    try:
        assert fake_gpu == ["gpu"]
        assert engine.gpu_check.passed and engine.gpu_check.cached_reference
    finally:
        engine.close()


def test_auto_serves_on_the_cpu_when_the_gpu_disagrees_and_says_why(tmp_path, fake_gpu, disagreeing_cpu, caplog):
    with caplog.at_level(logging.WARNING, logger="services.llm.engine"):
        engine = _engine(tmp_path, "auto")
    try:
        assert engine.info.backend == "cpu"
        reason = engine.info.backend_reason
        assert reason.startswith(f"the GPU ({FAKE.device}) was not used: the GPU failed the self-check")
        assert "SOTTO_LLM_GPU_ACTIVATIONS=fp32" in reason and "'Zebras zigzag quietly.'" in reason
        assert any(r.levelno == logging.WARNING and "llm backend: cpu" in r.getMessage() for r in caplog.records)
        assert fake_gpu == ["gpu", "cpu"]
    finally:
        engine.close()


def test_an_explicit_gpu_that_fails_the_check_is_an_error_naming_it(tmp_path, fake_gpu, disagreeing_cpu):
    with pytest.raises(EngineError, match=r"the GPU failed the self-check .*self-check failed: the GPU's greedy reply "
                                          r"leaves the CPU's after 0 of 8 tokens"):
        _engine(tmp_path, "gpu")


def test_the_check_can_be_turned_off(tmp_path, fake_gpu, disagreeing_cpu):
    engine = _engine(tmp_path, "gpu", gpu_check=False)
    try:
        assert engine.info.backend == "gpu" and engine.gpu_check is None
        assert engine.info.backend_reason.endswith("self-check off (SOTTO_LLM_GPU_CHECK=false)")
    finally:
        engine.close()
