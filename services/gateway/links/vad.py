"""A session's audio stream to the vad service: audio out in order, speech events back.

The stream lives as long as the session; if the vad service goes away it is reopened (its sample counter
restarts, so the session's tape offset is remembered at (re)open).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable

import grpc

from services.common import audio, config, logs
from sotto.v1 import vad_pb2, vad_pb2_grpc

_LOGGER = logging.getLogger(__name__)

SESSION_DEADLINE_S = 12 * 3600.0  # the stream's gRPC deadline; a longer session reopens it
# How a stream ends when the vad service stops (its streams are cancelled: CANCELLED, or RST_STREAM: INTERNAL) or
# dies (the connection drops: UNAVAILABLE), rather than refusing the audio.
_WENT_AWAY = frozenset({grpc.StatusCode.CANCELLED, grpc.StatusCode.INTERNAL, grpc.StatusCode.UNAVAILABLE})
# Silero decides once per window (audio.VAD_WINDOW_SAMPLES): audio that completes no window cannot change an event,
# so it waits for the next frame: fewer stream messages at no cost to endpointing.
_WINDOW = audio.VAD_WINDOW_SAMPLES


def batch_windows(batch_ms: int, sample_rate: int = audio.SPEECH_RATE) -> int:
    """Vad windows per message while a turn waits for its first audio (SOTTO_GATEWAY_VAD_BATCH_MS), at least 1."""
    return max(1, round(batch_ms * sample_rate / 1000 / _WINDOW[sample_rate]))


class VadLink:
    def __init__(self, *, stub: vad_pb2_grpc.VadServiceStub, settings: vad_pb2.VadSettings, sample_rate: int,
                 on_event: Callable[[vad_pb2.VadEvent, int], Awaitable[None]],
                 on_failure: Callable[[str], Awaitable[None]], connect_timeout_s: float,
                 batch_ms: int, batching: Callable[[], bool], in_utterance: Callable[[], bool],
                 answer_playing: Callable[[], bool] = lambda: False) -> None:
        self.stub = stub
        self.settings = settings
        self.rate = sample_rate
        self.on_event = on_event
        self.on_failure = on_failure
        # Each request with the tape index of its first sample, so that chunks a dead stream never took can start
        # the next one at the right place.
        self._queue: asyncio.Queue[tuple[int, vad_pb2.VadRequest]] | None = None
        self._call: grpc.aio.StreamStreamCall | None = None
        self._reader: asyncio.Task | None = None
        self._replaced_readers: set[asyncio.Task] = set()  # cancelled by went_away(), awaited by close()
        self._origin = 0   # tape sample index where this stream's sample 0 sits
        self._seq = 0
        self._window = _WINDOW[sample_rate]
        self._held: list[bytes] = []  # frames not yet sent: together they complete no window
        self._held_ts = 0.0
        self._held_start = 0          # tape index of the first held sample
        self._samples = 0             # samples given to this stream, sent or held
        self._sent_windows = 0        # complete windows among the samples sent
        # While `batching()` holds, audio is sent once this many windows are complete instead of at each one.
        self._batch_windows = batch_windows(batch_ms, sample_rate)
        self._batching = batching
        # A stream waits this long for a vad to accept it (restarting, hung); then it is given up and reported,
        # and the next frame opens a new one. Audio arrives in real time, so this also bounds the audio it holds.
        self._connect_timeout_s = connect_timeout_s
        self._in_utterance = in_utterance
        self._last_reopen = -float("inf")
        # Whether an answer is heard now: the vad's barge-in gate follows it, told with the audio when it changes.
        self._answer_playing = answer_playing
        self._playing_told = False

    @property
    def open(self) -> bool:
        """A stream is taking audio. It stays open until its reader has dealt with its end (reopened, or given up
        and reported): a frame that arrives in between joins the dead stream's queue and is carried on, not lost."""
        return self._call is not None

    def send(self, pcm: bytes, capture_ts_ms: float, tape_start: int) -> None:
        if not self.open:
            self._open(tape_start)
        assert self._queue is not None
        if not self._held:
            self._held_ts, self._held_start = capture_ts_ms, tape_start
        self._held.append(pcm)
        self._samples += len(pcm) // 2
        windows = self._samples // self._window
        if windows - self._sent_windows < (self._batch_windows if self._batching() else 1):
            return
        self._sent_windows = windows
        self._send_held()

    def end_of_speech(self, ask_verdict: bool = False) -> None:
        """The client's VAD heard the end of speech: the vad closes an open segment at the last sample it has,
        instead of waiting for silence that will not come (the client stops sending). With `ask_verdict` (a client
        that keeps streaming when held) the vad's turn model decides instead."""
        if not self.open:
            return
        assert self._queue is not None
        if self._held:
            self._sent_windows = self._samples // self._window
            self._send_held()
        self._queue.put_nowait((self._origin + self._samples,
                                vad_pb2.VadRequest(end_of_speech=True, ask_verdict=ask_verdict)))

    def _send_held(self) -> None:
        self._put(self._held_start, b"".join(self._held), self._held_ts)
        self._held.clear()

    def _put(self, tape_start: int, pcm: bytes, capture_ts_ms: float) -> None:
        assert self._queue is not None
        chunk = vad_pb2.AudioChunk(pcm16=pcm, sample_rate=self.rate, sequence=self._seq,
                                   capture_ts_ms=int(capture_ts_ms))
        request = vad_pb2.VadRequest(audio=chunk)
        if (playing := self._answer_playing()) != self._playing_told:
            request.answer_playing = self._playing_told = playing
        self._queue.put_nowait((tape_start, request))
        self._seq += 1

    def _open(self, tape_start: int, carried: list[tuple[int, vad_pb2.VadRequest]] | None = None,
              keep_held: bool = False) -> None:
        """A new stream whose sample 0 is the tape's `tape_start`, first given `carried`: chunks a dead stream
        never took, and with `keep_held` the frames it held."""
        self._queue = asyncio.Queue()
        self._origin, self._seq, self._samples = tape_start, 0, 0
        self._playing_told = False  # a new stream starts with the gate open
        for start, request in carried or []:
            if request.HasField("audio"):
                self._put(start, request.audio.pcm16, request.audio.capture_ts_ms)
                self._samples += len(request.audio.pcm16) // 2
            else:
                self._queue.put_nowait((start, request))
        self._sent_windows = self._samples // self._window
        if keep_held:
            self._samples += sum(len(p) for p in self._held) // 2
        else:
            self._held.clear()
        # wait_for_ready: a stream opened while the channel reconnects (the vad just restarted) waits for it
        # instead of failing at once and taking the frames queued on it, unheard and unreported.
        self._call = self.stub.StreamAudio(self._requests(self._queue), timeout=SESSION_DEADLINE_S,
                                           metadata=logs.grpc_metadata(), wait_for_ready=True)
        self._reader = asyncio.create_task(self._read(self._call, self._origin), name="vad::read")

    async def _requests(self, queue: asyncio.Queue) -> AsyncIterator[vad_pb2.VadRequest]:
        yield vad_pb2.VadRequest(settings=self.settings)
        while True:
            _, request = await queue.get()
            yield request

    async def _read(self, call: grpc.aio.StreamStreamCall, origin: int) -> None:
        """Relay the stream's events until it ends, then reopen it or give it up."""
        reason, went_away = await self._relay(call, origin)
        if went_away and self._may_reopen(call):
            self._reopen()
        else:
            await self._give_up(call, reason)

    async def _relay(self, call: grpc.aio.StreamStreamCall, origin: int) -> tuple[str, bool]:
        """Events to the session until the stream ends: why it ended, and whether the vad went away."""
        try:
            try:
                # The vad sends its initial metadata when it accepts a stream: the one sign that it is there and
                # listening, since a first event may be minutes away (wait_for_connection only says our headers
                # left). asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancel that lands as the
                # metadata comes, and close() would then wait on this task for ever.
                async with asyncio.timeout(self._connect_timeout_s):
                    await call.initial_metadata()
            except TimeoutError:
                _LOGGER.warning("vad_stream_not_connected", extra={"waited_s": self._connect_timeout_s})
                call.cancel()
                return f"not reachable for {self._connect_timeout_s:g} s", False
            async for ev in call:
                await self.on_event(ev, origin)
        except grpc.aio.AioRpcError as exc:
            # Our own cancel (close) reaches this task as CancelledError, never as a status: any status is the
            # vad's doing.
            _LOGGER.warning("vad_stream_failed", extra={"code": exc.code().name, "details": exc.details()})
            return exc.code().name, exc.code() in _WENT_AWAY
        _LOGGER.warning("vad_stream_ended", extra={"code": "OK"})
        return "it ended the audio stream", False

    async def _give_up(self, call: grpc.aio.StreamStreamCall, reason: str) -> None:
        """The audio on this stream is unheard: the user is told, and the next frame opens a new stream."""
        if call is self._call:
            self._call = None
        await self.on_failure(reason)

    def went_away(self) -> None:
        """The vad failed its health check. A stream that may never end (a hung vad, or one stopped without
        ending its streams, keeps it open and silent, which looks like silence) is replaced now; if the vad is
        truly gone, the new stream is not accepted and is given up and reported after the connect timeout. A live
        utterance is left alone, to end by the session's own limits: a health check slow under load must not drop
        what the user is saying."""
        if self._call is None or self._reader is None or not self._may_reopen(self._call):
            return
        _LOGGER.warning("vad_stream_replaced", extra={"reason": "health check failed"})
        self._reader.cancel()
        self._replaced_readers.add(self._reader)
        self._reader.add_done_callback(self._replaced_readers.discard)
        self._call.cancel()
        self._reopen()

    def _may_reopen(self, call: grpc.aio.StreamStreamCall) -> bool:
        """A vad that went away between two words is waited for, as a restart would be, at most once per connect
        timeout (a vad that drops every stream is reported, not retried in a loop). A lost utterance is reported."""
        return (call is self._call and not self._in_utterance()
                and time.monotonic() - self._last_reopen > self._connect_timeout_s)

    def _reopen(self) -> None:
        """A new stream at once, carrying the audio the dead one never took, so none of it goes unheard."""
        assert self._queue is not None
        carried = [self._queue.get_nowait() for _ in range(self._queue.qsize())]
        self._last_reopen = time.monotonic()
        _LOGGER.info("vad_stream_reopened", extra={"carried_chunks": len(carried)})
        start = carried[0][0] if carried else self._held_start if self._held else self._origin + self._samples
        self._open(start, carried, keep_held=True)

    async def reset(self) -> None:
        """Drop the stream (and the service's state for it); the next audio opens a fresh one."""
        await self.close()

    async def close(self) -> None:
        if self._call is not None and not self._call.done():
            self._call.cancel()
        readers = [*self._replaced_readers, *([self._reader] if self._reader is not None else [])]
        for reader in readers:
            reader.cancel()
        for reader in readers:
            with contextlib.suppress(asyncio.CancelledError):
                await reader
        self._call = self._reader = None


def turn_taking(v: config.VadConfig) -> vad_pb2.VadSettings:
    """The session's vad settings, from the gateway's: every wire starts from these."""
    return vad_pb2.VadSettings(threshold=v.threshold, min_speech_ms=v.min_speech_ms, min_silence_ms=v.min_silence_ms,
                               speech_pad_ms=v.speech_pad_ms, turn_silence_ms=v.turn_silence_ms,
                               max_turn_silence_ms=v.max_turn_silence_ms, silence_only=not v.semantic_turn,
                               barge_in_threshold=v.barge_in_threshold,
                               barge_in_min_speech_ms=v.barge_in_min_speech_ms)
