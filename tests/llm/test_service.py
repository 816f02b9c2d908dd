"""The llm gRPC service end to end: a real grpc.aio server on a free port, the real engine on the tiny
multimodal fixture, and the stub a gateway would use. Plus the service as its own process."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import config
from services.common.interceptor import ServiceInterceptor
from services.llm.admission import Admission
from services.llm.engine import Finished, FinishReason, TextDelta
from services.llm.loading import SamplingDefaults
from services.llm.server import LlmServicer, Models
from sotto.v1 import common_pb2, llm_pb2, llm_pb2_grpc
from tests.helpers import eventually, metric
from tests.llm.conftest import EXPECTED_BACKEND, TINY_MM, image_bytes
from tools.stack import free_port

ROOT = Path(__file__).resolve().parents[2]
DEFAULTS = SamplingDefaults.from_config(config.LlmConfig())


@pytest.fixture
def admission():
    return Admission(max_admitted=2)


@pytest.fixture
def interceptor():
    return ServiceInterceptor(["sotto.v1.LlmService"], loaded=True)


@pytest.fixture
async def stub(tiny_engine, admission, interceptor):
    """A stub of the service as its bootstrap serves it: the shared interceptor in front of the servicer."""
    server = grpc.aio.server(interceptors=[interceptor])
    servicer = LlmServicer(admission, DEFAULTS, Models(tiny_engine))
    llm_pb2_grpc.add_LlmServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield llm_pb2_grpc.LlmServiceStub(channel)
    await server.stop(0)
    if servicer._draining:  # the engine is shared by the session: wait for it to be free, keep it open
        await asyncio.wait(set(servicer._draining))
    servicer._executor.shutdown(wait=True)


def request(text="Hello.", *, max_new_tokens=12, greedy=True, session="", audio=b"", images=(), history=()):
    sampling = llm_pb2.Sampling(max_new_tokens=max_new_tokens)
    if greedy:
        sampling.top_k, sampling.temperature = 1, 0.0
    return llm_pb2.GenerateRequest(
        session_id=session,
        user=llm_pb2.UserContent(text=text, audio_wav=audio, images=[llm_pb2.Image(data=i) for i in images]),
        sampling=sampling,
        history=list(history),
    )


async def collect(call) -> tuple[list[str], llm_pb2.GenerateDone]:
    deltas, done = [], None
    async for event in call:
        if event.HasField("text_delta"):
            deltas.append(event.text_delta)
        else:
            done = event.done
    return deltas, done


async def test_model_info(stub):
    info = await stub.GetModelInfo(llm_pb2.GetModelInfoRequest(), timeout=5)
    assert info.model == "tiny-gemma4-mm" and info.audio_input and info.image_input
    assert info.backend == EXPECTED_BACKEND and info.backend_reason
    assert info.context_tokens == 2048 and not info.fallback


async def test_generate_streams_audio_image_and_text(stub, speech):
    wav = speech("What is in this picture?")
    # The service sends what the engine decoded since its last send as one delta, and a busy machine's event loop
    # can be held up as long as the tiny model takes for a short reply: a long one is sure to arrive in pieces.
    deltas, done = await collect(stub.Generate(request(audio=wav, images=[image_bytes()], max_new_tokens=600),
                                               timeout=10))
    assert len(deltas) > 1 and done.text == "".join(deltas)
    assert done.finish_reason in (llm_pb2.STOP, llm_pb2.LENGTH)
    t = done.timings
    assert t.prefill_tokens > 150  # the audio's and the image's tokens are in the prompt
    assert t.decode_tokens > 0 and t.time_to_first_token_ms > 0 and t.total_ms >= t.time_to_first_token_ms


async def test_bad_input_is_invalid_argument(stub):
    refused = metric("sotto_rpc_total", method="Generate", code="INVALID_ARGUMENT")
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await collect(stub.Generate(request(images=[b"GIF89a..."]), timeout=5))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "JPEG or PNG" in caught.value.details()
    await eventually(lambda: metric("sotto_rpc_total", method="Generate", code="INVALID_ARGUMENT") == refused + 1,
                     5, "the refusal counted")  # counted once the handler ended, maybe after the client read it


async def test_calls_while_the_model_loads_are_told_to_retry(stub, interceptor):
    interceptor.loaded = False
    for call in (stub.GetModelInfo(llm_pb2.GetModelInfoRequest(), timeout=5), collect(stub.Generate(request()))):
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await call
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and "loading" in caught.value.details()


async def test_history_reuses_the_session(stub):
    _, first = await collect(stub.Generate(request("question 7", max_new_tokens=40, session="svc"), timeout=10))
    history = [
        common_pb2.Turn(role=common_pb2.Turn.ROLE_USER, text="question 7"),
        common_pb2.Turn(role=common_pb2.Turn.ROLE_ASSISTANT, text=first.text),
    ]
    _, second = await collect(stub.Generate(request("More.", session="svc", history=history), timeout=10))
    assert second.timings.reused_conversation == (first.finish_reason == llm_pb2.STOP)


async def test_third_concurrent_call_is_refused_at_once(stub, admission):
    long = request("story 0", max_new_tokens=1900)
    first = stub.Generate(long, timeout=30)
    await first.read()  # running
    second = stub.Generate(long, timeout=30)
    second_reader = asyncio.ensure_future(second.read())  # makes sure the call is sent
    await eventually(lambda: admission.admitted == 2, 10, "the second call to queue behind the first")
    assert admission.waiting == 1
    busy = metric("sotto_rpc_total", method="Generate", code="RESOURCE_EXHAUSTED")
    # Queued, the third call would wait for a slot until its deadline: a RESOURCE_EXHAUSTED answer is "at once".
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await collect(stub.Generate(request(), timeout=5))
    assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert "busy" in caught.value.details()
    await eventually(lambda: metric("sotto_rpc_total", method="Generate", code="RESOURCE_EXHAUSTED") == busy + 1,
                     5, "the refusal counted")
    first.cancel()
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second_reader


async def test_client_cancel_stops_the_generation_and_frees_the_engine(stub):
    decoded = metric("sotto_llm_decode_tokens_total")
    cancelled = metric("sotto_rpc_total", method="Generate", code="CANCELLED")
    call = stub.Generate(request("story 0", max_new_tokens=1900), timeout=30)
    await call.read()
    await call.read()
    call.cancel()
    await eventually(lambda: metric("sotto_llm_active_requests") == 0, 10, "the engine to be free")
    assert metric("sotto_llm_decode_tokens_total") - decoded < 1800  # not the 1900 tokens of the cancelled call
    await eventually(lambda: metric("sotto_rpc_total", method="Generate", code="CANCELLED") == cancelled + 1, 10,
                     "the cancelled call to be counted")
    _, done = await collect(stub.Generate(request("Next."), timeout=10))
    assert done.timings.decode_tokens > 0


async def test_deadline_is_deadline_exceeded(stub):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await collect(stub.Generate(request("story 0", max_new_tokens=1900), timeout=0.2))
    assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED


async def test_a_reply_counts_its_tokens_and_timings(stub):
    names = ("sotto_llm_prefill_tokens_total", "sotto_llm_decode_tokens_total",
             "sotto_llm_time_to_first_token_seconds_count", "sotto_llm_time_per_output_token_seconds_count")
    before = {name: metric(name) for name in names}
    replies = metric("sotto_llm_finished_total", reason="stop") + metric("sotto_llm_finished_total", reason="length")
    _, done = await collect(stub.Generate(request("Count to ten.", max_new_tokens=8), timeout=10))
    grown = {name: metric(name) - before[name] for name in names}
    assert grown == {"sotto_llm_prefill_tokens_total": done.timings.prefill_tokens,
                     "sotto_llm_decode_tokens_total": done.timings.decode_tokens,
                     "sotto_llm_time_to_first_token_seconds_count": 1,
                     "sotto_llm_time_per_output_token_seconds_count": 1}
    assert done.timings.prefill_tokens > 0 and done.timings.decode_tokens > 0
    assert metric("sotto_llm_finished_total", reason="stop") + \
        metric("sotto_llm_finished_total", reason="length") == replies + 1


async def test_queue_busy_refusals_and_cancels_show_in_the_metrics(stub, admission):
    busy = metric("sotto_llm_refused_total", cause="busy")
    queued = metric("sotto_llm_cancelled_total", phase="queued")
    decoding = metric("sotto_llm_cancelled_total", phase="decode")
    decoded = metric("sotto_llm_decode_tokens_total")
    long = request("story 0", max_new_tokens=1900)
    first = stub.Generate(long, timeout=30)
    await first.read()
    await first.read()  # decoding
    second = stub.Generate(long, timeout=30)
    second_reader = asyncio.ensure_future(second.read())
    await eventually(lambda: admission.waiting == 1, 2, "the second call to queue")
    assert metric("sotto_llm_queue_depth") == 1 and metric("sotto_llm_active_requests") == 1
    with pytest.raises(grpc.aio.AioRpcError):
        await collect(stub.Generate(request(), timeout=5))
    assert metric("sotto_llm_refused_total", cause="busy") == busy + 1
    second.cancel()
    with pytest.raises(asyncio.CancelledError):
        await second_reader
    await eventually(lambda: metric("sotto_llm_cancelled_total", phase="queued") == queued + 1, 2, "a queued cancel")
    assert metric("sotto_llm_queue_depth") == 0
    first.cancel()
    await eventually(lambda: metric("sotto_llm_active_requests") == 0, 2, "the engine to be free")
    assert metric("sotto_llm_cancelled_total", phase="decode") == decoding + 1
    assert metric("sotto_llm_decode_tokens_total") >= decoded + 2  # the cancelled reply's tokens count too


class _BurstEngine:
    """Stands in for the engine to control timing: one token, then 20 decoded while the service's event loop
    is busy (as it is while it sends a message), then the end."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def generate(self, request):
        return _BurstGeneration(self.loop)


class _BurstGeneration:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    def cancel(self) -> None:
        pass

    def __iter__(self):
        yield TextDelta("Hello")
        busy = threading.Event()
        self.loop.call_soon_threadsafe(lambda: (busy.set(), time.sleep(0.2)))
        busy.wait(5)
        words = [f" w{i}" for i in range(20)]
        yield from (TextDelta(w) for w in words)
        yield Finished("Hello" + "".join(words), FinishReason.STOP, 0.01, 3, 21, 100.0, 100.0, 0.05, 24, False)


async def test_text_decoded_while_a_message_is_sent_goes_out_as_one_message():
    servicer = LlmServicer(Admission(), DEFAULTS, Models(_BurstEngine(asyncio.get_running_loop())))
    server = grpc.aio.server()
    llm_pb2_grpc.add_LlmServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    try:
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            deltas, done = await collect(llm_pb2_grpc.LlmServiceStub(channel).Generate(request(), timeout=10))
    finally:
        await server.stop(0)
        servicer._executor.shutdown(wait=True)
    assert "".join(deltas) == done.text == "Hello" + "".join(f" w{i}" for i in range(20))
    assert len(deltas) <= 2  # not one message per token: the 20 that piled up went together
    assert done.finish_reason == llm_pb2.STOP and done.timings.decode_tokens == 21


def test_service_process_serves_health_and_the_cli(tmp_path):
    """`python -m services.llm.server` loads the model, reports SERVING, answers the CLI client."""
    port, metrics_port = free_port(), free_port()
    env = {**os.environ, "SOTTO_LLM_MODEL": str(TINY_MM), "SOTTO_LLM_PORT": str(port),
           "SOTTO_LLM_METRICS_PORT": str(metrics_port), "SOTTO_MODEL_DIR": str(tmp_path), "SOTTO_OFFLINE": "true"}
    proc = subprocess.Popen([sys.executable, "-m", "services.llm.server"], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            deadline = time.monotonic() + 60
            status = None
            while time.monotonic() < deadline and proc.poll() is None:
                try:
                    status = health.Check(health_pb2.HealthCheckRequest(service="sotto.v1.LlmService"),
                                          timeout=1).status
                except grpc.RpcError:
                    status = None
                if status == health_pb2.HealthCheckResponse.SERVING:
                    break
                time.sleep(0.2)
            exited = proc.stdout.read() if proc.poll() is not None else ""
            assert status == health_pb2.HealthCheckResponse.SERVING, exited
        cli = subprocess.run(
            [sys.executable, "-m", "services.llm.client", "Hello there", "--image", str(_write_image(tmp_path)),
             "--max-new-tokens", "8", "--addr", f"127.0.0.1:{port}", "--timeout", "20"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
        )
        assert cli.returncode == 0, cli.stderr
        assert re.search(r"^\[(stop|length)\] .*prefill \d{3} tokens.*decode [1-8] tokens", cli.stderr), cli.stderr
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        assert re.search(r"^sotto_llm_decode_tokens_total [1-8]\.0$", scraped, re.M), scraped  # not the warm-up's
        assert re.search(r"^sotto_llm_queue_depth 0\.0$", scraped, re.M), scraped
        assert re.search(r"^sotto_llm_active_requests 0\.0$", scraped, re.M), scraped
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def _write_image(folder: Path) -> Path:
    path = folder / "cam.jpg"
    path.write_bytes(image_bytes("JPEG"))
    return path
