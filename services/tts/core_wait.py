"""How long threads waited for a core, from the kernel's per-thread scheduler statistics (Linux).

A synthesis beside other busy processes can take longer for two reasons its wall time cannot tell apart: its
threads were ready but other work held the cores (a cost of what runs beside it), or the cores themselves ran
slower (the host's speed, most of the turn-to-turn noise on a shared machine). The kernel counts the first one
per thread: the second field of /proc/self/task/<tid>/schedstat is the time the thread was runnable but not
running. No library reads it (psutil gives CPU times, not run-queue waits), hence the few lines here.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")

_TASKS = Path("/proc/self/task")


def thread_ids() -> set[int]:
    """This process's threads now; empty where the kernel does not list them (not Linux)."""
    try:
        return {int(name) for name in (p.name for p in _TASKS.iterdir())}
    except OSError:
        return set()


def queued_seconds(tids: Iterable[int]) -> float | None:
    """How long these threads have waited for a core since each started, summed. A thread that has ended
    counts 0; None where the kernel keeps no such count (not Linux)."""
    total = 0
    for tid in tids:
        try:
            total += int((_TASKS / str(tid) / "schedstat").read_text().split()[1])
        except FileNotFoundError:
            if not _TASKS.is_dir():
                return None
        except (OSError, IndexError, ValueError):
            return None
    return total / 1e9


def queued_during(pool_threads: Iterable[int], work: Callable[[], T]) -> tuple[T, float | None]:
    """Run `work` on this thread: its result, and how long this thread and `pool_threads` (the native threads
    it hands its computation to) waited for a core meanwhile; None where the kernel does not count it."""
    threads = (threading.get_native_id(), *pool_threads)
    before = queued_seconds(threads)
    result = work()
    after = queued_seconds(threads)
    return result, None if before is None or after is None else after - before
