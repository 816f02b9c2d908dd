"""A session's audio stream to the vad service: audio out in order, speech events back.

The stream lives as long as the session; if the vad service goes away it is reopened on the next audio (its
sample counter restarts, so the session's tape offset is remembered at (re)open).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from services.common import logs
from sotto.v1 import vad_pb2, vad_pb2_grpc

_LOGGER = logging.getLogger(__name__)

SESSION_DEADLINE_S = 12 * 3600.0  # the stream's gRPC deadline; a longer session reopens it
# Silero decides once per 512-sample window (256 at 8 kHz): audio that completes no window cannot change an
# event, so it waits for the next frame. This halves-ish the stream messages at no cost to endpointing.
_WINDOW = {16000: 512, 8000: 256}


def batch_windows(batch_ms: int, sample_rate: int = 16000) -> int:
    """Vad windows per message while a turn waits for its first audio (SOTTO_GATEWAY_VAD_BATCH_MS), at least 1."""
    return max(1, round(batch_ms * sample_rate / 1000 / _WINDOW.get(sample_rate, 512)))


class VadLink:
    def __init__(self, stub: vad_pb2_grpc.VadServiceStub, settings: vad_pb2.VadSettings, sample_rate: int,
                 on_event: Callable[[vad_pb2.VadEvent, int], Awaitable[None]],
                 on_failure: Callable[[str], Awaitable[None]], connect_timeout_s: float,
                 batch_ms: int, batching: Callable[[], bool]) -> None:
        self.stub = stub
        self.settings = settings
        self.rate = sample_rate
        self.on_event = on_event
        self.on_failure = on_failure
        self._queue: asyncio.Queue[vad_pb2.AudioChunk | None] | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        self._reader: asyncio.Task | None = None
        self._origin = 0   # tape sample index where this stream's sample 0 sits
        self._seq = 0
        self._window = _WINDOW.get(sample_rate, 512)
        self._held: list[bytes] = []  # frames not yet sent: together they complete no window
        self._held_ts = 0.0
        self._samples = 0             # samples given to this stream, sent or held
        self._sent_windows = 0        # complete windows among the samples sent
        # While `batching()` holds, audio is sent once this many windows are complete instead of at each one.
        self._batch_windows = batch_windows(batch_ms, sample_rate)
        self._batching = batching
        # A stream waits this long for a vad that is not there yet (restarting); then it is given up and reported,
        # and the next frame opens a new one. Audio arrives in real time, so this also bounds the audio it holds.
        self._connect_timeout_s = connect_timeout_s

    @property
    def open(self) -> bool:
        return self._call is not None and not self._call.done()

    def send(self, pcm: bytes, capture_ts_ms: float, tape_start: int) -> None:
        if not self.open:
            self._open(tape_start)
        assert self._queue is not None
        if not self._held:
            self._held_ts = capture_ts_ms
        self._held.append(pcm)
        self._samples += len(pcm) // 2
        windows = self._samples // self._window
        if windows - self._sent_windows < (self._batch_windows if self._batching() else 1):
            return
        self._sent_windows = windows
        self._queue.put_nowait(vad_pb2.AudioChunk(pcm16=b"".join(self._held), sample_rate=self.rate,
                                                  sequence=self._seq, capture_ts_ms=int(self._held_ts)))
        self._held.clear()
        self._seq += 1

    def _open(self, tape_start: int) -> None:
        self._queue = asyncio.Queue()
        self._origin, self._seq, self._samples, self._sent_windows, self._backlog = tape_start, 0, 0, 0, 0
        self._held.clear()
        # wait_for_ready: a stream opened while the channel reconnects (the vad just restarted) waits for it
        # instead of failing at once and taking the frames queued on it, unheard and unreported.
        self._call = self.stub.StreamAudio(self._requests(self._queue), timeout=SESSION_DEADLINE_S,
                                           metadata=logs.grpc_metadata(), wait_for_ready=True)
        self._reader = asyncio.create_task(self._read(self._call, self._origin), name="vad::read")

    async def _requests(self, queue: asyncio.Queue) -> AsyncIterator[vad_pb2.VadRequest]:
        yield vad_pb2.VadRequest(settings=self.settings)
        while (chunk := await queue.get()) is not None:
            yield vad_pb2.VadRequest(audio=chunk)

    async def _read(self, call: grpc.aio.StreamStreamCall, origin: int) -> None:
        try:
            try:
                await asyncio.wait_for(call.wait_for_connection(), self._connect_timeout_s)
            except asyncio.TimeoutError:
                _LOGGER.warning("vad_stream_not_connected", extra={"waited_s": self._connect_timeout_s})
                call.cancel()
                await self.on_failure(f"not reachable for {self._connect_timeout_s:g} s")
                return
            async for ev in call:
                await self.on_event(ev, origin)
        except grpc.aio.AioRpcError as exc:
            if exc.code() != grpc.StatusCode.CANCELLED:
                _LOGGER.warning("vad_stream_failed", extra={"code": exc.code().name, "details": exc.details()})
                await self.on_failure(exc.code().name)

    async def reset(self) -> None:
        """Drop the stream (and the service's state for it); the next audio opens a fresh one."""
        await self.close()

    async def close(self) -> None:
        if self._call is not None and not self._call.done():
            self._call.cancel()
        if self._reader is not None:
            self._reader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reader
        self._call = self._reader = None
