"""The tts gRPC service on the Piper engine: in process over loopback, and as its own process with
SOTTO_TTS_ENGINE=piper."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

from services.common import config
from services.tts.sentence_engine import CHUNK_SAMPLES
from services.tts.server import TtsServicer
from sotto.v1 import tts_pb2, tts_pb2_grpc
from tools.stack import free_port, wait_until

VOICE = "en_US-joe-medium"


@pytest.fixture
async def stub(piper_engine):
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="tts-engine")
    servicer = TtsServicer(config.TtsConfig(), executor)
    servicer.engine = piper_engine
    server = grpc.aio.server()
    tts_pb2_grpc.add_TtsServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}")
    yield tts_pb2_grpc.TtsServiceStub(channel)
    await channel.close()
    await server.stop(0)
    executor.shutdown(wait=True)


async def test_synthesize_sends_24khz_chunks_with_spans(stub):
    text = "Hello there. How are you today?"
    outs = [o async for o in stub.Synthesize(tts_pb2.SynthesizeRequest(text=text), timeout=60)]
    assert {o.sample_rate for o in outs} == {24000}
    assert all(len(o.pcm16) == 2 * CHUNK_SAMPLES for o in outs if not o.sentence_end)
    assert [text[o.text_start:o.text_end] for o in outs if o.sentence_end] == ["Hello there.", "How are you today?"]


async def test_first_audio_arrives_before_the_input_is_closed(stub):
    pieces: asyncio.Queue = asyncio.Queue()

    async def requests():
        yield tts_pb2.SynthesizeStreamRequest(config=tts_pb2.VoiceConfig(voice=VOICE, language="en-us"))
        while (piece := await pieces.get()) is not None:
            yield tts_pb2.SynthesizeStreamRequest(text=piece)

    call = stub.SynthesizeStream(requests(), timeout=120)
    for piece in ["Hello", " there", ".", " How"]:
        await pieces.put(piece)
    first = await asyncio.wait_for(call.read(), timeout=60)  # the input is still open
    assert first.sentence_text == "Hello there." and first.sample_rate == 24000
    for piece in [" are", " you?"]:
        await pieces.put(piece)
    await pieces.put(None)
    rest = []
    while (out := await call.read()) != grpc.aio.EOF:
        rest.append(out)
    assert [o.sentence_text for o in rest if o.sentence_end] == ["Hello there.", "How are you?"]


async def test_list_voices_names_the_english_voice(stub):
    reply = await stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=10)
    assert reply.default_voice == VOICE
    assert [(v.name, v.language) for v in reply.voices] == [(VOICE, "en-us")]


@pytest.mark.parametrize("voice_config, message", [
    (tts_pb2.VoiceConfig(voice="jf_alpha"), "available voices: en_US-joe-medium"),
    (tts_pb2.VoiceConfig(language="en-gb"), "speaks en-us only"),
])
async def test_bad_voice_or_language_is_invalid_argument(stub, voice_config, message):
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        async for _ in stub.Synthesize(tts_pb2.SynthesizeRequest(text="Hi.", config=voice_config), timeout=30):
            pass
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert message in caught.value.details()


def test_the_service_started_with_engine_piper_answers_every_call(tmp_path):
    port, metrics_port = free_port(), free_port()
    env = dict(os.environ, SOTTO_MODEL_DIR=str(tmp_path), SOTTO_TTS_PORT=str(port),
               SOTTO_TTS_METRICS_PORT=str(metrics_port), SOTTO_OFFLINE="true", SOTTO_TTS_ENGINE="piper")
    root = Path(__file__).resolve().parents[2]
    server = subprocess.Popen([sys.executable, "-m", "services.tts.server"], cwd=root, env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
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
            tts = tts_pb2_grpc.TtsServiceStub(channel)
            voices = tts.ListVoices(tts_pb2.ListVoicesRequest(), timeout=10)
            whole = list(tts.Synthesize(tts_pb2.SynthesizeRequest(text="Hello from Piper."), timeout=60))
            streamed = list(tts.SynthesizeStream(iter([
                tts_pb2.SynthesizeStreamRequest(config=tts_pb2.VoiceConfig()),
                tts_pb2.SynthesizeStreamRequest(text="Streamed text. "),
                tts_pb2.SynthesizeStreamRequest(text="Still English.")]), timeout=60))
    finally:
        server.terminate()
        log = server.communicate(timeout=10)[0]
    assert [(v.name, v.language) for v in voices.voices] == [(VOICE, "en-us")]
    for outs in (whole, streamed):
        assert {o.sample_rate for o in outs} == {24000}
        assert 0.5 < sum(len(o.pcm16) for o in outs) / 2 / 24000 < 5
    assert [o.sentence_text for o in streamed if o.sentence_end] == ["Streamed text.", "Still English."]
    events = [json.loads(line) for line in log.splitlines() if line.startswith("{")]
    ready = next(e for e in events if e.get("event") == "serving")
    assert (ready["engine"], ready["backend"], ready["default_voice"]) == ("piper", "piper", VOICE)
