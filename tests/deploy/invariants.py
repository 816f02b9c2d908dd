"""What compose.yaml must guarantee, checked on one normalised view of it.

Two sources feed the same checks: the compose v2 CLI's own rendering (`docker compose config`, through
python-on-whales), and, where that CLI is missing, the YAML file read with PyYAML and its `${VAR:-default}`
interpolated here. Both become `{service: Service}`.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE_FILE = ROOT / "compose.yaml"
SOTTO = ("vad", "llm", "tts", "asr", "gateway")
OBSERVABILITY = ("prometheus", "grafana")


@dataclass
class Port:
    host_ip: str
    published: int
    target: int


@dataclass
class Volume:
    type: str  # "volume" or "bind"
    source: str
    target: str
    read_only: bool


@dataclass
class Service:
    name: str
    init: bool
    restart: str | None
    healthcheck: list[str]
    ports: list[Port]
    volumes: list[Volume]
    environment: dict[str, Any]
    networks: list[str]
    limits: dict[str, Any]
    profiles: list[str]
    read_only: bool
    user: str | None
    container_name: str | None
    depends_on: dict[str, str] = field(default_factory=dict)


# --- from the compose CLI's JSON rendering ---------------------------------------------------------------------


def from_compose_json(raw: dict[str, Any]) -> dict[str, Service]:
    out = {}
    for name, s in (raw.get("services") or {}).items():
        hc = s.get("healthcheck") or {}
        limits = ((s.get("deploy") or {}).get("resources") or {}).get("limits") or {}
        out[name] = Service(
            name=name, init=bool(s.get("init")), restart=s.get("restart"),
            healthcheck=[] if hc.get("disable") else list(hc.get("test") or []),
            ports=[Port(p.get("host_ip", ""), int(p["published"]), int(p["target"])) for p in s.get("ports") or []],
            volumes=[Volume(v["type"], v.get("source", ""), v["target"], bool(v.get("read_only")))
                     for v in s.get("volumes") or []],
            environment=dict(s.get("environment") or {}), networks=list((s.get("networks") or {}).keys()),
            limits=limits, profiles=list(s.get("profiles") or []), read_only=bool(s.get("read_only")),
            user=s.get("user"), container_name=s.get("container_name"),
            depends_on={k: v.get("condition") for k, v in (s.get("depends_on") or {}).items()})
    return out


# --- from the YAML file itself ---------------------------------------------------------------------------------

_VAR = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")


def interpolate(value: Any, environ: dict[str, str]) -> Any:
    """Compose's `${VAR}`, `${VAR:-default}`, `${VAR-default}` (enough for this file)."""
    if isinstance(value, str):
        def sub(m: re.Match) -> str:
            name, op, arg = m["name"], m["op"], m["arg"]
            if op == ":-":
                return environ.get(name) or arg
            if op == "-":
                return environ.get(name, arg)
            if op in (":?", "?"):
                if not environ.get(name):
                    raise ValueError(f"required variable {name}: {arg}")
            return environ.get(name, "")
        return _VAR.sub(sub, value)
    if isinstance(value, list):
        return [interpolate(v, environ) for v in value]
    if isinstance(value, dict):
        return {k: interpolate(v, environ) for k, v in value.items()}
    return value


def _short_port(text: str) -> Port:
    parts = text.split(":")
    if len(parts) == 3:
        return Port(parts[0], int(parts[1]), int(parts[2].split("/")[0]))
    if len(parts) == 2:
        return Port("", int(parts[0]), int(parts[1].split("/")[0]))
    raise ValueError(f"port {text!r} publishes no host port")


def _short_volume(text: str) -> Volume:
    parts = text.split(":")
    source, target = parts[0], parts[1]
    kind = "bind" if source.startswith((".", "/", "~")) else "volume"
    return Volume(kind, source, target, len(parts) > 2 and "ro" in parts[2].split(","))


def from_yaml(path: Path = COMPOSE_FILE, profiles: tuple[str, ...] = (),
              environ: dict[str, str] | None = None) -> dict[str, Service]:
    """Read compose.yaml with PyYAML (merge keys resolved), interpolate, keep the services of active profiles."""
    raw = interpolate(yaml.safe_load(path.read_text()), dict(os.environ if environ is None else environ))
    out = {}
    for name, s in (raw.get("services") or {}).items():
        if s.get("profiles") and not set(s["profiles"]) & set(profiles):
            continue
        hc = s.get("healthcheck") or {}
        limits = ((s.get("deploy") or {}).get("resources") or {}).get("limits") or {}
        env = s.get("environment") or {}
        if isinstance(env, list):
            env = dict(e.split("=", 1) if "=" in e else (e, None) for e in env)
        networks = s.get("networks") or {}
        depends = s.get("depends_on") or {}
        out[name] = Service(
            name=name, init=s.get("init") is True, restart=s.get("restart"),
            healthcheck=[] if hc.get("disable") else list(hc.get("test") or []),
            ports=[_short_port(p) if isinstance(p, str) else Port(p.get("host_ip", ""), int(p["published"]),
                                                                  int(p["target"])) for p in s.get("ports") or []],
            volumes=[_short_volume(v) if isinstance(v, str) else Volume(v["type"], v.get("source", ""), v["target"],
                                                                        bool(v.get("read_only")))
                     for v in s.get("volumes") or []],
            environment=dict(env), networks=list(networks if isinstance(networks, list) else networks.keys()),
            limits=limits, profiles=list(s.get("profiles") or []), read_only=s.get("read_only") is True,
            user=s.get("user"), container_name=s.get("container_name"),
            depends_on={k: (v or {}).get("condition") for k, v in depends.items()} if isinstance(depends, dict)
            else {k: "service_started" for k in depends})
    return out


# --- the checks ------------------------------------------------------------------------------------------------


def check_default_profile(services: dict[str, Service], publish_port: int = 8000) -> None:
    assert set(services) == set(SOTTO), f"default profile runs {sorted(services)}"
    for s in services.values():
        assert s.init, f"{s.name}: init: true is required (signals and zombies)"
        assert s.healthcheck[:1] and s.healthcheck[0] in ("CMD", "CMD-SHELL"), f"{s.name}: no healthcheck"
        assert s.restart in ("unless-stopped", "always", "on-failure"), f"{s.name}: restart {s.restart!r}"
        assert s.networks == ["sotto"], f"{s.name}: networks {s.networks}"
        assert s.limits.get("cpus") and s.limits.get("memory"), f"{s.name}: resource limits {s.limits}"
        assert s.read_only, f"{s.name}: root filesystem should be read-only"
        assert s.container_name is None, f"{s.name}: a fixed container_name prevents scaling"
        assert s.user and not s.user.startswith("0"), f"{s.name}: runs as {s.user!r}"
        assert s.environment.get("SOTTO_HOST") == "0.0.0.0", f"{s.name}: SOTTO_HOST inside a container"
        assert s.environment.get("SOTTO_MODEL_DIR") == "/models", f"{s.name}: SOTTO_MODEL_DIR"
    for name in ("vad", "llm", "tts", "asr"):
        s = services[name]
        assert s.healthcheck[1:] == ["python", "-m", "tools.healthcheck", name], s.healthcheck
        assert not s.ports, f"{name} must not publish ports: {s.ports}"
        models = [v for v in s.volumes if v.target == "/models"]
        assert len(models) == 1 and models[0].type == "volume" and models[0].source.endswith("models"), s.volumes
    assert services["vad"].volumes[0].read_only  # vad only ever reads a model
    gw = services["gateway"]
    assert gw.healthcheck[1:] == ["python", "-m", "tools.healthcheck", "gateway"], gw.healthcheck
    assert [(p.host_ip, p.published, p.target) for p in gw.ports] == [("127.0.0.1", publish_port, 8000)], gw.ports
    assert not gw.volumes, "the gateway needs no models"
    assert gw.environment["SOTTO_VAD_ADDR"] == "vad:50051"
    assert gw.environment["SOTTO_LLM_ADDR"] == "dns:///llm:50052"
    assert gw.environment["SOTTO_TTS_ADDR"] == "tts:50053"
    assert gw.environment["SOTTO_ASR_ADDR"] == "asr:50054"
    assert gw.depends_on == {"vad": "service_healthy", "llm": "service_healthy", "tts": "service_healthy",
                             "asr": "service_healthy"}


def check_observability_profile(services: dict[str, Service]) -> None:
    assert set(services) == set(SOTTO) | set(OBSERVABILITY), sorted(services)
    for name in OBSERVABILITY:
        s = services[name]
        assert s.profiles == ["observability"], s.profiles
        assert s.init and s.healthcheck and s.restart and s.networks == ["sotto"] and s.limits
        assert all(p.host_ip == "127.0.0.1" for p in s.ports), f"{name} publishes beyond loopback: {s.ports}"
    binds = {v.target: v.source for v in services["prometheus"].volumes if v.type == "bind"}
    assert binds["/etc/prometheus"].rstrip("/").endswith("deploy/prometheus"), binds
    binds = {v.target: v.source for v in services["grafana"].volumes if v.type == "bind"}
    assert binds["/etc/grafana/provisioning"].rstrip("/").endswith("deploy/grafana/provisioning"), binds
    assert binds["/var/lib/grafana/dashboards"].rstrip("/").endswith("deploy/grafana/dashboards"), binds
    published = [s.name for s in services.values() if s.ports]
    assert sorted(published) == ["gateway", "grafana", "prometheus"], published
