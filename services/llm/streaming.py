"""A blocking Generation run on the engine thread, its events handed to the event loop as they come.

The loop takes everything that arrived since its last look in one go, so text decoded while the previous message
was still being sent goes out as one message: a fast model does not pay a gRPC message and the gateway's relay per
token, and each token costs one loop wake-up instead of an executor round trip.
"""

from __future__ import annotations

import asyncio
import collections

from services.llm.generation import Finished, Generation

END = object()  # the engine thread's last word: the generation is over (or failed)


class Inbox:
    """Engine events handed from the engine thread to the event loop. asyncio.Queue has no "take all", hence a
    deque and an Event."""

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._ready = asyncio.Event()

    def put(self, item: object) -> None:
        self._items.append(item)
        self._ready.set()

    async def take_all(self) -> list:
        await self._ready.wait()
        self._ready.clear()
        items = list(self._items)
        self._items.clear()
        return items


def pump(generation: Generation, loop: asyncio.AbstractEventLoop, inbox: Inbox) -> Finished | None:
    """Run a whole generation on the engine thread, handing each event to the loop, then END.

    Returns its Finished (None if it never got that far), so a cancelled generation's tokens still count."""
    last = None
    try:
        for last in generation:
            _deliver(loop, inbox, last)
    finally:
        _deliver(loop, inbox, END)
    return last if isinstance(last, Finished) else None


def _deliver(loop: asyncio.AbstractEventLoop, inbox: Inbox, item: object) -> None:
    try:
        loop.call_soon_threadsafe(inbox.put, item)
    except RuntimeError:
        pass  # the loop is closed (process stopping): nobody is left to read
