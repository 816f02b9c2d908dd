"""Small helpers the tests share: free loopback ports, waiting for a condition, reading a metric."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import REGISTRY

T = TypeVar("T")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until(predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.2) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


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
