"""The gRPC bootstrap the three services share.

Start order matters: the server listens at once and answers health checks with NOT_SERVING while the model
loads and warms up, then flips to SERVING. That lets the runner (and Kubernetes-style probes) tell "starting"
from "down"; the service's own methods answer UNAVAILABLE until then (services.common.interceptor).
SIGTERM/SIGINT flip health back to NOT_SERVING and give in-flight calls a grace period.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection

from services.common import metrics
from services.common.channels import server_options
from services.common.config import CommonConfig
from services.common.interceptor import ServiceInterceptor

_LOGGER = logging.getLogger(__name__)
_STARTED = time.monotonic()


@dataclass
class ServiceSpec:
    """What a service plugs into the shared bootstrap."""

    name: str                                   # "vad", "llm", "tts"
    service_names: Sequence[str]                # full proto names, e.g. "sotto.v1.VadService"
    port: int
    metrics_port: int
    register: Callable[[grpc.aio.Server], None]  # adds the servicers, which are called only once `load` is done
    load: Callable[[], Awaitable[dict[str, str]]]  # preload + warm up; returns info (model, backend, ...)
    close: Callable[[], Awaitable[None]] | None = None


async def run(spec: ServiceSpec, common: CommonConfig) -> None:
    """Serve until SIGTERM/SIGINT. Raises (exit non-zero) if the model cannot be loaded."""
    interceptor = ServiceInterceptor(spec.service_names)
    server = grpc.aio.server(options=server_options(common), interceptors=[interceptor])
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    spec.register(server)
    reflection.enable_server_reflection(
        [*spec.service_names, health.SERVICE_NAME, reflection.SERVICE_NAME], server)
    address = f"{common.host}:{spec.port}"
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot listen on {address}")
    await _set_health(health_servicer, spec, health_pb2.HealthCheckResponse.NOT_SERVING)
    await server.start()
    metrics.serve_metrics(common.host, spec.metrics_port)
    _LOGGER.info("listening", extra={"address": address})

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)

    load_task = asyncio.create_task(spec.load(), name=f"{spec.name}::load")
    stop_task = asyncio.create_task(stop.wait(), name=f"{spec.name}::stop")
    try:
        await asyncio.wait({load_task, stop_task}, return_when=asyncio.FIRST_COMPLETED)
        if load_task.done():
            info = load_task.result()  # a load failure propagates: the runner restarts us with backoff
            interceptor.loaded = True
            metrics.SERVICE_INFO.info(info)
            metrics.SERVING.set(1)
            metrics.LOAD_SECONDS.set(time.monotonic() - _STARTED)
            await _set_health(health_servicer, spec, health_pb2.HealthCheckResponse.SERVING)
            _LOGGER.info("serving", extra={**info, "load_ms": round((time.monotonic() - _STARTED) * 1000)})
            await stop_task
        _LOGGER.info("stopping", extra={"grace_s": common.shutdown_grace_s})
    finally:
        for task in (load_task, stop_task):
            task.cancel()
        metrics.SERVING.set(0)
        await health_servicer.enter_graceful_shutdown()
        await server.stop(common.shutdown_grace_s)
        if spec.close is not None:
            await spec.close()
        _LOGGER.info("stopped")


async def _set_health(servicer: health.aio.HealthServicer, spec: ServiceSpec, status: int) -> None:
    await servicer.set("", status)
    for name in spec.service_names:
        await servicer.set(name, status)


def main(spec_factory: Callable[[], tuple[ServiceSpec, CommonConfig]]) -> None:
    """Entry point shared by `python -m services.<name>.server`."""
    spec, common = spec_factory()
    try:
        asyncio.run(run(spec, common))
    except KeyboardInterrupt:
        pass

