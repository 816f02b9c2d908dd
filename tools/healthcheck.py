"""Container health probe: `python -m tools.healthcheck [vad|llm|tts|asr|gateway]` exits 0 when the service serves.

vad, llm, tts and asr are asked over the standard gRPC health service (grpc.health.v1) for their own proto service,
so a process that listens but is still loading its model (NOT_SERVING) is not yet healthy. The gateway is asked
`GET /healthz`, which is 200 only when vad, llm and tts are SERVING (asr is optional to it). The service defaults to
SOTTO_SERVICE (set in each image). Ports come from the same SOTTO_* settings the service reads.
"""

from __future__ import annotations

import argparse
import os
import sys
import urllib.error
import urllib.request

from services.common import config

PROTO_NAMES = {"vad": "sotto.v1.VadService", "llm": "sotto.v1.LlmService", "tts": "sotto.v1.TtsService",
               "asr": "sotto.v1.AsrService"}
SECTIONS = {"vad": config.VadConfig, "llm": config.LlmConfig, "tts": config.TtsConfig, "asr": config.AsrConfig}


def probe_host(common: config.CommonConfig) -> str:
    """Where to reach a server bound to SOTTO_HOST from inside its own container."""
    return "127.0.0.1" if common.host in ("0.0.0.0", "::", "") else common.host


def check_grpc(name: str, host: str, port: int, timeout_s: float) -> tuple[bool, str]:
    import grpc  # imported here: the gateway probe does not need it
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"{host}:{port}") as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=PROTO_NAMES[name]), timeout=timeout_s)
        except grpc.RpcError as exc:
            return False, f"{name} {host}:{port}: {exc.code().name}: {exc.details()}"
    status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
    return reply.status == health_pb2.HealthCheckResponse.SERVING, f"{name} {host}:{port}: {status}"


def check_http(host: str, port: int, timeout_s: float) -> tuple[bool, str]:
    url = f"http://{host}:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as reply:
            return reply.status == 200, f"gateway {url}: {reply.status} {reply.read(300).decode(errors='replace')}"
    except urllib.error.HTTPError as exc:
        return False, f"gateway {url}: {exc.code} {exc.read(300).decode(errors='replace')}"
    except OSError as exc:
        return False, f"gateway {url}: {exc}"


def check(name: str, timeout_s: float = 3.0) -> tuple[bool, str]:
    common = config.load(config.CommonConfig)
    host = probe_host(common)
    if name == "gateway":
        return check_http(host, config.load(config.GatewayConfig).port, timeout_s)
    return check_grpc(name, host, config.load(SECTIONS[name]).port, timeout_s)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.healthcheck", description=__doc__.splitlines()[0])
    parser.add_argument("service", nargs="?", default=os.environ.get("SOTTO_SERVICE"),
                        choices=[*PROTO_NAMES, "gateway"])
    parser.add_argument("--timeout", type=float, default=3.0, help="seconds to wait for the answer")
    args = parser.parse_args(argv)
    if not args.service:
        parser.error("name the service (or set SOTTO_SERVICE)")
    try:
        ok, message = check(args.service, args.timeout)
    except config.ConfigError as exc:
        ok, message = False, f"configuration error: {exc}"
    print(("healthy: " if ok else "unhealthy: ") + message)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
