"""Small helpers the tests share: waiting for a condition in async code, reading a metric. Free ports and waiting
in sync code are in tools.stack, which the bench shares."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import REGISTRY

T = TypeVar("T")


async def eventually(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.01) -> T:
    """wait_until for async tests: the event loop keeps running while it waits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        await asyncio.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def metric(name: str, **labels: str) -> float:
    """A sample of this process's default Prometheus registry, as /metrics would show it; 0 when absent."""
    return REGISTRY.get_sample_value(name, labels) or 0.0
