"""The vad service over real gRPC (in-process server on port 0): what a gateway relies on."""

from __future__ import annotations

import asyncio
import re
import sys
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from services.common.interceptor import ServiceInterceptor
from services.vad.client import stream_pcm
from services.vad.engine import SpeechEventKind, VadSettings
from services.vad.server import VadServicer
from sotto.v1 import vad_pb2, vad_pb2_grpc
from tests.helpers import eventually, metric
from tools.speech import write_wav

from .speech import compose
from .test_vad_engine import GAPS_S, TOLERANCE_MS, run

EPOCH_MS = 1_796_000_000_000  # capture clock of the fake microphone
pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def interceptor():
    return ServiceInterceptor(["sotto.v1.VadService"], loaded=True)


@pytest.fixture
async def service(model, interceptor):
    """(stub, servicer, address) of a VadService on a free loopback port, as the service's bootstrap serves it."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vad-test")
    servicer = VadServicer(VadSettings(), max_streams=3, executor=executor, model=model)
    server = grpc.aio.server(interceptors=[interceptor])
    vad_pb2_grpc.add_VadServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    address = f"127.0.0.1:{port}"
    async with grpc.aio.insecure_channel(address) as channel:
        yield vad_pb2_grpc.VadServiceStub(channel), servicer, address
    await server.stop(None)
    executor.shutdown(wait=True)


@pytest.fixture
def scene(utterances_16k):
    return compose(utterances_16k, GAPS_S, 16000, noise_dbfs=-50)


async def collect(stub, pcm: bytes, rate: int = 16000, **kwargs) -> list[vad_pb2.VadEvent]:
    return [event async for event in stream_pcm(stub, pcm, rate, **kwargs)]


def ended(events) -> list[vad_pb2.VadEvent]:
    return [e for e in events if e.kind == vad_pb2.VadEvent.SPEECH_ENDED]


# 20 ms chunks are endpointed on the event loop, 1 s chunks on the inference thread.
@pytest.mark.parametrize("chunk_ms", [20, 1000])
async def test_service_finds_the_same_turns_as_the_engine_with_capture_timestamps(service, model, scene, chunk_ms):
    stub, _, _ = service
    events = await collect(stub, scene.audio.tobytes(), start_ts_ms=EPOCH_MS, chunk_ms=chunk_ms, timeout=30)
    engine = [e for e in run(model, scene.audio, chunk_ms=20) if e.kind is SpeechEventKind.ENDED]
    assert [(e.start_sample, e.end_sample) for e in ended(events)] == [(e.start_sample, e.end_sample) for e in engine]
    for event, (true_start, true_end) in zip(ended(events), scene.truth_ms()):
        assert abs(event.start_ts_ms - EPOCH_MS - true_start) <= TOLERANCE_MS + 30  # default 30 ms pad
        assert abs(event.end_ts_ms - EPOCH_MS - true_end) <= TOLERANCE_MS + 30
    starts = [e for e in events if e.kind == vad_pb2.VadEvent.SPEECH_STARTED]
    assert len(starts) == 3 and all(s.processed_samples >= s.start_sample + 0.3 * 16000 for s in starts)


async def test_settings_of_the_first_message_apply_to_the_stream(service, utterances_16k):
    stub, _, _ = service
    pause = compose(utterances_16k[1:], [0.5, 0.3, 0.5], 16000)  # a 300 ms pause inside
    default = await collect(stub, pause.audio.tobytes())
    quick = await collect(stub, pause.audio.tobytes(), settings=vad_pb2.VadSettings(min_silence_ms=150))
    assert (len(ended(default)), len(ended(quick))) == (1, 2)


async def test_probabilities_are_streamed_when_asked(service, utterances_16k):
    stub, _, _ = service
    audio = compose(utterances_16k[:1], [0.5, 0.5], 16000).audio
    events = await collect(stub, audio.tobytes(), settings=vad_pb2.VadSettings(emit_probabilities=True))
    probs = [e.probability for e in events if e.kind == vad_pb2.VadEvent.PROBABILITY]
    assert len(probs) == len(audio) // 512 and max(probs) > 0.9 and min(probs) < 0.1


async def _raw_call(stub, requests: list[vad_pb2.VadRequest]) -> grpc.RpcError:
    async def gen():
        for request in requests:
            yield request
    call = stub.StreamAudio(gen(), timeout=10)
    with pytest.raises(grpc.RpcError) as raised:
        async for _ in call:
            pass
    return raised.value


def _settings(**kwargs) -> vad_pb2.VadRequest:
    return vad_pb2.VadRequest(settings=vad_pb2.VadSettings(**kwargs))


def _audio(pcm: bytes, rate: int = 16000, sequence: int = 0) -> vad_pb2.VadRequest:
    return vad_pb2.VadRequest(audio=vad_pb2.AudioChunk(pcm16=pcm, sample_rate=rate, sequence=sequence))


BAD_STREAMS = {
    "wrong sample rate": ([_settings(), _audio(b"\0" * 1024, rate=44100)],
                          r"sample rate must be one of \(16000, 8000\)"),
    "odd byte count": ([_settings(), _audio(b"\0" * 1023)], "even number of bytes, got 1023"),
    "empty stream": ([], "empty stream"),
    "settings but no audio": ([_settings()], "empty stream"),
    "no settings first": ([_audio(b"\0" * 1024)], "first message must carry settings"),
    "threshold out of range": ([_settings(threshold=1.5)], r"threshold must be in \[0.05, 0.95\], got 1.5"),
    "min silence out of range": ([_settings(min_silence_ms=50)], r"min_silence_ms must be in \[100, 10000\], got 50"),
    "rate change mid-stream": ([_settings(), _audio(b"\0" * 1024), _audio(b"\0" * 512, rate=8000, sequence=1)],
                               "sample rate changed from 16000 to 8000"),
    "chunks out of order": ([_settings(), _audio(b"\0" * 1024, sequence=5), _audio(b"\0" * 1024, sequence=4)],
                            "out of order"),
}


async def test_bad_streams_are_refused_clearly_while_a_good_one_is_served(service, utterances_16k):
    stub, servicer, _ = service
    live = compose(utterances_16k[:1], [0.5, 0.6], 16000)  # ~4 s, sent at the pace of a microphone
    good = asyncio.create_task(collect(stub, live.audio.tobytes(), chunk_ms=100, realtime=True, timeout=30))
    refused = metric("sotto_rpc_total", method="StreamAudio", code="INVALID_ARGUMENT")
    for name, (requests, message) in BAD_STREAMS.items():
        error = await _raw_call(stub, requests)
        assert error.code() == grpc.StatusCode.INVALID_ARGUMENT, name
        assert re.search(message, error.details()), f"{name}: {error.details()}"
    # The server counts a call once its handler has ended, which can be just after the client read the status.
    await eventually(lambda: metric("sotto_rpc_total", method="StreamAudio", code="INVALID_ARGUMENT")
                     == refused + len(BAD_STREAMS), 5, "every refusal counted")
    assert not good.done()
    events = await good
    assert len(ended(events)) == 1
    assert servicer.active_streams == 0


async def test_the_clients_end_of_speech_ends_the_segment_without_waiting_for_silence(service, utterances_16k):
    """A client with its own VAD stops sending when the user stops talking: the segment ends on its word."""
    stub, _, _ = service
    said = compose(utterances_16k[:1], [0.5, 0.1], 16000)  # 100 ms of silence after: far from the 400 ms needed
    requests: asyncio.Queue[vad_pb2.VadRequest | None] = asyncio.Queue()

    async def gen():
        while (request := await requests.get()) is not None:
            yield request

    call = stub.StreamAudio(gen(), timeout=30)
    events = aiter(call)
    for request in (_settings(), _audio(said.audio.tobytes())):
        requests.put_nowait(request)
    assert (await asyncio.wait_for(anext(events), 10)).kind == vad_pb2.VadEvent.SPEECH_STARTED
    requests.put_nowait(vad_pb2.VadRequest(end_of_speech=True))
    end = await asyncio.wait_for(anext(events), 10)
    assert end.kind == vad_pb2.VadEvent.SPEECH_ENDED
    (truth_start, truth_end), = said.truth
    assert abs(end.start_sample - truth_start) <= TOLERANCE_MS * 16 + 30 * 16  # default 30 ms pad
    assert truth_end <= end.end_sample <= len(said.audio)
    # nothing open: the next end of speech says nothing, and the stream goes on serving the next utterance
    requests.put_nowait(vad_pb2.VadRequest(end_of_speech=True))
    requests.put_nowait(vad_pb2.VadRequest(audio=vad_pb2.AudioChunk(pcm16=said.audio.tobytes(), sample_rate=16000,
                                                                     sequence=1), end_of_speech=True))
    kinds = [(await asyncio.wait_for(anext(events), 10)).kind for _ in range(2)]
    assert kinds == [vad_pb2.VadEvent.SPEECH_STARTED, vad_pb2.VadEvent.SPEECH_ENDED]
    requests.put_nowait(None)
    assert [e async for e in events] == []
    assert await call.code() == grpc.StatusCode.OK


async def _opened_streams(servicer, monkeypatch) -> list:
    opened = []
    real_open = servicer._open

    def spy(*args):
        opened.append(real_open(*args))
        return opened[-1]

    monkeypatch.setattr(servicer, "_open", spy)
    return opened


@pytest.mark.parametrize("how", ["cancel", "close channel"])
async def test_a_stream_dropped_mid_speech_frees_its_state_at_once(service, monkeypatch, scene, how):
    stub, servicer, address = service
    opened = await _opened_streams(servicer, monkeypatch)
    channel = grpc.aio.insecure_channel(address)
    own_stub = vad_pb2_grpc.VadServiceStub(channel) if how == "close channel" else stub
    stream_open = asyncio.Event()

    async def endless():
        yield _settings()
        for sequence in range(10_000):  # a live mic that never stops
            yield _audio(scene.audio[:320].tobytes(), sequence=sequence)
            stream_open.set()
            await asyncio.sleep(0.02)

    call = own_stub.StreamAudio(endless(), timeout=30)
    await asyncio.wait_for(stream_open.wait(), 5)
    await eventually(lambda: servicer.active_streams == 1 and opened, 10, "the server to open the stream")
    assert not opened[0].closed
    if how == "cancel":
        call.cancel()
    else:
        await channel.close()
    await eventually(lambda: not servicer.active_streams and opened[0].closed, 10, "the stream's state to be freed")
    assert opened[0]._state is None
    await channel.close()


async def test_streams_beyond_the_limit_are_told_busy(service, scene):
    stub, servicer, _ = service
    hold = asyncio.Event()

    async def held():
        yield _settings()
        await hold.wait()
        yield _audio(b"\0" * 640)

    calls = [stub.StreamAudio(held(), timeout=30) for _ in range(servicer.max_streams)]
    await eventually(lambda: servicer.active_streams == servicer.max_streams, 10, "the streams to open")
    busy = metric("sotto_rpc_total", method="StreamAudio", code="RESOURCE_EXHAUSTED")
    # The refused client writes nothing after its settings: a grpc.aio client whose write races
    # the server's early status reports INTERNAL "Internal error from Core" instead of the
    # server's code (grpc/grpc#36066, fix pending in #43486).
    refused = stub.StreamAudio(held(), timeout=30)
    with pytest.raises(grpc.RpcError) as raised:
        async for _ in refused:
            pass
    error = raised.value
    assert error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED and "busy" in error.details()
    await eventually(lambda: metric("sotto_rpc_total", method="StreamAudio", code="RESOURCE_EXHAUSTED") == busy + 1,
                     5, "the refusal counted")  # counted once the handler ended, maybe after the client read it
    hold.set()
    for call in calls:
        assert [e async for e in call] == []  # silence: no events, a clean end
    assert servicer.active_streams == 0


async def test_client_cli_prints_the_segments(service, scene, tmp_path):
    _, _, address = service
    wav = write_wav(tmp_path / "speech.wav", scene.audio, 16000)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.vad.client", str(wav), "--addr", address,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 0, err.decode()
    lines = out.decode().strip().splitlines()
    assert len(lines) == 3 and all(line.startswith("speech") for line in lines)
    first_start_s = float(lines[0].split()[1])
    assert abs(first_start_s * 1000 - scene.truth_ms()[0][0]) <= TOLERANCE_MS + 30


async def test_client_cli_explains_an_unsupported_wav(tmp_path):
    wav = write_wav(tmp_path / "cd.wav", np.zeros(4410, np.int16), 44100)
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.vad.client", str(wav), "--addr", "127.0.0.1:1",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2 and "16000 or 8000 Hz" in err.decode() and "sox" in err.decode()


async def test_the_service_refuses_to_start_with_default_settings_out_of_range(tmp_path):
    env = {**__import__("os").environ, "SOTTO_VAD_SPEECH_PAD_MS": "300", "SOTTO_VAD_PORT": "1"}
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "services.vad.server", env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 2
    assert "speech_pad_ms must be in [0, 200], got 300" in err.decode()


async def test_a_stream_opened_while_the_model_loads_is_told_to_retry(service, interceptor):
    stub, _, _ = service
    interceptor.loaded = False
    never = asyncio.Event()

    async def silent():  # writes nothing: see the grpc.aio write race noted in the busy test
        await never.wait()
        yield _settings()

    with pytest.raises(grpc.RpcError) as raised:
        async for _ in stub.StreamAudio(silent(), timeout=10):
            pass
    error = raised.value
    assert error.code() == grpc.StatusCode.UNAVAILABLE and "loading" in error.details()
