"""tools/healthcheck.py against real servers, and the parts of tools.compose that need no engine."""

from __future__ import annotations

import argparse
import http.server
import os
import shutil
import socket
import threading
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from tools import healthcheck


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def grpc_health_server():
    servicer = health.HealthServicer()
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield servicer, port
    server.stop(0)


def test_grpc_probe_follows_the_service_status(grpc_health_server, monkeypatch, capsys) -> None:
    servicer, port = grpc_health_server
    monkeypatch.setenv("SOTTO_HOST", "0.0.0.0")  # as in a container: the probe asks 127.0.0.1
    monkeypatch.setenv("SOTTO_LLM_PORT", str(port))
    servicer.set("sotto.v1.LlmService", health_pb2.HealthCheckResponse.NOT_SERVING)
    assert healthcheck.main(["llm"]) == 1
    assert "NOT_SERVING" in capsys.readouterr().out
    servicer.set("sotto.v1.LlmService", health_pb2.HealthCheckResponse.SERVING)
    assert healthcheck.main(["llm"]) == 0
    assert capsys.readouterr().out.startswith("healthy: llm 127.0.0.1:")
    # The overall status ("") does not count: the probe asks for the service's own proto name.
    servicer.set("sotto.v1.LlmService", health_pb2.HealthCheckResponse.NOT_SERVING)
    servicer.set("", health_pb2.HealthCheckResponse.SERVING)
    assert healthcheck.main(["llm"]) == 1


def test_grpc_probe_nothing_listening(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SOTTO_HOST", "127.0.0.1")
    monkeypatch.setenv("SOTTO_VAD_PORT", str(_free_port()))
    assert healthcheck.main(["vad", "--timeout", "1"]) == 1
    out = capsys.readouterr().out
    assert out.startswith("unhealthy: vad") and "UNAVAILABLE" in out


def test_probe_reads_the_service_from_the_image_env(grpc_health_server, monkeypatch) -> None:
    servicer, port = grpc_health_server
    servicer.set("sotto.v1.TtsService", health_pb2.HealthCheckResponse.SERVING)
    monkeypatch.setenv("SOTTO_SERVICE", "tts")
    monkeypatch.setenv("SOTTO_TTS_PORT", str(port))
    monkeypatch.setenv("SOTTO_HOST", "0.0.0.0")
    assert healthcheck.main([]) == 0


def test_probe_bad_setting_is_unhealthy_not_a_traceback(monkeypatch, capsys) -> None:
    monkeypatch.setenv("SOTTO_VAD_PORT", "not-a-port")
    assert healthcheck.main(["vad"]) == 1
    assert "SOTTO_VAD_PORT='not-a-port' is not valid" in capsys.readouterr().out


@pytest.mark.parametrize("status", [200, 503])
def test_gateway_probe_uses_healthz(status: int, monkeypatch) -> None:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            code = status if self.path == "/healthz" else 404
            self.send_response(code)
            self.end_headers()
            self.wfile.write(b'{"status": "x"}')

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        monkeypatch.setenv("SOTTO_HOST", "0.0.0.0")
        monkeypatch.setenv("SOTTO_GATEWAY_PORT", str(server.server_address[1]))
        assert healthcheck.main(["gateway"]) == (0 if status == 200 else 1)
    finally:
        server.shutdown()
        server.server_close()


# --- tools.compose without an engine --------------------------------------------------------------------------

pytest.importorskip("python_on_whales", reason="python-on-whales is not installed (the deploy test deps)")

from tools.compose import engine, model_env, stack  # noqa: E402
from tools.compose.__main__ import parse_scale  # noqa: E402
from tools.compose.common import ComposeError  # noqa: E402


def test_parse_scale() -> None:
    assert parse_scale("llm=2") == ("llm", 2)
    for bad in ("llm", "llm=two", "=2", "llm=-1"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected SERVICE=N"):
            parse_scale(bad)


def test_scale_refuses_what_cannot_scale() -> None:
    with pytest.raises(ComposeError, match="publishes a host port"):
        stack.scale("gateway", 2)
    with pytest.raises(ComposeError, match="unknown service"):
        stack.scale("redis", 2)
    with pytest.raises(ComposeError, match="at least 1"):
        stack.scale("llm", 0)


@pytest.mark.skipif(shutil.which("docker") is None, reason="no docker CLI on PATH")
def test_availability_names_the_failed_check(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SOTTO_RUN_DIR", str(tmp_path))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-engine.sock")
    avail = engine.availability()
    assert not avail.ok
    assert avail.problem.startswith("no Docker engine: `docker info` failed (exit 1): ")
    assert "no-engine.sock" in avail.problem
    with pytest.raises(ComposeError, match="no Docker engine"):
        engine.client(avail=avail)


def test_container_env_maps_host_model_paths(tmp_path: Path) -> None:
    models = tmp_path / "models"
    (models / "llm").mkdir(parents=True)
    environ = {"SOTTO_MODEL_DIR": str(models), "SOTTO_LLM_MODEL": str(models / "llm" / "tiny.litertlm"),
               "SOTTO_TTS_MODEL": "/models/kokoro"}
    env = model_env.container_env(environ, host_models=True)
    assert env["SOTTO_MODEL_VOLUME"] == str(models.resolve())
    assert env["SOTTO_LLM_MODEL"] == "/models/llm/tiny.litertlm"
    assert "SOTTO_TTS_MODEL" not in env  # already a container path
    if os.geteuid() != 0:
        assert env["SOTTO_CONTAINER_USER"] == f"{os.getuid()}:{os.getgid()}"
    assert model_env.container_env({"SOTTO_MODEL_DIR": str(models)}, host_models=False) == {}


def test_container_env_refuses_paths_containers_cannot_see(tmp_path: Path) -> None:
    outside = tmp_path / "elsewhere.litertlm"
    with pytest.raises(ComposeError, match="SOTTO_LLM_MODEL=.* is a path on this host"):
        model_env.container_env({"SOTTO_MODEL_DIR": str(tmp_path / "m"), "SOTTO_LLM_MODEL": str(outside)}, False)
    with pytest.raises(ComposeError, match="is not a folder"):
        model_env.container_env({"SOTTO_MODEL_DIR": str(tmp_path / "missing")}, True)
