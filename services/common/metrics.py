"""Prometheus endpoint and the metrics every service shares.

Each service exposes `/metrics` on its own port (9101/9102/9103 by default); prometheus_client's default
registry already carries process memory, CPU and open file descriptors.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, Histogram, Info, start_http_server

_LOGGER = logging.getLogger(__name__)

SERVICE_INFO = Info("sotto_service", "What the service runs: model, backend, engine.")
SERVING = Gauge("sotto_service_serving", "1 once the model is loaded and warmed up (health SERVING), else 0.")
LOAD_SECONDS = Gauge("sotto_service_load_seconds", "Time from process start to SERVING (model load + warm-up).")
RPC_TOTAL = Counter("sotto_rpc_total", "Finished RPCs by method and status code.", ["method", "code"])
RPC_SECONDS = Histogram(
    "sotto_rpc_seconds", "Duration of RPCs by method.", ["method"],
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64),
)


def serve_metrics(host: str, port: int) -> None:
    """Start the `/metrics` HTTP endpoint in a daemon thread (prometheus_client's own server)."""
    start_http_server(port, addr=host)
    _LOGGER.info("metrics_listening", extra={"address": f"http://{host}:{port}/metrics"})
