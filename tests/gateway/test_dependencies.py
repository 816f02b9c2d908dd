"""The gateway's health checks of the model services: they keep going, and hold back while a turn waits for its
first audio (each check wakes gRPC threads on both sides, which slows synthesis on a small machine)."""

from __future__ import annotations

import asyncio
import time

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.common.config import CommonConfig
from services.gateway.links.dependencies import PROTO_NAMES, Dependencies
from tests.helpers import eventually

POLL_S = 0.2


class _CountingHealth(health.aio.HealthServicer):
    def __init__(self) -> None:
        super().__init__()
        self.checks: list[float] = []

    async def Check(self, request, context):  # noqa: N802 - the gRPC method's name
        self.checks.append(time.monotonic())
        return await super().Check(request, context)


async def _watched(held: list[bool], count: int) -> list[float]:
    """When the vad service was checked, over its first `count` checks, with the hold as `held[0]` says."""
    servicer = _CountingHealth()
    await servicer.set(PROTO_NAMES["vad"], health_pb2.HealthCheckResponse.SERVING)
    server = grpc.aio.server()
    health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    deps = Dependencies(addresses={"vad": f"127.0.0.1:{port}"}, common=CommonConfig(), poll_s=POLL_S,
                        hold=lambda: held[0])
    try:
        await deps.start()
        await eventually(lambda: len(servicer.checks) >= count, 10 * count * POLL_S, f"{count} health checks")
        assert deps.status == {"vad": "SERVING"}
    finally:
        await deps.close()
        await server.stop(None)
    return servicer.checks


async def test_checks_wait_one_more_interval_while_a_turn_waits_for_its_first_audio() -> None:
    checks = await _watched([True], 4)  # held checks still happen
    gaps = [b - a for a, b in zip(checks, checks[1:])]
    # Each check arrives after the previous one's reply plus the waits, so a busy machine only widens a gap; the
    # slack is the event loop's clock resolution.
    assert min(gaps) >= 2 * POLL_S - 0.01, gaps  # never sooner than two intervals apart


async def test_checks_come_every_interval_otherwise() -> None:
    checks = await _watched([False], 8)
    gaps = sorted(b - a for a, b in zip(checks, checks[1:]))
    # one interval apart, and most of them well short of the two a held check waits
    assert gaps[0] >= POLL_S - 0.01 and gaps[len(gaps) // 2] < 2 * POLL_S - 0.01, gaps


async def test_turns_spread_evenly_over_replicas_while_the_polls_run() -> None:
    """A turn's calls rotate over every replica behind a name (round_robin, services.common.channels), evenly,
    while the health polls run beside them."""
    class _Replica(_CountingHealth):
        turns = 0

        async def Check(self, request, context):  # noqa: N802 - the gRPC method's name
            self.turns += request.service == ""
            return await super().Check(request, context)

    replicas, servers, ports = [], [], []
    for _ in range(3):
        servicer = _Replica()
        await servicer.set(PROTO_NAMES["llm"], health_pb2.HealthCheckResponse.SERVING)
        server = grpc.aio.server()
        health_pb2_grpc.add_HealthServicer_to_server(servicer, server)
        ports.append(server.add_insecure_port("127.0.0.1:0"))
        await server.start()
        replicas.append(servicer)
        servers.append(server)
    target = "ipv4:" + ",".join(f"127.0.0.1:{p}" for p in ports)  # what DNS gives for 3 tasks behind one name
    deps = Dependencies(addresses={"llm": target}, common=CommonConfig(), poll_s=0.02)
    try:
        await deps.start()
        stub = health_pb2_grpc.HealthStub(deps.channels["llm"])
        turn = health_pb2.HealthCheckRequest(service="")  # the polls ask for sotto.v1.LlmService
        await eventually(lambda: all(r.checks for r in replicas), 10, "every replica polled")
        for _ in range(300):  # until the turns' channel has all three connections ready: one missing skews the count
            await stub.Check(turn, timeout=2)
            if all(r.turns for r in replicas):
                break
            await asyncio.sleep(0.01)
        assert all(r.turns for r in replicas), f"a replica never took a turn: {[r.turns for r in replicas]}"
        before = [r.turns for r in replicas]
        for _ in range(30):
            await stub.Check(turn, timeout=2)
            await asyncio.sleep(0.02)  # in step with the polls
        turns = [r.turns - b for r, b in zip(replicas, before)]
        # Strict rotation gives 10 each; gRPC restarts it at a random replica whenever it rebuilds its picker (a
        # connection's state changing on a loaded host), which moves one turn. A pinned channel gives [30, 0, 0].
        assert sum(turns) == 30 and max(turns) - min(turns) <= 2, turns
    finally:
        await deps.close()
        for server in servers:
            await server.stop(None)
