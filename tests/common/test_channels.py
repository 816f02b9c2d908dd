"""Channels to a service with several replicas (services.common.channels), against real gRPC servers on loopback:
calls spread over every replica, a replica that is loading or draining gets none, one that dies is skipped by
the next call, and a server ages its connections out so clients look the name up again."""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.common.channels import open_channel, server_options, service_config
from services.common.config import CommonConfig

SERVICE = "sotto.v1.LlmService"
CHECK = health_pb2.HealthCheckRequest(service=SERVICE)


class _Replica(health.aio.HealthServicer):
    """A replica whose answers to Check are counted (client-side health checking uses Watch, not Check)."""

    def __init__(self) -> None:
        super().__init__()
        self.checks = 0

    async def Check(self, request, context):  # noqa: N802 - the gRPC method's name
        self.checks += 1
        return await super().Check(request, context)


async def _start(common: CommonConfig, status=health_pb2.HealthCheckResponse.SERVING):
    replica = _Replica()
    await replica.set(SERVICE, status)
    server = grpc.aio.server(options=server_options(common))
    health_pb2_grpc.add_HealthServicer_to_server(replica, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    return replica, server, port


def _target(ports: list[int]) -> str:
    """Several addresses behind one target, as DNS gives for a swarm dnsrr service or a headless Service."""
    return "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)


async def _calls(channel: grpc.aio.Channel, count: int) -> list[str]:
    stub = health_pb2_grpc.HealthStub(channel)
    out = []
    for _ in range(count):
        try:
            await stub.Check(CHECK, timeout=2.0)
            out.append("ok")
        except grpc.aio.AioRpcError as exc:
            out.append(exc.code().name)
    return out


async def _ready(channel: grpc.aio.Channel, replicas: list[_Replica], want: int) -> None:
    """Wait until `want` replicas have answered (round_robin adds each as its connection and health come up)."""
    deadline = time.monotonic() + 10
    while sum(1 for r in replicas if r.checks) < want:
        assert time.monotonic() < deadline, [r.checks for r in replicas]
        await _calls(channel, 3)
        await asyncio.sleep(0.05)


def test_service_config_asks_for_round_robin_and_health_checking() -> None:
    assert service_config(SERVICE) == ('{"loadBalancingConfig": [{"round_robin": {}}], '
                                       '"healthCheckConfig": {"serviceName": "sotto.v1.LlmService"}}')


async def test_calls_spread_over_every_replica() -> None:
    common = CommonConfig()
    started = [await _start(common) for _ in range(3)]
    channel = open_channel(_target([p for _, _, p in started]), common, SERVICE)
    try:
        await _ready(channel, [r for r, _, _ in started], 3)
        for replica, _, _ in started:
            replica.checks = 0
        assert await _calls(channel, 30) == ["ok"] * 30
        assert [r.checks for r, _, _ in started] == [10, 10, 10]
    finally:
        await channel.close()
        for _, server, _ in started:
            await server.stop(None)


async def test_a_replica_not_serving_gets_no_calls() -> None:
    common = CommonConfig()
    serving = await _start(common)
    loading = await _start(common, health_pb2.HealthCheckResponse.NOT_SERVING)
    channel = open_channel(_target([serving[2], loading[2]]), common, SERVICE)
    try:
        assert await _calls(channel, 20) == ["ok"] * 20
        assert (serving[0].checks, loading[0].checks) == (20, 0)
        await loading[0].set(SERVICE, health_pb2.HealthCheckResponse.SERVING)  # finished loading
        await _ready(channel, [serving[0], loading[0]], 2)
        await serving[0].set(SERVICE, health_pb2.HealthCheckResponse.NOT_SERVING)  # draining after SIGTERM
        await asyncio.sleep(0.2)
        before = serving[0].checks
        assert await _calls(channel, 10) == ["ok"] * 10
        assert serving[0].checks == before
    finally:
        await channel.close()
        for _, server, _ in (serving, loading):
            await server.stop(None)


async def test_a_dead_replica_is_skipped_by_the_next_call() -> None:
    common = CommonConfig()
    started = [await _start(common) for _ in range(3)]
    channel = open_channel(_target([p for _, _, p in started]), common, SERVICE)
    try:
        await _ready(channel, [r for r, _, _ in started], 3)
        await started[0][1].stop(None)
        t0 = time.monotonic()
        results = await _calls(channel, 12)
        # At most the call that raced the closing connection fails; it fails fast, not at its deadline.
        assert results.count("ok") >= 11, results
        assert time.monotonic() - t0 < 2.0
        assert started[1][0].checks + started[2][0].checks >= 11 + 2
    finally:
        await channel.close()
        for _, server, _ in started[1:]:
            await server.stop(None)


async def test_a_server_ages_its_connections_out() -> None:
    """The GOAWAY after SOTTO_GRPC_MAX_CONNECTION_AGE_MS is what makes a client resolve the name again."""
    common = CommonConfig(grpc_max_connection_age_ms=300)
    replica, server, port = await _start(common)
    channel = open_channel(f"127.0.0.1:{port}", common, SERVICE)
    seen: list[grpc.ChannelConnectivity] = []
    try:
        assert await _calls(channel, 1) == ["ok"]
        deadline = time.monotonic() + 5
        state = channel.get_state()
        while grpc.ChannelConnectivity.IDLE not in seen and time.monotonic() < deadline:
            try:
                await asyncio.wait_for(channel.wait_for_state_change(state), 0.5)
            except asyncio.TimeoutError:
                continue
            state = channel.get_state()
            seen.append(state)
        assert await _calls(channel, 1) == ["ok"]  # and calls go on over a new connection
    finally:
        await channel.close()
        await server.stop(None)
    assert grpc.ChannelConnectivity.IDLE in seen or grpc.ChannelConnectivity.CONNECTING in seen, seen


@pytest.mark.parametrize("bad", ["0", "-5", "abc"])
def test_a_bad_keepalive_is_refused_naming_the_setting(bad: str) -> None:
    from services.common.config import ConfigError, load

    with pytest.raises(ConfigError, match="SOTTO_GRPC_KEEPALIVE_MS"):
        load(CommonConfig, {"SOTTO_GRPC_KEEPALIVE_MS": bad})
