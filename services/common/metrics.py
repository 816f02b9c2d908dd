"""Prometheus endpoint and the metrics every service shares.

Each service exposes `/metrics` on its own port (9101/9102/9103 by default); prometheus_client's default
registry already carries process memory, CPU and open file descriptors, and `serve_metrics` adds the GPU and
memory gauges of `services.common.hardware`. The contract (names, units, labels, buckets) is docs/metrics.md.
"""

from __future__ import annotations

import logging

from prometheus_client import Counter, Gauge, Histogram, Info, start_http_server

from services.common import hardware

_LOGGER = logging.getLogger(__name__)

# Buckets for the services' own histograms, the same as the gateway's: milliseconds resolved where a stage
# is short (endpointing, first token, first audio), seconds for anything that may take a whole turn.
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12)

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
    hardware.register()
    start_http_server(port, addr=host)
    _LOGGER.info("metrics_listening", extra={"address": f"http://{host}:{port}/metrics"})
