"""The swarm stack tools.compose.swarm renders from compose.yaml (no engine needed: the compose CLI renders, the
docker CLI's `stack config` checks): every model service balanced by DNS, restarted by the swarm, hardened as under
compose; the llm on GPU nodes with `--gpu`."""

from __future__ import annotations

import shutil
import subprocess

import pytest
import yaml

from tests.deploy.test_compose_config import _compose_client, no_overrides  # noqa: F401 - a fixture

pytest.importorskip("python_on_whales", reason="python-on-whales is not installed (the deploy test deps)")

from tools.compose import swarm  # noqa: E402

MODEL_SERVICES = ("vad", "llm", "tts", "asr")


@pytest.fixture
def stack(no_overrides: None) -> dict:  # noqa: F811 - the fixture imported above
    return swarm.stack_file(_compose_client())


def test_model_services_resolve_to_every_task_and_restart(stack: dict) -> None:
    services = stack["services"]
    assert set(services) == {*MODEL_SERVICES, "gateway"}
    for name, svc in services.items():
        deploy = svc["deploy"]
        assert deploy["endpoint_mode"] == "dnsrr", name  # host publishing: no VIP (it needs IPVS) anywhere
        assert deploy["restart_policy"]["condition"] == "any", name
        assert deploy["replicas"] == 1 and {"cpus", "memory"} <= set(deploy["resources"]["limits"]), name
        assert not set(svc) & set(swarm._COMPOSE_ONLY), name
        assert svc["read_only"] is True and svc["cap_drop"] == ["ALL"] and svc["user"] == "10001:10001", name
        assert {"type": "tmpfs", "target": "/tmp", "tmpfs": {"size": 512 * 1024**2}} in svc["volumes"], name
        assert svc["healthcheck"]["test"][:4] == ["CMD", "python", "-m", "tools.healthcheck"], name
    assert services["gateway"]["ports"] == [{"target": 8000, "published": 8000, "protocol": "tcp", "mode": "host"}]
    assert all("ports" not in services[n] for n in MODEL_SERVICES)
    assert services["gateway"]["environment"]["SOTTO_LLM_ADDR"] == "dns:///llm:50052"
    assert stack["networks"] == {"sotto": {"driver": "overlay", "attachable": True}}


def test_ingress_publishing_keeps_the_gateway_behind_a_vip(no_overrides: None) -> None:  # noqa: F811
    gateway = swarm.stack_file(_compose_client(), publish_mode="ingress")["services"]["gateway"]
    assert gateway["ports"][0]["mode"] == "ingress" and gateway["deploy"]["endpoint_mode"] == "vip"


def test_gpu_places_the_llm_on_labelled_nodes_with_one_gpu(no_overrides: None) -> None:  # noqa: F811
    services = swarm.stack_file(_compose_client(), gpu=True)["services"]
    llm = services["llm"]["deploy"]
    assert llm["placement"]["constraints"] == ["node.labels.sotto.gpu == true"]
    assert llm["resources"]["reservations"]["generic_resources"] == [
        {"discrete_resource_spec": {"kind": "NVIDIA-GPU", "value": 1}}]
    assert services["llm"]["environment"]["SOTTO_LLM_BACKEND"] == "gpu"
    assert "placement" not in services["tts"]["deploy"]


def test_a_bad_publish_mode_is_refused_naming_the_choices(no_overrides: None) -> None:  # noqa: F811
    with pytest.raises(swarm.ComposeError, match="one of host, ingress"):
        swarm.stack_file(_compose_client(), publish_mode="mesh")


def test_the_docker_cli_accepts_the_stack(stack: dict, tmp_path) -> None:
    if shutil.which("docker") is None:
        pytest.skip("no docker CLI on PATH to check the stack with `docker stack config`")
    path = tmp_path / "stack.yaml"
    path.write_text(yaml.safe_dump(stack))
    done = subprocess.run(["docker", "stack", "config", "-c", str(path)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert yaml.safe_load(done.stdout)["services"]["llm"]["deploy"]["endpoint_mode"] == "dnsrr"
