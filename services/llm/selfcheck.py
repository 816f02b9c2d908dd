"""The GPU self-check: before the llm serves on a GPU, its short greedy reply must equal the CPU's.

Why: a GPU path can load, run, and still be wrong. With LiteRT-LM's GPU default of fp16 activations SmolLM2-135M
emits `<|endoftext|>` (its token 0) at every step, and the service would report SERVING and answer nothing. The CPU
(XNNPACK, fp32 activations) is the reference.

The rule: one fixed prompt, greedy decoding, `tokens` new tokens on each backend; the two replies, tokenized by the
model's own tokenizer, must be identical over their first `tokens` tokens (a reply that stops early must stop at the
same place). The CPU's reply depends only on the model file, the runtime and the prompt, so it is cached in the
engine's cache folder: a restart loads the CPU engine only when the model file changed.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import json
import logging
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from services.llm.conversations import close_quietly

_LOGGER = logging.getLogger(__name__)

PROMPT = "What is the capital of France? Answer in one sentence."


@dataclasses.dataclass(frozen=True)
class CheckResult:
    passed: bool
    tokens: int  # how many leading tokens must agree
    agreed: int  # how many leading tokens did
    gpu_text: str
    cpu_text: str
    gpu_seconds: float
    cpu_seconds: float  # 0.0 when the CPU's reply came from the cache
    cached_reference: bool

    def describe(self) -> str:
        if self.passed:
            return f"self-check passed: {self.tokens} greedy tokens equal the CPU's"
        return (f"self-check failed: the GPU's greedy reply leaves the CPU's after {self.agreed} of {self.tokens} "
                f"tokens (GPU {self.gpu_text!r}, CPU {self.cpu_text!r})")


def agreement(cpu_ids: Sequence[int], gpu_ids: Sequence[int], tokens: int) -> tuple[bool, int]:
    """(identical over the first `tokens` tokens, how many leading tokens agree)."""
    cpu, gpu = list(cpu_ids[:tokens]), list(gpu_ids[:tokens])
    agreed = 0
    for a, b in zip(cpu, gpu):
        if a != b:
            break
        agreed += 1
    return cpu == gpu, agreed


def greedy_reply(lm: Any, engine: Any, prompt: str, tokens: int) -> str:
    """The greedy reply of at most `tokens` tokens to `prompt` alone (no system prompt, no history)."""
    sampler = lm.SamplerConfig(top_k=1, top_p=1.0, temperature=0.0, seed=0)
    conversation = engine.create_conversation(sampler_config=sampler)
    try:
        parts = []
        for message in conversation.send_message_async({"role": "user", "content": prompt},
                                                       max_output_tokens=tokens):
            parts.append("".join(c.text for c in message.contents.contents if hasattr(c, "text")))
        return "".join(parts)
    finally:
        close_quietly(conversation)


def _reference_file(cache_dir: Path, model_path: Path, prompt: str, tokens: int) -> Path:
    stat = model_path.stat()
    try:
        runtime = importlib.metadata.version("litert-lm-api")
    except importlib.metadata.PackageNotFoundError:
        runtime = "unknown"
    key = json.dumps([str(model_path.resolve()), stat.st_size, stat.st_mtime_ns, runtime, prompt, tokens])
    return cache_dir / f"gpu-check-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


@dataclasses.dataclass(frozen=True)
class Reference:
    text: str
    seconds: float
    cached: bool


def cpu_reference(lm: Any, model_path: Path, cache_dir: Path, open_cpu_engine: Callable[[], Any], tokens: int,
                  prompt: str = PROMPT) -> Reference:
    """The CPU's greedy reply, from the cache or from a CPU engine opened (and closed) for it."""
    stored = _reference_file(cache_dir, model_path, prompt, tokens)
    try:
        return Reference(json.loads(stored.read_text())["text"], 0.0, True)
    except (OSError, ValueError, KeyError, TypeError):
        pass
    started = time.monotonic()
    engine = open_cpu_engine()
    try:
        text = greedy_reply(lm, engine, prompt, tokens)
    finally:
        engine.close()
    seconds = time.monotonic() - started
    try:
        stored.write_text(json.dumps({"text": text, "prompt": prompt, "tokens": tokens}))
    except OSError as exc:  # a read-only cache costs a CPU load per start, nothing else
        _LOGGER.warning("gpu_check_cache_unwritable", extra={"path": str(stored), "error": str(exc)})
    return Reference(text, seconds, False)


def compare(lm: Any, gpu_engine: Any, reference: Reference, tokens: int, prompt: str = PROMPT) -> CheckResult:
    """Run the prompt on the GPU engine and hold its reply against the CPU's."""
    started = time.monotonic()
    text = greedy_reply(lm, gpu_engine, prompt, tokens)
    seconds = time.monotonic() - started
    passed, agreed = agreement(gpu_engine.tokenize(reference.text), gpu_engine.tokenize(text), tokens)
    return CheckResult(passed, tokens, agreed, text, reference.text, seconds, reference.seconds, reference.cached)


def main_report(model: str | None, probe: Any) -> int:
    """`python -m services.llm.gpu`: load the model as the llm service would, on the GPU, and print the check."""
    from services.common import config
    from services.llm.engine import LlmEngine
    from services.llm.errors import LlmError
    from services.llm.loading import engine_config, resolve_model

    llm, common = config.load(config.LlmConfig), config.load(config.CommonConfig)
    path = Path(model) if model else resolve_model(llm, common)[0]
    cfg = dataclasses.replace(engine_config(llm, common, path), backend="gpu", gpu_check=True)
    print(f"model: {path}\nGPU activations: {cfg.gpu_activations}; check: {cfg.gpu_check_tokens} greedy tokens of "
          f"{PROMPT!r} on the GPU and the CPU", flush=True)
    try:
        engine = LlmEngine(cfg)
    except LlmError as exc:
        print(f"self-check: FAILED: {exc}", flush=True)
        return 1
    try:
        print(f"self-check: {engine.info.backend_reason}\nloaded in {engine.load_seconds:.2f} s", flush=True)
        if engine.gpu_check is not None:
            check = engine.gpu_check
            print(f"GPU reply: {check.gpu_text!r} ({check.gpu_seconds:.2f} s)\nCPU reply: {check.cpu_text!r} "
                  f"({'cached' if check.cached_reference else f'{check.cpu_seconds:.2f} s'})", flush=True)
    finally:
        engine.close()
    return 0
