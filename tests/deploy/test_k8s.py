"""deploy/k8s renders with kustomize (kubectl's own), validates against the Kubernetes API schemas, passes a
security lint, and keeps the shape Sotto needs: gRPC-health probes, a headless llm Service for client-side
balancing, GPU requests and node selection for the llm on the GPU overlay, session affinity on the gateway,
non-root pods with read-only root filesystems and resource limits.

The tools live in their own venv, .venv-k8s (`make k8s-tools`, which `make test` runs first; pins in
deploy/k8s/requirements.txt): without it the tests skip naming the command that makes it.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
BIN = ROOT / ".venv-k8s" / "bin"
KUBERNETES_VERSION = "1.33"  # the oldest Kubernetes the manifests promise to run on (gRPC probes need 1.27)


def _tool(name: str) -> Path:
    path = BIN / name
    if not path.exists():
        pytest.skip(f"{path} is missing: run `make k8s-tools` (the pins are in deploy/k8s/requirements.txt)")
    return path


def _render(overlay: Path) -> str:
    done = subprocess.run([str(_tool("kubectl")), "kustomize", str(overlay)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d]


@pytest.fixture(scope="module", params=["base", "gpu"])
def rendered(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    overlay = K8S / request.param
    out = tmp_path_factory.mktemp(f"k8s-{request.param}") / "rendered.yaml"
    out.write_text(_render(overlay))
    return request.param, out


def test_every_manifest_validates_against_the_kubernetes_schemas(rendered: tuple[str, Path]) -> None:
    _, path = rendered
    done = subprocess.run([str(_tool("kubernetes-validate")), "--strict", "-k", KUBERNETES_VERSION, str(path)],
                          capture_output=True, text=True, timeout=300)
    output = done.stdout + done.stderr
    assert done.returncode == 0, output
    assert output.count(" passed for resource ") == len(_docs(path.read_text())), output


def test_security_lint_passes(rendered: tuple[str, Path]) -> None:
    _, path = rendered
    done = subprocess.run([str(_tool("checkov")), "--quiet", "--compact", "--framework", "kubernetes",
                           "--config-file", str(K8S / "checkov.yaml"), "--output", "json", "--file", str(path)],
                          capture_output=True, text=True, timeout=600)
    report = json.loads(done.stdout)
    summary = report["summary"] if isinstance(report, dict) else report[0]["summary"]
    assert summary["failed"] == 0 and done.returncode == 0, done.stdout[-4000:]
    assert summary["passed"] > 50, summary  # it really looked at the pods


def _by_kind(path: Path) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in _docs(path.read_text())}


def test_the_shape_sotto_needs(rendered: tuple[str, Path]) -> None:
    flavour, path = rendered
    docs = _by_kind(path)
    for name, proto in (("vad", "VadService"), ("llm", "LlmService"), ("tts", "TtsService"), ("asr", "AsrService")):
        pod = docs[("Deployment", name)]["spec"]["template"]
        container = pod["spec"]["containers"][0]
        assert container["readinessProbe"]["grpc"]["service"] == f"sotto.v1.{proto}"
        assert "grpc" in container["livenessProbe"] and "grpc" in container["startupProbe"]
        assert docs[("Service", name)]["spec"]["clusterIP"] == "None"  # headless: every pod's address
        assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
        assert ("PodDisruptionBudget", name) in docs
    for (kind, name), doc in docs.items():
        if kind != "Deployment":
            continue
        spec = doc["spec"]["template"]["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, name
        for c in spec["containers"]:
            assert c["securityContext"]["readOnlyRootFilesystem"] is True, name
            assert c["securityContext"]["allowPrivilegeEscalation"] is False, name
            assert {"cpu", "memory"} <= set(c["resources"]["limits"]), name
    gateway = docs[("Service", "gateway")]["spec"]
    assert gateway["sessionAffinity"] == "ClientIP"
    env = {e["name"]: e for e in docs[("Deployment", "gateway")]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["SOTTO_LLM_ADDR"]["value"] == "dns:///llm:50052"
    assert "secretKeyRef" in env["SOTTO_GATEWAY_TOKEN"]["valueFrom"]
    hpa = docs[("HorizontalPodAutoscaler", "llm")]["spec"]
    assert {m["type"] for m in hpa["metrics"]} == {"Pods", "Resource"}
    llm = docs[("Deployment", "llm")]["spec"]["template"]["spec"]
    if flavour == "gpu":
        assert llm["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == 1
        assert llm["nodeSelector"] == {"sotto.gpu": "true"}
    else:
        assert "nvidia.com/gpu" not in llm["containers"][0]["resources"]["limits"]


def test_the_service_monitor_renders() -> None:
    docs = _docs(_render(K8S / "prometheus-operator"))
    assert [d["kind"] for d in docs] == ["ServiceMonitor"]
    assert docs[0]["metadata"]["namespace"] == "sotto"
