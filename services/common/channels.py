"""The options of every long-lived gRPC channel between Sotto's processes, and of the servers they reach.

One process may face several replicas of a service (`docker compose --scale`, a swarm service with
`endpoint_mode: dnsrr`, a Kubernetes headless Service): the name then resolves to every replica's address. A
plain channel would pin all its calls to one of them for its whole life, so the client side asks gRPC for:
- `round_robin` over every resolved address (a `dns:///name:port` target; with one address it behaves like
  pick_first);
- client-side health checking (`healthCheckConfig`, the standard `grpc.health.v1.Health/Watch`), so a replica
  still loading its model, or one draining after SIGTERM, gets no calls;
- keepalive pings, so a replica whose host or network went silent is dropped from the rotation within
  SOTTO_GRPC_KEEPALIVE_MS + SOTTO_GRPC_KEEPALIVE_TIMEOUT_MS instead of at the kernel's TCP timeout;
- quick DNS re-resolution (SOTTO_GRPC_DNS_REFRESH_MS) when a connection is lost.

gRPC re-resolves a name only when a connection ends; it never polls DNS. New replicas are found because each
server ends its connections after SOTTO_GRPC_MAX_CONNECTION_AGE_MS (gRFC A9: a GOAWAY, calls in flight finish
first), which makes the client resolve again and connect to every address it now gets.
"""

from __future__ import annotations

import json

import grpc

from services.common.config import CommonConfig

Options = list[tuple[str, str | int]]


def service_config(health_service: str | None) -> str:
    """The channel's service config: round_robin, plus client-side health checking of `health_service`."""
    config: dict = {"loadBalancingConfig": [{"round_robin": {}}]}
    if health_service:
        config["healthCheckConfig"] = {"serviceName": health_service}
    return json.dumps(config)


def client_options(common: CommonConfig, health_service: str | None = None) -> Options:
    """Channel options for a long-lived channel to a service that may run as several replicas."""
    return [
        ("grpc.max_receive_message_length", common.grpc_max_message_bytes),
        ("grpc.max_send_message_length", common.grpc_max_message_bytes),
        ("grpc.service_config", service_config(health_service)),
        ("grpc.keepalive_time_ms", common.grpc_keepalive_ms),
        ("grpc.keepalive_timeout_ms", common.grpc_keepalive_timeout_ms),
        ("grpc.keepalive_permit_without_calls", 1),  # an idle replica that vanished is noticed before a turn
        ("grpc.http2.max_pings_without_data", 0),
        ("grpc.dns_min_time_between_resolutions_ms", common.grpc_dns_refresh_ms),
    ]


def server_options(common: CommonConfig) -> Options:
    """Server options matching `client_options`: accept the keepalive pings, age connections out."""
    options: Options = [
        ("grpc.max_receive_message_length", common.grpc_max_message_bytes),
        ("grpc.max_send_message_length", common.grpc_max_message_bytes),
        ("grpc.so_reuseport", 0),
        ("grpc.keepalive_permit_without_calls", 1),
        ("grpc.http2.max_ping_strikes", 0),  # never GOAWAY a client for pinging; its interval is its own setting
    ]
    if common.grpc_max_connection_age_ms:
        options.append(("grpc.max_connection_age_ms", common.grpc_max_connection_age_ms))
    return options


def open_channel(address: str, common: CommonConfig, health_service: str | None = None) -> grpc.aio.Channel:
    """An asyncio channel to `address` (host:port, or dns:///name:port for every replica behind a name)."""
    return grpc.aio.insecure_channel(address, options=client_options(common, health_service))
