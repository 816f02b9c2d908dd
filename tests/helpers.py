"""Small helpers the tests share: waiting for a condition in async code, reading a metric, OpenAI SDK clients that
are closed. Free ports and waiting in sync code are in tools.stack, which the bench shares."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import TypeVar

import pytest
from openai import AsyncOpenAI
from prometheus_client import REGISTRY

T = TypeVar("T")
_OPENAI_CLIENTS: list[AsyncOpenAI] = []


def openai_client(base_url: str, api_key: str = "unused") -> AsyncOpenAI:
    """An SDK client that `close_openai_clients` closes at the test's end. One left to the garbage collector
    schedules its close on whatever event loop runs then; with its own loop gone that close fails and asyncio logs
    an error there (it failed tests/reliability/test_fuzz.py, which allows the gateway no logged error)."""
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    _OPENAI_CLIENTS.append(client)
    return client


async def close_openai_clients() -> None:
    while _OPENAI_CLIENTS:
        await _OPENAI_CLIENTS.pop().close()


@pytest.fixture
async def closed_openai_clients() -> AsyncIterator[None]:
    """A module that opens SDK clients imports this and names it in `pytestmark`'s usefixtures."""
    yield
    await close_openai_clients()


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
