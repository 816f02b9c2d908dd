"""Domain errors of the llm engine; the servicer maps each one to a gRPC status in one place."""

from __future__ import annotations


class LlmError(Exception):
    """Base class: the message is meant for the caller, as is."""


class InvalidInput(LlmError):
    """The request cannot be served as sent (bad media, unsupported modality, bad sampling)."""


class Busy(LlmError):
    """Too many requests are already admitted; retry later."""


class EngineError(LlmError):
    """LiteRT-LM failed; `reason` carries the native library's own message when it gave one."""

    def __init__(self, what: str, reason: str = ""):
        self.what = what
        self.reason = reason
        super().__init__(f"{what}: {reason}" if reason else what)


class MemoryBudgetError(LlmError):
    """The model and its KV cache cannot fit in the configured memory budget."""
