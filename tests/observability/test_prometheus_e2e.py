"""A real Prometheus (Debian's binary, on 127.0.0.1, 1 s scrapes, TSDB in tmp) scrapes a running stack through a few
turns; its HTTP API must give back the turn count the test made and the TTFA p95 of the turns the client saw.

Two stacks, chosen by `SOTTO_E2E_STACK`:
- `fake`: the gateway as its own process
  (`python -m services.gateway.server`), wired to fake vad/llm/tts gRPC peers served by this test
  (tests/gateway/fakes.py); Prometheus scrapes the gateway's /metrics.
- `real` (default): `python -m tools.runner up` on free ports (real services, real models from SOTTO_MODEL_DIR);
  Prometheus scrapes all four endpoints, and each must be up and SERVING. Only typed turns are driven there
  (real Silero does not take a sine tone for speech).

The Prometheus config is the shipped deploy/prometheus/prometheus.yml with its targets moved to the test's ports,
and it loads the shipped rules.yml.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import math
import os
import shutil
import signal
import socket
import sys
import time
import urllib.parse
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import pytest
import yaml

from services.gateway.metrics import MS_BUCKETS
from sotto.v1 import llm_pb2_grpc, tts_pb2_grpc, vad_pb2_grpc
from tests.gateway.conftest import Client, silence, speech
from tests.gateway.fakes import FakeLlm, FakeTts, FakeVad, start_fake
from tests.observability.contract import PROMETHEUS_DIR, ROOT
from tools.report import bucket_quantile

STACK = os.environ.get("SOTTO_E2E_STACK", "real")
START_TIMEOUT_S = 600.0 if STACK == "real" else 30.0
TEXT_TURNS = 4
SPEECH_TURNS = 0 if STACK == "real" else 2


@dataclass
class RunningStack:
    gateway_url: str
    targets: dict[str, str]                      # service label -> host:port serving /metrics
    log: Path                                    # the gateway's JSON log
    processes: list[asyncio.subprocess.Process] = field(default_factory=list)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def wait_http(url: str, timeout: float, status: int = 200, proc: asyncio.subprocess.Process | None = None
                    ) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while True:
            if proc is not None and proc.returncode is not None:
                raise AssertionError(f"{url}: the process exited with {proc.returncode}")
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError):
                async with http.get(url, timeout=aiohttp.ClientTimeout(total=2)) as response:
                    if response.status == status:
                        return
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not answer {status} within {timeout:.0f} s")
            await asyncio.sleep(0.2)


async def stop(proc: asyncio.subprocess.Process) -> None:
    """SIGTERM the process we started (by its pid), then SIGKILL it if it lingers."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), 10)
        except asyncio.TimeoutError:
            proc.kill()
            await proc.wait()


async def spawn(args: list[str], env: dict[str, str], log: Path) -> asyncio.subprocess.Process:
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(*args, cwd=ROOT, env=env, stdout=out,
                                                    stderr=asyncio.subprocess.STDOUT)


def base_env(tmp: Path) -> dict[str, str]:
    return {**os.environ, "SOTTO_HOST": "127.0.0.1", "SOTTO_RUN_DIR": str(tmp / "run"), "SOTTO_LOG_LEVEL": "INFO",
            "PYTHONUNBUFFERED": "1"}


@contextlib.asynccontextmanager
async def fake_stack(tmp: Path) -> AsyncIterator[RunningStack]:
    llm = FakeLlm(first_delay_s=0.12, delta_delay_s=0.02)
    servers = [await start_fake(FakeVad(), vad_pb2_grpc.add_VadServiceServicer_to_server, "sotto.v1.VadService"),
               await start_fake(llm, llm_pb2_grpc.add_LlmServiceServicer_to_server, "sotto.v1.LlmService"),
               await start_fake(FakeTts(), tts_pb2_grpc.add_TtsServiceServicer_to_server, "sotto.v1.TtsService")]
    port = free_port()
    env = {**base_env(tmp), "SOTTO_GATEWAY_PORT": str(port), "SOTTO_VAD_ADDR": servers[0][1],
           "SOTTO_LLM_ADDR": servers[1][1], "SOTTO_TTS_ADDR": servers[2][1]}
    log = tmp / "gateway.log"
    gateway = await spawn([sys.executable, "-m", "services.gateway.server"], env, log)
    try:
        await wait_http(f"http://127.0.0.1:{port}/healthz", START_TIMEOUT_S, proc=gateway)
        yield RunningStack(f"http://127.0.0.1:{port}", {"gateway": f"127.0.0.1:{port}"}, log, [gateway])
    finally:
        await stop(gateway)
        for server, _ in servers:
            await server.stop(0)


@contextlib.asynccontextmanager
async def real_stack(tmp: Path) -> AsyncIterator[RunningStack]:
    ports = {name: free_port() for name in ("gateway", "vad", "llm", "tts", "asr", "vad_m", "llm_m", "tts_m",
                                            "asr_m")}
    env = {**base_env(tmp), "SOTTO_GATEWAY_PORT": str(ports["gateway"])}
    for name in ("vad", "llm", "tts", "asr"):
        env[f"SOTTO_{name.upper()}_PORT"] = str(ports[name])
        env[f"SOTTO_{name.upper()}_METRICS_PORT"] = str(ports[f"{name}_m"])
    runner = await spawn([sys.executable, "-m", "tools.runner", "up"], env, tmp / "runner.out")
    try:
        await wait_http(f"http://127.0.0.1:{ports['gateway']}/healthz", START_TIMEOUT_S, proc=runner)
        targets = {"gateway": f"127.0.0.1:{ports['gateway']}",
                   **{name: f"127.0.0.1:{ports[name + '_m']}" for name in ("vad", "llm", "tts")}}
        yield RunningStack(f"http://127.0.0.1:{ports['gateway']}", targets, tmp / "run" / "logs" / "gateway.log",
                           [runner])
    finally:
        await stop(runner)


def prometheus_config(targets: dict[str, str]) -> dict:
    """The shipped config, scraping every second at the test's ports, with the shipped rules."""
    config = yaml.safe_load((PROMETHEUS_DIR / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", scrape_timeout="900ms", evaluation_interval="1s")
    config["rule_files"] = [str(PROMETHEUS_DIR / name) for name in config["rule_files"]]
    (job,) = config["scrape_configs"]
    shipped = {group["labels"]["service"] for group in job["static_configs"]}
    assert set(targets) <= shipped, f"unknown services {set(targets) - shipped}"
    job["static_configs"] = [{"targets": [address], "labels": {"service": service}}
                             for service, address in targets.items()]
    return config


@contextlib.asynccontextmanager
async def prometheus(tmp: Path, targets: dict[str, str]) -> AsyncIterator[str]:
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus not found: install Debian's prometheus package (apt-get install -y prometheus)")
    config = tmp / "prometheus.yml"
    config.write_text(yaml.safe_dump(prometheus_config(targets)))
    port = free_port()
    proc = await spawn([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], dict(os.environ),
                       tmp / "prometheus.log")
    try:
        await wait_http(f"http://127.0.0.1:{port}/-/ready", 30, proc=proc)
        yield f"http://127.0.0.1:{port}"
    finally:
        await stop(proc)


async def query(api: str, expr: str) -> list[dict]:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"{api}/api/v1/query?{urllib.parse.urlencode({'query': expr})}") as response:
            body = await response.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


async def scalar_when(api: str, expr: str, ok, timeout: float = 20.0) -> float:
    """Poll an instant query until its single value satisfies `ok` (Prometheus scrapes and evaluates each 1 s)."""
    deadline, last = time.monotonic() + timeout, None
    while time.monotonic() < deadline:
        result = await query(api, expr)
        if len(result) == 1:
            last = float(result[0]["value"][1])
            if ok(last):
                return last
        await asyncio.sleep(0.25)
    raise AssertionError(f"{expr}: last value {last} (results: {result})")


async def drive_turns(url: str, text_turns: int, speech_turns: int) -> list[dict]:
    """Typed, then spoken turns in one session; returns their turn.done events."""
    async with aiohttp.ClientSession() as http:
        client = Client(await http.ws_connect(f"{url}/ws"))
        try:
            await client.send(type="session.start", protocol=1, sample_rate=16000)
            await client.wait_for("session.ready")
            for i in range(text_turns + speech_turns):
                if i < text_turns:
                    await client.send(type="text", text=f"Question {i}?")
                else:
                    await client.send_audio(np.concatenate([silence(0.2), speech(0.8), silence(0.5)]),
                                            ts0=1_000_000.0 + i * 10_000)
                await client.wait_for("turn.done", timeout=60, count=i + 1)
            return [e for e in client.events if e["type"] == "turn.done"]
        finally:
            await client.close()


async def test_prometheus_reads_back_turns_and_ttfa(tmp_path: Path) -> None:
    stack_of = real_stack if STACK == "real" else fake_stack
    async with stack_of(tmp_path) as stack, prometheus(tmp_path, stack.targets) as api:
        # Prometheus applies its targets about 5 s after start: some turns run meanwhile (the counters keep them),
        # the rest after the first scrape, so that rate() over the window sees them too.
        turns = await drive_turns(stack.gateway_url, TEXT_TURNS // 2, 0)
        for service in stack.targets:
            await scalar_when(api, f'up{{job="sotto",service="{service}"}}', lambda v: v == 1)
        if STACK == "real":
            for service in ("vad", "llm", "tts"):
                await scalar_when(api, f'sotto_service_serving{{service="{service}"}}', lambda v: v == 1)
            # serve_metrics registers the hardware collector in each model service
            await scalar_when(api, 'count(sotto_gpu_info{service=~"vad|llm|tts"})', lambda v: v == 3)
        await scalar_when(api, 'process_resident_memory_bytes{service="gateway"}', lambda v: v > 2**20)
        turns += await drive_turns(stack.gateway_url, TEXT_TURNS - TEXT_TURNS // 2, SPEECH_TURNS)
        assert len(turns) == TEXT_TURNS + SPEECH_TURNS
        assert all(t["finish_reason"] in ("stop", "length") for t in turns), turns

        count = await scalar_when(api, 'sum(sotto_gateway_turns_total{service="gateway"})',
                                  lambda v: v >= len(turns))
        assert count == len(turns)
        # Over the gateway's whole life (a fresh process): the same buckets the client's timings fall into.
        ttfa_s = [t["timings"]["ttfa_ms"] / 1000 for t in turns]
        cumulative = [(le, sum(1 for v in ttfa_s if v <= le)) for le in (*MS_BUCKETS, math.inf)]
        expected_p95 = bucket_quantile(0.95, cumulative)
        p95 = await scalar_when(api, "histogram_quantile(0.95, sum by (le) (sotto_gateway_ttfa_seconds_bucket))",
                                lambda v: True)
        assert p95 == pytest.approx(expected_p95, rel=1e-9)
        assert 0.1 < p95 < 4, "the fake llm waits 120 ms before its first token"
        spoken = await scalar_when(api, 'sum(sotto_gateway_turns_total{source="speech"})', lambda v: True) \
            if SPEECH_TURNS else 0
        assert spoken == SPEECH_TURNS

        # The shipped rules load and evaluate against these series; nothing fires on a healthy stack.
        recorded = await scalar_when(api, "sotto:gateway_ttfa_seconds:p95_5m", lambda v: not math.isnan(v))
        assert 0 < recorded < 12
        async with aiohttp.ClientSession() as http:
            async with http.get(f"{api}/api/v1/rules") as response:
                groups = (await response.json())["data"]["groups"]
        assert {g["name"] for g in groups} == {"sotto_recording", "sotto_alerts"}
        assert all(r["health"] == "ok" for g in groups for r in g["rules"]), json.dumps(groups)[:2000]
        assert await query(api, 'ALERTS{alertstate="firing"}') == []

    # The same run's log makes the per-turn report.
    from tools import report

    assert len(report.turns_from_log(stack.log.read_text().splitlines())) == len(turns)
