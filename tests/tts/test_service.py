"""The tts gRPC service over loopback, on the real ONNX engine."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import audio, config
from services.tts.kokoro_base import CHUNK_SAMPLES
from services.tts.loading import load_engine
from services.tts.server import TtsServicer
from sotto.v1 import tts_pb2, tts_pb2_grpc
from tests.helpers import eventually, metric
from tools.stack import free_port, wait_until

VOICE = tts_pb2.VoiceConfig(voice="jf_alpha", language="en-us")
LONG = ("This is a long answer that goes on for quite a while, so that the engine has plenty of work "
        "to do. It has a second sentence as well. And a third one, to be sure that it keeps going.")


@pytest.fixture
async def tts(onnx_engine):
    """(stub, executor) for a TtsServicer on an in-process server with the session's engine."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts-engine")
    servicer = TtsServicer(config.TtsConfig(), executor)
    servicer.engine = onnx_engine
    server = grpc.aio.server()
    tts_pb2_grpc.add_TtsServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield tts_pb2_grpc.TtsServiceStub(channel), executor
    await channel.close()
    await server.stop(0)
    executor.shutdown(wait=True)


class Synthesis:
    """What the engine did for the one call a test makes: the chunks it made, and events for its first step and
    for its end (closed by the service, or stopped by the call's cancel)."""

    def __init__(self) -> None:
        self.chunks: list = []
        self.stepping = threading.Event()
        self.ended = threading.Event()

    def watch(self, synthesize_sentences):
        def watched(*args, **kwargs):
            return self._steps(synthesize_sentences(*args, **kwargs))  # bad input still raises at the call

        return watched

    def _steps(self, chunks):
        self.stepping.set()
        try:
            for chunk in chunks:
                self.chunks.append(chunk)
                yield chunk
        finally:
            chunks.close()
            self.ended.set()


@pytest.fixture
def synthesis(onnx_engine, monkeypatch) -> Synthesis:
    """The session's engine, watched for one test (`synthesize` speaks through `synthesize_sentences`)."""
    watched = Synthesis()
    monkeypatch.setattr(onnx_engine, "synthesize_sentences", watched.watch(onnx_engine.synthesize_sentences))
    return watched


async def ended_and_engine_free(synthesis: Synthesis, executor: ThreadPoolExecutor) -> None:
    """Once the synthesis has ended, the engine's worker thread takes new work (a hang here fails the test)."""
    await eventually(synthesis.ended.is_set, 60, "the synthesis to end")
    await asyncio.wait_for(asyncio.get_running_loop().run_in_executor(executor, lambda: None), 60)


async def test_synthesize_streams_chunks_with_spans(tts):
    stub, _ = tts
    text = "Hello there. How are you today?"
    outs = [o async for o in stub.Synthesize(tts_pb2.SynthesizeRequest(text=text, config=VOICE), timeout=60)]
    assert {o.sample_rate for o in outs} == {24000}
    assert all(len(o.pcm16) == 2 * CHUNK_SAMPLES for o in outs if not o.sentence_end)
    ends = [o for o in outs if o.sentence_end]
    assert [(o.sentence_index, text[o.text_start:o.text_end], o.sentence_text) for o in ends] == [
        (0, "Hello there.", "Hello there."), (1, "How are you today?", "How are you today?")]
    assert outs[-1].sample_offset + len(outs[-1].pcm16) // 2 == sum(len(o.pcm16) for o in outs) // 2


async def test_first_audio_arrives_before_the_input_is_closed(tts):
    stub, _ = tts
    pieces: asyncio.Queue = asyncio.Queue()

    async def requests():
        yield tts_pb2.SynthesizeStreamRequest(config=VOICE)
        while (piece := await pieces.get()) is not None:
            yield tts_pb2.SynthesizeStreamRequest(text=piece)

    call = stub.SynthesizeStream(requests(), timeout=120)
    for piece in ["Hello", " there", ".", " How"]:
        await pieces.put(piece)
    first = await asyncio.wait_for(call.read(), timeout=60)  # the input is still open
    assert first.sentence_index == 0 and first.sentence_text == "Hello there."
    for piece in [" are", " you?", " Fine"]:
        await pieces.put(piece)
    await pieces.put(None)
    rest = []
    while (out := await call.read()) != grpc.aio.EOF:
        rest.append(out)
    assert [o.sentence_text for o in rest if o.sentence_end] == ["Hello there.", "How are you?", "Fine"]


@pytest.mark.parametrize("request_, message", [
    (tts_pb2.SynthesizeRequest(text="Hi.", config=tts_pb2.VoiceConfig(voice="af_nobody")), "available voices"),
    (tts_pb2.SynthesizeRequest(text=" "), "text is empty"),
    (tts_pb2.SynthesizeRequest(text="x" * 4001), "the limit is 4000"),
    (tts_pb2.SynthesizeRequest(text="Hi.", config=tts_pb2.VoiceConfig(speed=9)), "0.5 to 2.0"),
])
async def test_bad_input_is_invalid_argument(tts, request_, message):
    stub, _ = tts
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.Synthesize(request_, timeout=30):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in caught.value.details()


async def test_stream_over_the_length_limit_is_invalid_argument(tts):
    stub, _ = tts

    async def requests():
        yield tts_pb2.SynthesizeStreamRequest(config=VOICE)
        yield tts_pb2.SynthesizeStreamRequest(text="y" * 4001)

    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.SynthesizeStream(requests(), timeout=30):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT


async def test_cancel_after_first_chunk_stops_the_synthesis(tts, synthesis):
    stub, executor = tts
    call = stub.Synthesize(tts_pb2.SynthesizeRequest(text=LONG, config=VOICE), timeout=120)
    await call.read()
    call.cancel()
    await ended_and_engine_free(synthesis, executor)
    last = synthesis.chunks[-1]
    assert not (last.last_in_sentence and last.text_end == len(LONG)), "the whole text was synthesised"


async def test_cancel_during_a_model_run_aborts_it(tts, synthesis, onnx_runs, onnx_engine, monkeypatch):
    stub, executor = tts
    monkeypatch.setattr(onnx_engine, "first_max_chars", 0)  # a whole sentence in the first run, not a clause
    monkeypatch.setattr(onnx_engine, "first_unit_words", 0)
    call = stub.Synthesize(tts_pb2.SynthesizeRequest(text=LONG, config=VOICE), timeout=120)
    await eventually(onnx_runs.started.is_set, 60, "the first model run")
    call.cancel()
    await ended_and_engine_free(synthesis, executor)
    assert synthesis.chunks == [] and onnx_runs.outcomes == ["aborted"]


async def test_stream_cancel_while_waiting_for_text_frees_the_engine(tts, synthesis):
    stub, executor = tts
    hold = asyncio.Event()

    async def requests():
        yield tts_pb2.SynthesizeStreamRequest(config=VOICE)
        yield tts_pb2.SynthesizeStreamRequest(text="Still thinking about")
        await hold.wait()

    call = stub.SynthesizeStream(requests(), timeout=120)
    await eventually(synthesis.stepping.is_set, 60, "the engine to wait for a sentence")
    call.cancel()
    await ended_and_engine_free(synthesis, executor)
    assert synthesis.chunks == []
    hold.set()


async def test_synthesis_counts_the_audio_it_sends(tts):
    stub, _ = tts
    audio = metric("sotto_tts_audio_seconds_total")
    first_chunks = metric("sotto_tts_first_chunk_seconds_count", method="Synthesize")
    outs = [o async for o in stub.Synthesize(tts_pb2.SynthesizeRequest(text="Hello there.", config=VOICE), timeout=60)]
    sent = sum(len(o.pcm16) // 2 for o in outs) / 24000
    assert sent > 0.3 and metric("sotto_tts_audio_seconds_total") - audio == pytest.approx(sent)
    assert metric("sotto_tts_first_chunk_seconds_count", method="Synthesize") == first_chunks + 1
    assert metric("sotto_tts_active_streams") == 0


async def test_stream_is_active_while_open_and_its_first_chunk_is_timed_from_the_sentence(tts):
    stub, _ = tts
    waited = metric("sotto_tts_first_chunk_seconds_sum", method="SynthesizeStream")
    pieces: asyncio.Queue = asyncio.Queue()

    async def requests():
        yield tts_pb2.SynthesizeStreamRequest(config=VOICE)
        while (piece := await pieces.get()) is not None:
            yield tts_pb2.SynthesizeStreamRequest(text=piece)

    opened = time.perf_counter()
    call = stub.SynthesizeStream(requests(), timeout=120)
    await eventually(lambda: metric("sotto_tts_active_streams") == 1, 10, "the stream to open")
    await asyncio.sleep(0.5)  # the llm is still writing the first sentence
    await pieces.put("Hello there. How")  # the next word completes the sentence
    await call.read()
    from_open = time.perf_counter() - opened
    await pieces.put(" are you?")
    await pieces.put(None)
    while await call.read() != grpc.aio.EOF:
        pass
    assert metric("sotto_tts_first_chunk_seconds_sum", method="SynthesizeStream") - waited < from_open - 0.5
    await eventually(lambda: metric("sotto_tts_active_streams") == 0, 2, "the stream to close")


async def test_list_voices(tts):
    stub, _ = tts
    reply = await stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=10)
    assert reply.default_voice == "jf_alpha"
    assert [(v.name, v.language) for v in reply.voices][:2] == [("jf_alpha", "ja"), ("jf_gongitsune", "ja")]


def test_server_process_serves_the_kit_and_the_client_writes_a_wav(kit, tmp_path):
    port, metrics_port = free_port(), free_port()
    env = dict(os.environ, SOTTO_MODEL_DIR=str(kit.parent), SOTTO_TTS_PORT=str(port),
               SOTTO_TTS_METRICS_PORT=str(metrics_port), SOTTO_OFFLINE="true", SOTTO_TTS_ENGINE="onnx")
    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen([sys.executable, "-m", "services.tts.server"], cwd=root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)

            def serving():
                try:
                    status = health.Check(health_pb2.HealthCheckRequest(service="sotto.v1.TtsService"), timeout=1)
                except grpc.RpcError:
                    return False
                return status.status == health_pb2.HealthCheckResponse.SERVING

            wait_until(serving, timeout=120, what="tts SERVING")
        out = tmp_path / "out.wav"
        done = subprocess.run([sys.executable, "-m", "services.tts.client", "Hello from the client.",
                               "-o", str(out), "--addr", f"127.0.0.1:{port}"], cwd=root, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        wav = audio.read_wav(out.read_bytes())
        assert wav.sample_rate == 24000 and 0.8 < wav.duration_s < 5
        scraped = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
        sent = re.search(r"^sotto_tts_audio_seconds_total (\S+)$", scraped, re.M)
        assert sent and float(sent[1]) == pytest.approx(wav.duration_s, abs=0.01), scraped  # not the warm-up's
        assert re.search(r"^sotto_tts_active_streams 0\.0$", scraped, re.M), scraped
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.mark.parametrize("env, threads, spinning", [
    ({}, os.cpu_count(), "0"),
    ({"SOTTO_TTS_THREADS": "1", "SOTTO_TTS_SPIN_WAIT": "true"}, 1, "1"),
])
def test_the_services_thread_settings_reach_onnx_runtime(kit, env, threads, spinning):
    """Spinning threads hold cores the LLM needs while the first sentence is synthesised: off unless asked for.

    With one thread, a synthesis keeps at most one core busy, however long the sentence."""
    cfg = config.load(config.TtsConfig, {"SOTTO_TTS_MODEL": str(kit), "SOTTO_TTS_ENGINE": "onnx",
                                         "SOTTO_TTS_VOICE": VOICE.voice, **env})
    loaded = load_engine(cfg, config.load(config.CommonConfig, {"SOTTO_OFFLINE": "true"}))
    engine, backend = loaded.engine, loaded.backend
    options = engine._session.get_session_options()
    assert (backend, options.intra_op_num_threads) == ("onnx", threads)
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == spinning
    if threads == 1:
        cpu, wall = time.process_time(), time.perf_counter()
        list(engine.synthesize("A sentence long enough to keep the model busy for a while, on one core.", VOICE.voice))
        assert time.process_time() - cpu < 1.2 * (time.perf_counter() - wall)
