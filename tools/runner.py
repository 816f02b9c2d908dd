"""Run Sotto's four processes in the foreground: `python -m tools.runner up|down|status|logs`.

Why not supervisor or honcho: the runner must start the gateway only once the model services report
SERVING on the gRPC health service (and say which one it waits for), restart a crashed service with backoff
while the others run on, and prefix each log line with its service. honcho has no restarts or health gating;
supervisord has no health gating and would add a daemon and its config. This file does those three things and
nothing else.

State (pids, start times, restart counts) lives in `SOTTO_RUN_DIR` (default `./run`), logs in its `logs/`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import signal
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import config

SERVICES = ("vad", "llm", "tts", "asr")
PROTO_NAMES = {"vad": "sotto.v1.VadService", "llm": "sotto.v1.LlmService", "tts": "sotto.v1.TtsService",
               "asr": "sotto.v1.AsrService"}
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0
HEALTHY_RESET_S = 60.0  # a process that ran this long restarts with the first backoff again
STOP_WAIT_S = 8.0


def run_dir() -> Path:
    return Path(os.environ.get("SOTTO_RUN_DIR", "run")).resolve()


def state_file() -> Path:
    return run_dir() / "runner.json"


def _die_with_parent() -> None:
    """Linux only: the child gets SIGTERM if the runner dies, even by SIGKILL, so no orphan is left."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


@dataclass
class Child:
    name: str
    pid: int | None = None
    started: float = 0.0
    restarts: int = 0
    proc: asyncio.subprocess.Process | None = field(default=None, repr=False)


class Runner:
    def __init__(self, settings: config.Settings, names: list[str]) -> None:
        self.settings = settings
        self.names = names
        self.children = {n: Child(n) for n in names}
        self.stopping = asyncio.Event()
        self.started = time.time()
        self.logs = run_dir() / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def _save(self) -> None:
        data = {"runner_pid": os.getpid(), "started": self.started,
                "children": {c.name: {"pid": c.pid, "started": c.started, "restarts": c.restarts}
                             for c in self.children.values()}}
        tmp = state_file().with_suffix(".tmp")
        tmp.write_text(json.dumps(data, indent=1))
        tmp.replace(state_file())

    async def _pump(self, child: Child, stream: asyncio.StreamReader) -> None:
        width = max(len(n) for n in self.names)
        with open(self.logs / f"{child.name}.log", "ab") as log:
            async for line in stream:
                log.write(line)
                log.flush()
                sys.stdout.write(f"{child.name:<{width}} | {line.decode(errors='replace')}")
                sys.stdout.flush()

    async def _supervise(self, child: Child) -> None:
        """Keep one service running; restart it with exponential backoff when it exits unasked."""
        backoff = BACKOFF_FIRST_S
        module = f"services.{child.name}.server"
        while not self.stopping.is_set():
            child.proc = await asyncio.create_subprocess_exec(
                sys.executable, "-u", "-m", module, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT, preexec_fn=_die_with_parent, start_new_session=True)
            child.pid, child.started = child.proc.pid, time.time()
            self._save()
            assert child.proc.stdout is not None
            pump = asyncio.create_task(self._pump(child, child.proc.stdout))
            code = await child.proc.wait()
            await pump
            if self.stopping.is_set():
                break
            ran = time.time() - child.started
            backoff = BACKOFF_FIRST_S if ran > HEALTHY_RESET_S else backoff
            self._say(f"{child.name} exited with status {code} after {ran:.1f} s; restarting in {backoff:.1f} s")
            child.restarts += 1
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self.stopping.wait(), backoff)
            backoff = min(backoff * 2, BACKOFF_MAX_S)
        child.pid = None
        self._save()

    def _say(self, text: str) -> None:
        print(f"{'runner':<{max(len(n) for n in self.names)}} | {text}", flush=True)

    async def _wait_for_services(self) -> None:
        """Block the gateway until every model service is SERVING, saying which one it waits for."""
        waiting_for = ""
        while not self.stopping.is_set():
            for name in SERVICES:
                status = await health(self.settings, name)
                if status != "SERVING":
                    if name != waiting_for:
                        self._say(f"gateway waiting for {name} ({status})")
                        waiting_for = name
                    break
            else:
                self._say(f"{', '.join(SERVICES)} are SERVING; starting the gateway")
                return
            await asyncio.sleep(0.5)

    async def _run_gateway(self) -> None:
        await self._wait_for_services()
        await self._supervise(self.children["gateway"])

    async def up(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        self._save()
        tasks = [asyncio.create_task(self._supervise(self.children[n])) for n in self.names if n != "gateway"]
        if "gateway" in self.names:
            tasks.append(asyncio.create_task(self._run_gateway()))
        await self.stopping.wait()
        self._say("stopping all services")
        await asyncio.gather(*(self._stop(c) for c in self.children.values()))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        state_file().unlink(missing_ok=True)

    async def _stop(self, child: Child) -> None:
        proc = child.proc
        if proc is None or proc.returncode is not None:
            return
        proc.terminate()
        try:
            await asyncio.wait_for(proc.wait(), STOP_WAIT_S)
        except asyncio.TimeoutError:
            self._say(f"{child.name} ignored SIGTERM for {STOP_WAIT_S} s; killing it")
            proc.kill()
            await proc.wait()


def service_port(settings: config.Settings, name: str) -> int:
    return {"vad": settings.vad.port, "llm": settings.llm.port, "tts": settings.tts.port, "asr": settings.asr.port,
            "gateway": settings.gateway.port}[name]


def metrics_port(settings: config.Settings, name: str) -> int | None:
    return {"vad": settings.vad.metrics_port, "llm": settings.llm.metrics_port,
            "tts": settings.tts.metrics_port, "asr": settings.asr.metrics_port}.get(name)


async def health(settings: config.Settings, name: str) -> str:
    """gRPC health of a model service (or HTTP /healthz of the gateway) as a word: SERVING, NOT_SERVING, DOWN."""
    host = settings.common.host
    if name == "gateway":
        try:
            body = await asyncio.to_thread(_http_get, f"http://{host}:{settings.gateway.port}/healthz")
            return "SERVING" if json.loads(body).get("status") == "ok" else "NOT_SERVING"
        except OSError:
            return "DOWN"
    async with grpc.aio.insecure_channel(f"{host}:{service_port(settings, name)}") as channel:
        try:
            reply = await health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=PROTO_NAMES[name]), timeout=1.0)
            return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
        except grpc.aio.AioRpcError:
            return "DOWN"


def _http_get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=2) as reply:  # noqa: S310 - loopback URL built from config
        return reply.read().decode()


def _model_of(settings: config.Settings, name: str) -> str:
    port = metrics_port(settings, name)
    if port is None:
        return "-"
    try:
        text = _http_get(f"http://{settings.common.host}:{port}/metrics")
    except OSError:
        return "-"
    for line in text.splitlines():
        if line.startswith("sotto_service_info{"):
            return line[len("sotto_service_info{"):line.rindex("}")]
    return "-"


def _alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def read_state() -> dict:
    try:
        return json.loads(state_file().read_text())
    except (OSError, ValueError):
        return {}


async def status(settings: config.Settings) -> int:
    state = read_state()
    children = state.get("children", {})
    if not _alive(state.get("runner_pid")):
        print("sotto is not running (no live runner); `make up` starts it")
    print(f"{'service':<8} {'health':<12} {'pid':>7} {'uptime':>9} {'restarts':>8}  model")
    for name in (*SERVICES, "gateway"):
        info = children.get(name, {})
        pid = info.get("pid") if _alive(info.get("pid")) else None
        uptime = f"{time.time() - info['started']:.0f}s" if pid else "-"
        print(f"{name:<8} {await health(settings, name):<12} {pid or '-':>7} {uptime:>9} "
              f"{info.get('restarts', 0):>8}  {_model_of(settings, name)}")
    return 0


def down() -> int:
    """Stop a runner started elsewhere (another terminal) and make sure none of its children survive."""
    state = read_state()
    runner_pid = state.get("runner_pid")
    if not _alive(runner_pid):
        print("sotto is not running")
    else:
        os.kill(runner_pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_WAIT_S + 4
        while _alive(runner_pid) and time.monotonic() < deadline:
            time.sleep(0.1)
    for name, info in state.get("children", {}).items():
        pid = info.get("pid")
        if _alive(pid) and _is_ours(pid):
            print(f"stopping leftover {name} (pid {pid})")
            os.kill(pid, signal.SIGKILL)
    state_file().unlink(missing_ok=True)
    print("sotto stopped")
    return 0


def _is_ours(pid: int) -> bool:
    """Only signal a pid that still runs one of our services (pids are reused)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return sys.platform == "darwin"
    return "services." in cmdline


def logs(follow: bool) -> int:
    files = sorted((run_dir() / "logs").glob("*.log"))
    if not files:
        print(f"no logs in {run_dir() / 'logs'}")
        return 1
    args = ["tail", "-n", "50", *(["-F"] if follow else []), *map(str, files)]
    os.execvp("tail", args)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.runner", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up_p = sub.add_parser("up", help=f"start {', '.join(SERVICES)} and the gateway in the foreground")
    up_p.add_argument("--only", default=",".join((*SERVICES, "gateway")), help="comma-separated subset")
    sub.add_parser("down", help="stop a running `up`")
    sub.add_parser("status", help="health, pid, uptime and model of each service")
    logs_p = sub.add_parser("logs", help="show the services' logs")
    logs_p.add_argument("-f", "--follow", action="store_true")
    args = parser.parse_args(argv)
    settings = config.exit_on_error(config.load_all)
    if args.command == "up":
        if _alive(read_state().get("runner_pid")):
            print("sotto is already running; `make down` stops it", file=sys.stderr)
            return 1
        names = [n for n in args.only.split(",") if n]
        asyncio.run(Runner(settings, names).up())
        return 0
    if args.command == "down":
        return down()
    if args.command == "status":
        return asyncio.run(status(settings))
    return logs(args.follow)


if __name__ == "__main__":
    raise SystemExit(main())
