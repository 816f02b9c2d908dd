"""Small helpers the tests share: free loopback ports, waiting for a condition, reading a metric."""

from __future__ import annotations

import asyncio
import random
import socket
import time
from collections.abc import Callable
from typing import TypeVar

from prometheus_client import REGISTRY

T = TypeVar("T")


# Ports are handed out below the kernel's ephemeral range. A port from bind(port 0) comes from that range, and
# between the test picking it and the service binding it, an outgoing connection (the gateway's gRPC channels)
# can take it as its local port and hold it: seen once as a vad that failed to bind its metrics port 15 times.
_PORTS = range(20000, 32768)
_handed_out: set[int] = set()


def free_port() -> int:
    """A loopback port nobody listens on now, never handed out before by this process."""
    for _ in range(1000):
        port = random.choice(_PORTS)
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free loopback port in {_PORTS.start}-{_PORTS.stop - 1}")


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
