"""Admission control for the llm engine: a bounded, explicit FIFO in front of one model.

LiteRT-LM runs one generation at a time and would make a second caller wait invisibly. Here the
wait is explicit: at most `max_admitted` requests are admitted (one running, the rest queued in
arrival order); one more is refused at once with `Busy`, never left hanging. A queued request that
is cancelled leaves the queue without disturbing the others.

    admission = Admission(max_admitted=2)
    async with admission.admit():      # raises Busy immediately when full
        ...                            # runs alone, in FIFO order
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
from typing import AsyncIterator

from services.llm.errors import Busy


class Admission:
    def __init__(self, max_admitted: int = 2, max_running: int = 1):
        if max_admitted < 1 or max_running < 1:
            raise ValueError("max_admitted and max_running must be at least 1")
        self.max_admitted = max_admitted
        self.max_running = max_running
        self._admitted = 0
        self._running = 0
        self._waiting: collections.deque[asyncio.Future[None]] = collections.deque()

    @property
    def admitted(self) -> int:
        return self._admitted

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    @property
    def running(self) -> int:
        """Admitted requests holding the engine (a cancelled one holds it until the engine is free)."""
        return self._running

    @contextlib.asynccontextmanager
    async def admit(self) -> AsyncIterator[None]:
        if self._admitted >= self.max_admitted:
            raise Busy(f"the model is busy: {self._admitted} requests in progress (limit {self.max_admitted}); "
                       "retry shortly")
        self._admitted += 1
        try:
            await self._take_turn()
            try:
                yield
            finally:
                self._running -= 1
                self._wake_next()
        finally:
            self._admitted -= 1

    async def _take_turn(self) -> None:
        if self._running < self.max_running and not self._waiting:
            self._running += 1
            return
        turn = asyncio.get_running_loop().create_future()
        self._waiting.append(turn)
        try:
            await turn  # resolved by _wake_next, which has already counted us as running
        except asyncio.CancelledError:
            if turn.done() and not turn.cancelled():
                # Woken and cancelled at once: hand the turn on instead of losing it.
                self._running -= 1
                self._wake_next()
            else:
                self._waiting.remove(turn)
            raise

    def _wake_next(self) -> None:
        while self._waiting and self._running < self.max_running:
            turn = self._waiting.popleft()
            if not turn.done():
                self._running += 1
                turn.set_result(None)
