"""Admission: at most N admitted, FIFO among them, the next one refused at once, waiting cancellable."""

from __future__ import annotations

import asyncio

import pytest

from services.llm.admission import Admission
from services.llm.errors import Busy
from tests.helpers import eventually


async def test_third_concurrent_request_is_refused_at_once():
    admission = Admission(max_admitted=2)
    release = asyncio.Event()
    order: list[str] = []

    async def request(name: str):
        async with admission.admit():
            order.append(name)
            await release.wait()

    first = asyncio.create_task(request("first"))
    second = asyncio.create_task(request("second"))
    await eventually(lambda: admission.waiting == 1, 10, "the second request to queue")
    assert admission.admitted == 2

    # Queued, the third would wait for `release`, which nothing sets yet: being told "busy" at all is "at once".
    with pytest.raises(Busy, match="busy: 2 requests in progress"):
        async with admission.admit():
            pass

    release.set()
    await asyncio.gather(first, second)
    assert order == ["first", "second"]
    assert admission.admitted == 0


async def test_fifo_order_is_kept():
    admission = Admission(max_admitted=5)
    order: list[int] = []

    async def request(i: int):
        async with admission.admit():
            order.append(i)
            await asyncio.sleep(0.005)

    tasks = []
    for i in range(5):
        tasks.append(asyncio.create_task(request(i)))
        await asyncio.sleep(0)  # arrive in this order
    await asyncio.gather(*tasks)
    assert order == [0, 1, 2, 3, 4]


async def test_a_cancelled_waiter_leaves_the_queue():
    admission = Admission(max_admitted=3)
    release = asyncio.Event()
    ran: list[str] = []

    async def request(name: str):
        async with admission.admit():
            ran.append(name)
            await release.wait()

    running = asyncio.create_task(request("running"))
    doomed = asyncio.create_task(request("doomed"))
    last = asyncio.create_task(request("last"))
    await eventually(lambda: admission.waiting == 2, 10, "two requests to queue")
    doomed.cancel()
    with pytest.raises(asyncio.CancelledError):
        await doomed
    assert admission.admitted == 2 and admission.waiting == 1
    release.set()
    await asyncio.gather(running, last)
    assert ran == ["running", "last"]
    assert admission.admitted == 0 and admission.waiting == 0


async def test_slot_is_freed_when_the_body_fails():
    admission = Admission(max_admitted=1)
    with pytest.raises(RuntimeError):
        async with admission.admit():
            raise RuntimeError("engine failed")
    async with admission.admit():
        assert admission.admitted == 1
