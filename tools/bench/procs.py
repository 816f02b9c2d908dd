"""CPU time of the stack's service processes, read from /proc (Linux): nanosecond per-thread counters."""

from __future__ import annotations

from pathlib import Path

SERVICES = ("gateway", "vad", "llm", "tts")


def children(parent: int) -> dict[str, int]:
    """{service: pid} of the runner's children running `services.<name>.server`."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) != parent:
                continue
            cmdline = (stat.parent / "cmdline").read_bytes().decode(errors="replace")
        except (OSError, IndexError, ValueError):
            continue
        for name in SERVICES:
            if f"services.{name}.server" in cmdline:
                found[name] = int(stat.parent.name)
    return found


def cpu_ms(pid: int) -> float:
    """CPU time of the process's live threads, in ms (threads that already exited are not counted)."""
    total = 0
    for sched in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            total += int(sched.read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e6


def snapshot(pids: dict[str, int]) -> dict[str, float]:
    return {name: cpu_ms(pid) for name, pid in pids.items()}


def delta(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {name: round(after[name] - before[name], 1) for name in before if name in after}
