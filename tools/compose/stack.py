"""The running stack: start it in dependency waves and wait until every container is healthy, stop it, list it,
show its logs, scale a service."""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence

from python_on_whales import DockerClient

from tools.compose.common import SERVICES, ComposeError, say, short
from tools.compose.engine import client
from tools.compose.images import build
from tools.compose.model_env import apply_container_env

UP_TIMEOUT_S = 600.0
POLL_S = 2.0


def _service_of(container) -> str:
    return container.config.labels.get("com.docker.compose.service", container.name)


def _describe(container) -> str:
    state = container.state
    health = state.health.status if state.health else "no healthcheck"
    text = f"{container.name}: {state.status}, {health}"
    if state.health and state.health.log:
        text += f" (last probe: {short(state.health.log[-1].output or '', 200)})"
    if state.status in ("exited", "restarting", "dead"):
        text += f" (exit code {state.exit_code})"
    return text


def wait_healthy(docker: DockerClient, services: Sequence[str], timeout_s: float,
                 expected: dict[str, int] | None = None) -> list:
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
       host_models: bool = False, gpu: bool = False) -> list:
    env = apply_container_env(host_models)
    if "SOTTO_MODEL_VOLUME" in env:
        say(f"models from {env['SOTTO_MODEL_VOLUME']}, as user {env.get('SOTTO_CONTAINER_USER', '10001:10001')}")
    docker = client(profiles, gpu=gpu)
    if build_images:
        build(docker)
    deadline = time.monotonic() + timeout_s
    containers: list = []
    for wave in start_order(docker):
        say(f"starting {', '.join(wave)}; waiting up to {deadline - time.monotonic():.0f} s for them to be healthy")
        docker.compose.up(services=wave, detach=True, no_build=True, remove_orphans=True, dependencies=False,
                          quiet=True)
        containers = wait_healthy(docker, wave, max(deadline - time.monotonic(), 0.0))
    containers = [c for c in docker.compose.ps() if c.state.health and c.state.health.status == "healthy"]
    say("all healthy: " + ", ".join(sorted(c.name for c in containers)))
    return containers


def down(volumes: bool = False) -> None:
    docker = client(["*"])
    docker.compose.down(remove_orphans=True, volumes=volumes, quiet=True)
    say("stack removed" + (" with its volumes (the model cache included)" if volumes else ""))


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
    say(f"scaling {service} to {replicas}")
    docker.compose.up(services=[service], scales={service: replicas}, detach=True, no_build=True,
                      recreate=False, dependencies=False, quiet=True)
    containers = wait_healthy(docker, [service], timeout_s, expected={service: replicas})
    if len(containers) != replicas:
        raise ComposeError(f"{service}: expected {replicas} containers, found {len(containers)}")
    say(f"{service}: {replicas} healthy")
    return containers

