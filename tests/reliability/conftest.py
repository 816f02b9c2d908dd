"""The real stack for reliability tests, plus what they measure: process pids, RSS, open file descriptors.

One stack per test module (faults leave restarted processes behind; each module starts clean). The request
timeout is the product's default, passed explicitly so that the deadline every fault test waits for is known
whatever the caller's environment says.
"""

from __future__ import annotations

import json
import os
import signal
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.common import config
from tools.stack import RealStack, grpc_serving, start_stack, stop_stack, wait_until

_DEFAULTS = config.load(config.GatewayConfig, {})
REQUEST_TIMEOUT_MS = _DEFAULTS.request_timeout_ms
ANSWER_WAIT_MS = _DEFAULTS.answer_wait_ms  # a turn's wait for the llm's first text and the first audio
SERVICES = ("vad", "llm", "tts", "gateway")


def runner_state(stack: RealStack) -> dict:
    return json.loads((stack.run_dir / "runner.json").read_text())


def pids(stack: RealStack) -> dict[str, int]:
    """Live pids of the runner ("runner") and of each service, from the run dir's runner.json."""
    state = runner_state(stack)
    found = {"runner": state["runner_pid"]}
    found |= {name: info["pid"] for name, info in state["children"].items() if info.get("pid")}
    return found


def restarts(stack: RealStack, name: str) -> int:
    return runner_state(stack)["children"][name]["restarts"]


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError(f"no VmRSS for pid {pid}")


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def kill(pid: int, sig: signal.Signals) -> None:
    """Signal one pid we know to be a service of our own stack (never by name)."""
    cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    assert b"services." in cmdline, f"pid {pid} is not one of our services: {cmdline!r}"
    os.kill(pid, sig)


def _serving(stack: RealStack, name: str) -> bool:
    return name == "gateway" or grpc_serving(f"127.0.0.1:{stack.ports[f'SOTTO_{name.upper()}_PORT']}")


def wait_restarted(stack: RealStack, name: str, old_pid: int, timeout: float = 120) -> float:
    """Wait until the runner has a new pid for `name` and the gateway reports the whole stack healthy again;
    returns the seconds it took."""
    t0 = time.monotonic()

    def healthy() -> bool:
        new = pids(stack).get(name)
        if not new or new == old_pid:
            return False
        try:
            body = urllib.request.urlopen(f"{stack.http_url}/healthz", timeout=2).read()
        except OSError:
            return False
        return json.loads(body)["status"] == "ok" and _serving(stack, name)

    wait_until(healthy, timeout, f"{name} to be restarted and the stack healthy", interval=0.2)
    return time.monotonic() - t0


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    real = start_stack(tmp_path_factory.mktemp("rel-stack"), SOTTO_REQUEST_TIMEOUT_MS=str(REQUEST_TIMEOUT_MS),
                       SOTTO_GATEWAY_ANSWER_WAIT_MS=str(ANSWER_WAIT_MS))
    yield real
    stop_stack(real)
