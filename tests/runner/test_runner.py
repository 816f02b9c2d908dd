"""`make up` / `make status` / `make down`: four processes, restarts, no orphans, reflection, metrics, JSON logs.

Runs the real runner (`python -m tools.runner`) with the real services on free loopback ports.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from tools.stack import free_port, wait_until

ROOT = Path(__file__).resolve().parents[2]
SERVICES = ("vad", "llm", "tts", "asr")
START_TIMEOUT_S = 240


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    run_dir = tmp_path_factory.mktemp("run")
    ports = {f"SOTTO_{n.upper()}_PORT": free_port() for n in (*SERVICES, "gateway")}
    ports |= {f"SOTTO_{n.upper()}_METRICS_PORT": free_port() for n in SERVICES}
    env = {**os.environ, **{k: str(v) for k, v in ports.items()}, "SOTTO_RUN_DIR": str(run_dir)}
    out = open(run_dir / "runner.out", "w")
    proc = subprocess.Popen([sys.executable, "-m", "tools.runner", "up"], cwd=ROOT, env=env, stdout=out,
                            stderr=subprocess.STDOUT)
    info = {"env": env, "ports": ports, "proc": proc, "run_dir": run_dir}
    try:
        wait_until(lambda: "SERVING" in _status(env).splitlines()[-1] or proc.poll() is not None,
                   START_TIMEOUT_S, "the gateway to serve")
        assert proc.poll() is None, (run_dir / "runner.out").read_text()[-3000:]
        yield info
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=30)
        out.close()


def _status(env: dict) -> str:
    return subprocess.run([sys.executable, "-m", "tools.runner", "status"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=60).stdout


def _rows(env: dict) -> dict[str, list[str]]:
    return {line.split()[0]: line.split() for line in _status(env).splitlines()[1:] if line.split()}


def test_status_shows_every_process_serving(stack: dict) -> None:
    rows = _rows(stack["env"])
    for name in (*SERVICES, "gateway"):
        assert rows[name][1] == "SERVING", rows
        assert int(rows[name][2]) > 0


def test_reflection_lists_each_service_without_generated_code(stack: dict) -> None:
    for name in SERVICES:
        with grpc.insecure_channel(f"127.0.0.1:{stack['ports'][f'SOTTO_{name.upper()}_PORT']}") as channel:
            services = ProtoReflectionDescriptorDatabase(channel).get_services()
        assert f"sotto.v1.{name.capitalize()}Service" in services
        assert "grpc.health.v1.Health" in services


def test_metrics_answer_and_logs_are_json(stack: dict) -> None:
    for name in SERVICES:
        port = stack["ports"][f"SOTTO_{name.upper()}_METRICS_PORT"]
        body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        assert "sotto_service_serving 1.0" in body
    gateway = stack["ports"]["SOTTO_GATEWAY_PORT"]
    assert b"process_resident_memory_bytes" in urllib.request.urlopen(
        f"http://127.0.0.1:{gateway}/metrics", timeout=5).read()
    for name in (*SERVICES, "gateway"):
        lines = (stack["run_dir"] / "logs" / f"{name}.log").read_text().splitlines()
        records = [json.loads(line) for line in lines if line.startswith("{")]
        assert records and all(r["service"] == name for r in records)


def test_a_killed_service_is_restarted(stack: dict) -> None:
    rows = _rows(stack["env"])
    before, vad_pid = rows["llm"], rows["vad"][2]
    os.kill(int(before[2]), signal.SIGKILL)
    after = wait_until(lambda: (r := _rows(stack["env"])["llm"])[1] == "SERVING" and r[2] != before[2] and r,
                       START_TIMEOUT_S, "llm to be restarted")
    assert int(after[4]) == int(before[4]) + 1
    assert _rows(stack["env"])["vad"][2] == vad_pid  # the others kept running


def test_down_leaves_no_process_behind(stack: dict) -> None:
    pids = [int(row[2]) for row in _rows(stack["env"]).values()]
    subprocess.run([sys.executable, "-m", "tools.runner", "down"], cwd=ROOT, env=stack["env"], check=True,
                   timeout=60)
    stack["proc"].wait(timeout=30)
    for pid in [stack["proc"].pid, *pids]:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
