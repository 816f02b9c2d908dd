"""What every part of tools.compose shares: where the checkout and the run state are, the error a user must act
on, and running a probe command without raising."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose.yaml"
GPU_COMPOSE_FILE = ROOT / "compose.gpu.yaml"  # the llm on an NVIDIA GPU (up --gpu)
SERVICES = ("vad", "llm", "tts", "asr", "gateway")


class ComposeError(RuntimeError):
    """Something the user must fix; the message says what and how."""


def run_dir() -> Path:
    return Path(os.environ.get("SOTTO_RUN_DIR", "run")).resolve()


def say(message: str) -> None:
    print(f"compose: {message}", flush=True)


def probe(cmd: Sequence[str], timeout: float = 30.0) -> tuple[int, str]:
    """Run a probe command; return its exit code and combined output (never raises for a failing command)."""
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout)
    except FileNotFoundError:
        return 127, f"{cmd[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {timeout:.0f} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def short(text: str, limit: int = 400) -> str:
    """One line of at most `limit` characters, for quoting a command's output in a message."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"
