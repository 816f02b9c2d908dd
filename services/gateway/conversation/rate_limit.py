"""A session's message rate limit: a token bucket over every message, text and binary alike.

The excess is dropped rather than queued (a client that floods must not delay its own later audio), and the
warning about it is itself limited, so a flood does not turn into a flood of error events.
"""

from __future__ import annotations

import time
from collections.abc import Callable

WARN_EVERY_S = 1.0


class RateLimiter:
    def __init__(self, *, per_second: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.per_second = per_second
        self._clock = clock
        self._tokens = per_second
        self._refilled_at = clock()
        self._warned_at = -float("inf")

    def admit(self) -> bool:
        """Take one token; False when the bucket is empty and the message must be dropped."""
        now = self._clock()
        self._tokens = min(self.per_second, self._tokens + (now - self._refilled_at) * self.per_second)
        self._refilled_at = now
        if self._tokens < 1:
            return False
        self._tokens -= 1
        return True

    def warning_due(self) -> bool:
        """Whether a drop should be reported now: at most once every WARN_EVERY_S."""
        now = self._clock()
        if now - self._warned_at <= WARN_EVERY_S:
            return False
        self._warned_at = now
        return True
