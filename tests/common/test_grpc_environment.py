"""The gRPC settings every service process starts with (services/__init__.py)."""

import os
import subprocess
import sys

import services

PROBE = ("import os, services.common.grpc_server, grpc; grpc.aio.server(); "
         "print(os.environ.get('GRPC_EXPERIMENTS'))")


def _start_a_server(env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True, timeout=60,
                          check=True)


def test_a_service_process_turns_off_the_event_engine_and_grpc_knows_the_experiments():
    env = {k: v for k, v in os.environ.items() if k != "GRPC_EXPERIMENTS"}
    done = _start_a_server(env)
    assert done.stdout.strip() == services.GRPC_EXPERIMENTS
    # A grpcio that no longer has these experiments says so on stderr; the setting would then do nothing.
    assert "Unknown experiment" not in done.stderr


def test_the_environment_wins_over_the_default():
    done = _start_a_server({**os.environ, "GRPC_EXPERIMENTS": ""})
    assert done.stdout.strip() == ""
