"""The gateway's view of the model services: one gRPC channel each and their live health.

A background task per service polls the standard gRPC health service, so `/healthz` answers from memory and
sessions can be told when a service goes down or comes back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common.channels import open_channel
from services.common.config import CommonConfig

_LOGGER = logging.getLogger(__name__)

PROTO_NAMES = {"vad": "sotto.v1.VadService", "llm": "sotto.v1.LlmService", "tts": "sotto.v1.TtsService",
               "asr": "sotto.v1.AsrService"}
# Without these no turn can run. Without asr, models that hear audio go on (no words shown), and typed turns work.
REQUIRED = ("vad", "llm", "tts")


class Dependencies:
    """Channels to vad, llm, tts and asr, with their health kept current."""

    def __init__(self, *, addresses: dict[str, str], common: CommonConfig, poll_s: float = 1.0,
                 hold: Callable[[], bool] = lambda: False) -> None:
        self._common = common  # the channels' options: every replica behind a name (services.common.channels)
        self.addresses = addresses
        self.poll_s = poll_s  # SOTTO_GATEWAY_HEALTH_POLL_MS; also each check's timeout
        # While `hold()` is true (a turn waits for its first audio), a check that is due waits one more interval.
        # Each check wakes dozens of gRPC threads here and in the service, and on a small machine those wake-ups
        # slow the first sentence's synthesis (docs/performance.md). A service that fails meanwhile fails the
        # turn's own calls, which report it at once.
        self.hold = hold
        self.channels: dict[str, grpc.aio.Channel] = {}
        self.status = {name: "UNKNOWN" for name in addresses}
        self.listeners: list[Callable[[str, str], None]] = []
        self._tasks: list[asyncio.Task] = []

    def all_serving(self) -> bool:
        """Whether every required service serves (the optional asr's status is reported beside them)."""
        return all(self.status[name] == "SERVING" for name in REQUIRED if name in self.status)

    async def _watch(self, name: str) -> None:
        stub = health_pb2_grpc.HealthStub(self.channels[name])
        request = health_pb2.HealthCheckRequest(service=PROTO_NAMES[name])
        while True:
            try:
                reply = await stub.Check(request, timeout=self.poll_s)
                status = health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)
            except grpc.aio.AioRpcError:
                status = "DOWN"
            if status != self.status[name]:
                _LOGGER.info("dependency_health", extra={"dependency": name, "status": status,
                                                         "previous": self.status[name]})
                self.status[name] = status
                for listener in list(self.listeners):
                    listener(name, status)
            await asyncio.sleep(self.poll_s)
            if self.hold():
                await asyncio.sleep(self.poll_s)  # one interval later, not polled for: that would wake us too

    async def start(self) -> None:
        """Open the channels inside the running loop (grpc.aio channels belong to the loop that made them)."""
        self.channels = {name: open_channel(addr, self._common, PROTO_NAMES[name])
                         for name, addr in self.addresses.items()}
        self._tasks = [asyncio.create_task(self._watch(n), name=f"health::{n}") for n in self.channels]

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        for channel in self.channels.values():
            await channel.close()
