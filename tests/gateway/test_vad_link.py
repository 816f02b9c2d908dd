"""The vad stream's ends that gRPC alone does not make safe: audio on a stream the vad cancelled, a stream the vad
never accepts, a vad whose health check fails. A scripted stub stands in for the channel so that the order of
events (which chunks the stream took before it died) is exact, not a race."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import grpc
import pytest

from services.gateway.links.vad import VadLink
from sotto.v1 import vad_pb2

FRAME = 512  # samples: one Silero window per frame, so every frame is sent as its own chunk
CONNECT_TIMEOUT_S = 0.3


class _Call:
    """A stream whose vad accepts it (unless `accepted` is cleared), takes chunks when told, and ends when told."""

    def __init__(self, requests: AsyncIterator[vad_pb2.VadRequest]) -> None:
        self.requests = requests
        self.taken: list[vad_pb2.AudioChunk] = []
        self.script: asyncio.Queue[vad_pb2.VadEvent | grpc.StatusCode] = asyncio.Queue()
        self.ended = False
        self.cancelled = False
        self.accepted = asyncio.Event()
        self.accepted.set()

    async def take(self, n: int) -> None:
        while len(self.taken) < n:
            req = await anext(self.requests)
            if req.HasField("audio"):
                self.taken.append(req.audio)

    async def initial_metadata(self) -> grpc.aio.Metadata:
        await self.accepted.wait()
        return grpc.aio.Metadata()

    def __aiter__(self) -> AsyncIterator[vad_pb2.VadEvent]:
        return self._events()

    async def _events(self) -> AsyncIterator[vad_pb2.VadEvent]:
        while isinstance(item := await self.script.get(), vad_pb2.VadEvent):
            yield item
        raise grpc.aio.AioRpcError(item, grpc.aio.Metadata(), grpc.aio.Metadata(), "scripted end")

    def say(self, start_sample: int) -> None:
        self.script.put_nowait(vad_pb2.VadEvent(kind=vad_pb2.VadEvent.SPEECH_STARTED, start_sample=start_sample))

    def end(self, code: grpc.StatusCode) -> None:
        self.ended = True
        self.script.put_nowait(code)

    def cancel(self) -> bool:
        self.cancelled = True
        return True

    def done(self) -> bool:
        return self.cancelled or self.ended


class _Stub:
    def __init__(self) -> None:
        self.calls: list[_Call] = []
        self.accepting = True

    def StreamAudio(self, requests, **_) -> _Call:  # noqa: N802 - the gRPC method's name
        self.calls.append(_Call(requests))
        if not self.accepting:
            self.calls[-1].accepted.clear()
        return self.calls[-1]


class _Session:
    """What VadLink reports to: where on the tape each event's speech starts, failures, and whether the user is
    mid-utterance."""

    def __init__(self) -> None:
        self.heard_at: list[int] = []
        self.failures: list[str] = []
        self.speaking = False

    async def on_event(self, ev: vad_pb2.VadEvent, origin: int) -> None:
        self.heard_at.append(origin + ev.start_sample)

    async def on_failure(self, reason: str) -> None:
        self.failures.append(reason)


@pytest.fixture
async def link() -> AsyncIterator[tuple[VadLink, _Stub, _Session]]:
    stub, session = _Stub(), _Session()
    vad = VadLink(stub=stub, settings=vad_pb2.VadSettings(), sample_rate=16000, on_event=session.on_event,
                  on_failure=session.on_failure, connect_timeout_s=CONNECT_TIMEOUT_S, batch_ms=0,
                  batching=lambda: False, in_utterance=lambda: session.speaking)
    yield vad, stub, session
    await vad.close()


def frame(i: int) -> bytes:
    return i.to_bytes(2, "little") * FRAME


def send_frames(vad: VadLink, first: int, count: int) -> None:
    for i in range(first, first + count):
        vad.send(frame(i), capture_ts_ms=i * 32.0, tape_start=i * FRAME)


async def until(predicate, timeout: float = 3.0) -> None:
    async def poll() -> None:
        while not predicate():
            await asyncio.sleep(0.01)
    await asyncio.wait_for(poll(), timeout)


async def test_audio_a_cancelled_stream_never_took_is_heard_on_the_next_from_where_it_starts(link) -> None:
    vad, stub, session = link
    send_frames(vad, 0, 6)
    await stub.calls[0].take(2)
    stub.calls[0].end(grpc.StatusCode.CANCELLED)  # a vad that stops cancels its streams
    send_frames(vad, 6, 2)  # frames that arrive before the gateway has seen the end
    await until(lambda: len(stub.calls) == 2)
    await stub.calls[1].take(6)
    assert [c.pcm16 for c in stub.calls[1].taken] == [frame(i) for i in range(2, 8)]
    stub.calls[1].say(start_sample=FRAME)  # speech in the second chunk the new stream took: frame 3
    await until(lambda: session.heard_at)
    assert session.heard_at == [3 * FRAME], "events on the new stream land where their audio is on the tape"
    assert [c.sequence for c in stub.calls[1].taken] == list(range(6))
    assert session.failures == [], "a vad that went away between words is waited for, not reported"
    send_frames(vad, 8, 1)
    await stub.calls[1].take(7)
    assert stub.calls[1].taken[-1].pcm16 == frame(8)


async def test_a_stream_the_vad_never_accepts_is_given_up_and_reported(link) -> None:
    vad, stub, session = link
    stub.accepting = False  # a hung vad: the stream's headers leave, nothing comes back
    send_frames(vad, 0, 3)
    await until(lambda: session.failures, timeout=CONNECT_TIMEOUT_S * 4)
    assert session.failures == [f"not reachable for {CONNECT_TIMEOUT_S:g} s"] and stub.calls[0].cancelled
    assert not vad.open, "the next frame opens a new stream"
    stub.accepting = True
    send_frames(vad, 3, 1)
    await stub.calls[1].take(1)
    assert stub.calls[1].taken[0].pcm16 == frame(3)


async def test_a_stream_lost_mid_utterance_is_reported_and_the_next_frame_starts_afresh(link) -> None:
    vad, stub, session = link
    send_frames(vad, 0, 4)
    await stub.calls[0].take(4)
    session.speaking = True
    stub.calls[0].end(grpc.StatusCode.UNAVAILABLE)
    await until(lambda: session.failures)
    assert session.failures == ["UNAVAILABLE"] and len(stub.calls) == 1 and not vad.open
    send_frames(vad, 10, 1)
    await stub.calls[1].take(1)
    stub.calls[1].say(start_sample=0)
    await until(lambda: session.heard_at)
    assert session.heard_at == [10 * FRAME]


async def test_a_vad_that_drops_every_stream_is_reported_not_retried_in_a_loop(link) -> None:
    vad, stub, session = link
    send_frames(vad, 0, 2)
    stub.calls[0].end(grpc.StatusCode.UNAVAILABLE)
    await until(lambda: len(stub.calls) == 2)
    stub.calls[1].end(grpc.StatusCode.UNAVAILABLE)
    await until(lambda: session.failures)
    await asyncio.sleep(CONNECT_TIMEOUT_S)
    assert session.failures == ["UNAVAILABLE"] and len(stub.calls) == 2


async def test_a_refusal_is_reported_at_once_not_retried(link) -> None:
    vad, stub, session = link
    send_frames(vad, 0, 1)
    stub.calls[0].end(grpc.StatusCode.INVALID_ARGUMENT)
    await until(lambda: session.failures)
    assert session.failures == ["INVALID_ARGUMENT"] and len(stub.calls) == 1


async def test_a_failed_health_check_replaces_a_silent_stream_between_words(link) -> None:
    vad, stub, session = link
    send_frames(vad, 0, 2)
    await stub.calls[0].take(1)  # then the vad hangs: its stream stays open and silent
    stub.accepting = False
    vad.went_away()
    assert stub.calls[0].cancelled and len(stub.calls) == 2
    await until(lambda: session.failures, timeout=CONNECT_TIMEOUT_S * 4)
    assert session.failures == [f"not reachable for {CONNECT_TIMEOUT_S:g} s"], "the hung vad is reported"


async def test_a_failed_health_check_of_a_vad_that_is_back_loses_nothing(link) -> None:
    vad, stub, session = link
    send_frames(vad, 0, 3)
    await stub.calls[0].take(1)
    vad.went_away()
    await stub.calls[1].take(2)
    assert [c.pcm16 for c in stub.calls[1].taken] == [frame(1), frame(2)]
    stub.calls[1].say(start_sample=0)
    await until(lambda: session.heard_at)
    assert session.heard_at == [FRAME]
    assert session.failures == []


async def test_a_failed_health_check_leaves_a_live_utterance_alone(link) -> None:
    vad, stub, session = link
    send_frames(vad, 0, 2)
    await stub.calls[0].take(2)
    session.speaking = True
    vad.went_away()
    assert not stub.calls[0].cancelled and len(stub.calls) == 1 and session.failures == []


async def test_the_clients_end_of_speech_follows_the_audio_held_for_a_batch() -> None:
    """Audio held back while a turn thinks goes out first: the vad ends the utterance on all of it."""
    stub, session = _Stub(), _Session()
    vad = VadLink(stub=stub, settings=vad_pb2.VadSettings(), sample_rate=16000, on_event=session.on_event,
                  on_failure=session.on_failure, connect_timeout_s=CONNECT_TIMEOUT_S, batch_ms=160,
                  batching=lambda: True, in_utterance=lambda: False)
    try:
        send_frames(vad, 0, 7)  # one 5-window batch sent, two frames held
        vad.end_of_speech()
        [call] = stub.calls
        await asyncio.wait_for(call.take(2), 3)  # settings aside: the batch, then the two held frames
        assert [len(c.pcm16) // 2 for c in call.taken] == [5 * FRAME, 2 * FRAME]
        after = await asyncio.wait_for(anext(call.requests), 3)
        assert after.end_of_speech and not after.HasField("audio")
        assert session.failures == []
    finally:
        await vad.close()
