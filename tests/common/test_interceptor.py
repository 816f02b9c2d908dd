"""The interceptor every service's server runs: refusal while loading, log ids, and each call counted once with
the status it really ended with."""

from __future__ import annotations

import asyncio

import grpc
import pytest
from grpc_health.v1 import health, health_pb2, health_pb2_grpc

from services.common import logs
from services.common.interceptor import ServiceInterceptor
from sotto.v1 import tts_pb2, tts_pb2_grpc
from tests.helpers import eventually, metric


class _Servicer(tts_pb2_grpc.TtsServiceServicer):
    """A stand-in service whose behaviour each request's text chooses."""

    def __init__(self) -> None:
        self.session_ids: list[str] = []
        self.streaming = asyncio.Event()

    async def ListVoices(self, request, context):
        self.session_ids.append(logs.SESSION_ID.get())
        return tts_pb2.ListVoicesResponse(default_voice="v")

    async def Synthesize(self, request, context):
        yield tts_pb2.AudioOut(pcm16=b"\0\0")
        if request.text == "invalid":
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, "bad text")
        if request.text == "crash":
            raise RuntimeError("a bug")
        if request.text == "endless":
            self.streaming.set()
            await asyncio.Event().wait()


@pytest.fixture
async def served():
    """(stub, health stub, interceptor, servicer) on a loopback server, not yet loaded."""
    interceptor = ServiceInterceptor(["sotto.v1.TtsService"])
    servicer = _Servicer()
    server = grpc.aio.server(interceptors=[interceptor])
    tts_pb2_grpc.add_TtsServiceServicer_to_server(servicer, server)
    health_servicer = health.aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield tts_pb2_grpc.TtsServiceStub(channel), health_pb2_grpc.HealthStub(channel), interceptor, servicer
    await server.stop(0)


def count(method: str, code: str) -> float:
    return metric("sotto_rpc_total", method=method, code=code)


async def synthesize(stub, text: str) -> grpc.StatusCode:
    call = stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=10)
    try:
        async for _ in call:
            pass
    except grpc.aio.AioRpcError as error:
        return error.code()
    return grpc.StatusCode.OK


async def test_calls_are_unavailable_until_loaded_while_health_answers(served):
    stub, health_stub, interceptor, _ = served
    refused = count("ListVoices", "UNAVAILABLE")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=5)
    assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and "loading" in caught.value.details()
    # counted when the handler ends, which can be just after the client read the status
    await eventually(lambda: count("ListVoices", "UNAVAILABLE") == refused + 1, 5, "the refusal counted")
    assert (await health_stub.Check(health_pb2.HealthCheckRequest(), timeout=5)).status == \
        health_pb2.HealthCheckResponse.SERVING
    interceptor.loaded = True
    assert (await stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=5)).default_voice == "v"


async def test_the_callers_ids_are_bound_for_the_handler(served):
    stub, _, interceptor, servicer = served
    interceptor.loaded = True
    await stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=5, metadata=((logs.SESSION_METADATA_KEY, "s-42"),))
    assert servicer.session_ids == ["s-42"]


@pytest.mark.parametrize("text, code", [("fine", "OK"), ("invalid", "INVALID_ARGUMENT"), ("crash", "UNKNOWN")])
async def test_each_streaming_call_is_counted_with_its_status(served, text, code):
    stub, _, interceptor, _ = served
    interceptor.loaded = True
    before, timed = count("Synthesize", code), metric("sotto_rpc_seconds_count", method="Synthesize")
    assert (await synthesize(stub, text)).name == code
    await eventually(lambda: count("Synthesize", code) == before + 1, 5, "the call counted")
    assert metric("sotto_rpc_seconds_count", method="Synthesize") == timed + 1


async def test_a_cancelled_call_is_counted_as_cancelled(served):
    stub, _, interceptor, servicer = served
    interceptor.loaded = True
    cancelled = count("Synthesize", "CANCELLED")
    call = stub.Synthesize(tts_pb2.SynthesizeRequest(text="endless"), timeout=10)
    await call.read()
    await servicer.streaming.wait()
    call.cancel()
    await eventually(lambda: count("Synthesize", "CANCELLED") == cancelled + 1, 10, "the cancel to be counted")
