"""Sotto on Docker Swarm: `python -m tools.compose swarm up|scale|ps|down`.

The stack is compose.yaml itself, rendered by the compose CLI (`docker compose config`: interpolation, anchors,
sotto.env) and then given the few keys a swarm reads differently, so the two deployments cannot drift:
- `build`, `depends_on`, `restart`, `security_opt` and `tmpfs` are compose-only: the swarm restarts by
  `deploy.restart_policy`, orders nothing (the gateway reports a dependency that is not serving yet and its
  channels connect when it is), and takes /tmp as a tmpfs mount;
- the private network is an attachable overlay, so tasks on every node reach each other;
- the gateway's port is published on the nodes that run it (`host`) or through the routing mesh (`ingress`,
  which needs IPVS in the kernel); a swarm cannot bind it to one host address: see docs/scaling.md for what that
  means for SOTTO_GATEWAY_TOKEN;
- with `--gpu` the llm is placed on nodes labelled `sotto.gpu=true` and reserves one `NVIDIA-GPU` generic resource
  (the node's dockerd must advertise it: docs/scaling.md).
vad, llm, tts and asr use `endpoint_mode: dnsrr` (compose.yaml's deploy sections): their names resolve to every
task, and the gateway's channels balance over them (services/common/channels.py).
"""

from __future__ import annotations

import os
import re
import time
from typing import Any

import yaml
from python_on_whales import DockerClient

from tools.compose.common import ComposeError, run_dir, say, short
from tools.compose.engine import client
from tools.compose.images import build
from tools.compose.model_env import apply_container_env

UP_TIMEOUT_S = 600.0
POLL_S = 2.0
GPU_LABEL = "sotto.gpu"  # `docker node update --label-add sotto.gpu=true NODE` marks a GPU node
GPU_RESOURCE = "NVIDIA-GPU"  # the generic resource kind a GPU node's dockerd advertises (node-generic-resources)
# host: the gateway's port is bound on each node that runs a gateway task (one per node); ingress: the routing
# mesh answers on every node's port and forwards to any gateway task, which needs IPVS in the kernel.
PUBLISH_MODES = ("host", "ingress")
_COMPOSE_ONLY = ("build", "depends_on", "restart", "security_opt", "tmpfs", "profiles", "container_name",
                 "env_file", "entrypoint")
_SIZE = re.compile(r"^(\d+)([kmg]?)$")


def stack_name() -> str:
    return os.environ.get("SOTTO_STACK_NAME", "sotto")


def _tmpfs_mount(spec: str) -> dict[str, Any]:
    """`/tmp:rw,exec,size=512m` (compose) as a swarm tmpfs mount; a swarm mount takes only a size and a mode."""
    target, _, opts = spec.partition(":")
    mount: dict[str, Any] = {"type": "tmpfs", "target": target}
    for opt in opts.split(","):
        key, _, value = opt.partition("=")
        match = _SIZE.match(value.lower()) if key == "size" else None
        if match:
            mount["tmpfs"] = {"size": int(match[1]) * {"": 1, "k": 1024, "m": 1024**2, "g": 1024**3}[match[2]]}
    return mount


def swarm_service(rendered: dict[str, Any], publish_mode: str = "host") -> dict[str, Any]:
    """One service of `docker compose config`'s JSON, as `docker stack deploy` wants it."""
    svc = {k: v for k, v in rendered.items() if k not in _COMPOSE_ONLY and v is not None}
    svc["environment"] = {k: v for k, v in (rendered.get("environment") or {}).items() if v is not None}
    svc["networks"] = sorted(rendered.get("networks") or {})
    svc["volumes"] = [{k: v for k, v in vol.items() if k in ("type", "source", "target", "read_only")}
                      for vol in rendered.get("volumes") or []]
    svc["volumes"] += [_tmpfs_mount(spec) for spec in rendered.get("tmpfs") or []]
    deploy = dict(rendered.get("deploy") or {})
    if rendered.get("ports"):
        svc["ports"] = [{"target": p["target"], "published": int(p["published"]), "protocol": p["protocol"],
                         "mode": publish_mode} for p in rendered["ports"]]
        if publish_mode == "host":
            deploy["endpoint_mode"] = "dnsrr"  # a VIP needs IPVS too; nothing inside the stack calls the gateway
    if not deploy.get("placement"):
        deploy.pop("placement", None)
    limits = (deploy.get("resources") or {}).get("limits") or {}
    if "cpus" in limits:
        limits["cpus"] = str(limits["cpus"])
    svc["deploy"] = deploy
    return svc


def add_gpu(llm: dict[str, Any]) -> None:
    """Place the llm on GPU nodes and reserve one GPU there (LiteRT-LM's GPU backend: docs/gpu.md)."""
    llm["environment"].update({"NVIDIA_DRIVER_CAPABILITIES": "compute,utility,graphics", "SOTTO_LLM_BACKEND": "gpu"})
    deploy = llm["deploy"]
    deploy.setdefault("placement", {})["constraints"] = [f"node.labels.{GPU_LABEL} == true"]
    reservations = deploy.setdefault("resources", {}).setdefault("reservations", {})
    reservations["generic_resources"] = [{"discrete_resource_spec": {"kind": GPU_RESOURCE, "value": 1}}]


def stack_file(docker: DockerClient, gpu: bool = False, publish_mode: str = "host") -> dict[str, Any]:
    """The swarm stack: compose.yaml's default services, rendered, with the swarm's keys (module docstring)."""
    if publish_mode not in PUBLISH_MODES:
        raise ComposeError(f"publish mode {publish_mode!r}: one of {', '.join(PUBLISH_MODES)}")
    rendered = docker.compose.config(return_json=True)
    services = {name: swarm_service(svc, publish_mode) for name, svc in rendered["services"].items()}
    if gpu:
        add_gpu(services["llm"])
    named = sorted({v["source"] for s in services.values() for v in s["volumes"] if v["type"] == "volume"})
    return {"services": services,
            "networks": {name: {"driver": "overlay", "attachable": True} for name in rendered.get("networks", {})},
            "volumes": {name: {} for name in named}}


def write_stack_file(docker: DockerClient, gpu: bool = False, publish_mode: str = "host") -> str:
    path = run_dir() / f"swarm-{stack_name()}.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(stack_file(docker, gpu, publish_mode), sort_keys=False))
    return str(path)


def ensure_swarm(docker: DockerClient, advertise_addr: str) -> None:
    """Make this engine a swarm manager if it is in no swarm yet (a single-node swarm; others join: docs)."""
    state = docker.info().swarm.local_node_state
    if state == "active":
        return
    say(f"docker swarm init --advertise-addr {advertise_addr}")
    docker.swarm.init(advertise_address=advertise_addr)


def _services(docker: DockerClient) -> list:
    return docker.service.list(filters=[("label", f"com.docker.stack.namespace={stack_name()}")])


def _short_name(service) -> str:
    return service.spec.name.removeprefix(stack_name() + "_")


def tasks(docker: DockerClient) -> list[dict[str, str]]:
    """Every task of the stack that should run, with its state and container id (for ps and the tests)."""
    rows = []
    for svc in _services(docker):
        for task in docker.service.ps(svc):
            status = task.status
            cs = status.container_status
            rows.append({"service": _short_name(svc), "slot": str(task.slot or ""), "task": task.id[:12],
                         "desired": task.desired_state, "state": status.state,
                         "container": cs.container_id if cs and cs.container_id else "",
                         "node": task.node_id[:12] if task.node_id else "", "error": status.err or ""})
    return rows


def wait_running(docker: DockerClient, timeout_s: float, expected: dict[str, int] | None = None) -> dict[str, int]:
    """Poll until each service runs as many healthy tasks as it asks for (a swarm task with a health check is
    `starting` until its check passes, then `running`)."""
    deadline = time.monotonic() + timeout_s
    last = ""
    while True:
        services = _services(docker)
        want = {_short_name(s): (s.spec.mode.get("Replicated") or {}).get("Replicas", 1) for s in services}
        want.update(expected or {})
        rows = tasks(docker)
        running = {name: sum(1 for r in rows if r["service"] == name and r["desired"] == "running"
                             and r["state"] == "running") for name in want}
        line = ", ".join(f"{n} {running[n]}/{want[n]}" for n in sorted(want))
        if line != last:
            say(line)
            last = line
        updating = [_short_name(s) for s in services
                    if s.update_status and s.update_status.state in ("updating", "rollback_started")]
        if services and not updating and all(running[n] >= want[n] for n in want):
            return running
        if time.monotonic() > deadline:
            failing = [f"{r['service']}.{r['slot']} {r['state']}: {short(r['error'], 200)}" for r in rows
                       if r["error"] and r["desired"] == "running"]
            raise ComposeError(f"stack {stack_name()} not running after {timeout_s:.0f} s: {line}"
                               + ("\n" + "\n".join(failing) if failing else ""))
        time.sleep(POLL_S)


def up(timeout_s: float = UP_TIMEOUT_S, build_images: bool = True, host_models: bool = False, gpu: bool = False,
       advertise_addr: str = "127.0.0.1", publish_mode: str = "host") -> dict[str, int]:
    """Build the images (unless told not to), make a swarm if needed, deploy the stack, wait until it runs."""
    apply_container_env(host_models)
    docker = client()
    if build_images:
        build(docker)
    ensure_swarm(docker, advertise_addr)
    path = write_stack_file(docker, gpu, publish_mode)
    say(f"docker stack deploy {stack_name()} (from {path})")
    # resolve_image=never: the images are this engine's own (or a registry's, already pushed): docs/scaling.md
    docker.stack.deploy(stack_name(), compose_files=[path], resolve_image="never")
    running = wait_running(docker, timeout_s)
    say(f"stack {stack_name()} running: " + ", ".join(f"{n}={c}" for n, c in sorted(running.items())))
    return running


def scale(service: str, replicas: int, timeout_s: float = UP_TIMEOUT_S) -> dict[str, int]:
    if replicas < 0:
        raise ComposeError("replicas must be 0 or more")
    docker = client()
    names = {_short_name(s) for s in _services(docker)}
    if service not in names:
        raise ComposeError(f"stack {stack_name()} has no service {service!r}; it has {', '.join(sorted(names))}")
    say(f"scaling {service} to {replicas}")
    docker.service.scale({f"{stack_name()}_{service}": replicas}, detach=True)
    return wait_running(docker, timeout_s, expected={service: replicas})


def ps() -> list[dict[str, str]]:
    return [r for r in tasks(client()) if r["desired"] == "running" or r["error"]]


def down(leave: bool = False, volumes: bool = False, timeout_s: float = 60.0) -> None:
    """Remove the stack and wait until its tasks and network are gone; with `volumes` its volumes too (the model
    cache!), with `leave` the swarm as well."""
    docker = client()
    if docker.info().swarm.local_node_state == "active":
        if _services(docker):
            docker.stack.remove(stack_name())
        deadline = time.monotonic() + timeout_s
        label = f"com.docker.stack.namespace={stack_name()}"
        while (docker.container.list(all=True, filters=[("label", label)])
               or docker.network.list(filters=[("label", label)])):
            if time.monotonic() > deadline:
                raise ComposeError(f"stack {stack_name()}: containers or network still there after {timeout_s:.0f} s")
            time.sleep(1.0)
        if volumes:
            docker.volume.remove(docker.volume.list(filters=[("label", label)]))
        say(f"stack {stack_name()} removed" + (" with its volumes" if volumes else ""))
        if leave:
            docker.swarm.leave(force=True)
            say("left the swarm")
