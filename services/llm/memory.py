"""Fit a model and its KV cache into a memory budget, and read the process's resident memory.

The estimate is deliberately simple: the model file is mapped whole, and the KV cache costs a fixed
number of bytes per context token. LiteRT-LM does not expose the layer shapes, so that per-token
cost is a parameter; the default (64 KiB) is an upper bound for the models Sotto ships (Gemma 4
E2B shares the KV of 20 of its 35 layers and keeps about 40 KiB per token in float32).
"""

from __future__ import annotations

import dataclasses
import os
import sys

from services.common import config
from services.llm.errors import MemoryBudgetError

_COMMON = config.CommonConfig()  # the settings' defaults: the one place they are written

DEFAULT_KV_BYTES_PER_TOKEN = 64 * 1024
MIN_CONTEXT_TOKENS = 512
_CONTEXT_STEP = 256
_MB = 1024 * 1024


@dataclasses.dataclass(frozen=True)
class MemoryPlan:
    context_tokens: int
    model_bytes: int
    kv_bytes: int
    budget_bytes: int
    total_bytes: int
    lowered: bool  # the context was cut from what was asked to fit the budget

    def describe(self) -> str:
        return (
            f"model {self.model_bytes / _MB:.0f} MB + KV cache {self.kv_bytes / _MB:.0f} MB "
            f"({self.context_tokens} tokens) within budget {self.budget_bytes / _MB:.0f} MB "
            f"of {self.total_bytes / _MB:.0f} MB"
        )


def total_memory_bytes() -> int:
    """Physical memory (unified memory on Apple Silicon)."""
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def process_rss_bytes() -> int:
    """Resident set size of this process, now (not the peak)."""
    try:
        import psutil

        return psutil.Process().memory_info().rss
    except ImportError:
        pass
    try:
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        import resource

        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # the peak: best left
        return peak if sys.platform == "darwin" else peak * 1024


def plan_memory(
    model_bytes: int,
    context_tokens: int,
    *,
    budget_fraction: float = _COMMON.memory_budget,
    kv_bytes_per_token: int = DEFAULT_KV_BYTES_PER_TOKEN,
    total_bytes: int | None = None,
    min_context_tokens: int = MIN_CONTEXT_TOKENS,
) -> MemoryPlan:
    """Keep `context_tokens` if it fits the budget, else lower it; raise if even the minimum won't fit."""
    if not 0 < budget_fraction <= 1:
        raise ValueError(f"memory budget fraction must be in (0, 1], got {budget_fraction}")
    total = total_bytes if total_bytes is not None else total_memory_bytes()
    budget = int(total * budget_fraction)
    room_for_kv = budget - model_bytes
    fitting = room_for_kv // kv_bytes_per_token if room_for_kv > 0 else 0
    wanted_min = min(min_context_tokens, context_tokens)
    if fitting < wanted_min:
        raise MemoryBudgetError(
            f"model does not fit the memory budget: model {model_bytes / _MB:.0f} MB + KV cache for "
            f"{wanted_min} tokens {wanted_min * kv_bytes_per_token / _MB:.0f} MB > budget "
            f"{budget / _MB:.0f} MB ({budget_fraction:.0%} of {total / _MB:.0f} MB); "
            "raise the budget fraction or use a smaller model"
        )
    context = context_tokens
    if fitting < context_tokens:
        context = max(wanted_min, fitting // _CONTEXT_STEP * _CONTEXT_STEP)
    return MemoryPlan(
        context_tokens=context,
        model_bytes=model_bytes,
        kv_bytes=context * kv_bytes_per_token,
        budget_bytes=budget,
        total_bytes=total,
        lowered=context < context_tokens,
    )
