import pytest

from services.vad.engine import SileroVad
from tools.speech import speak

from .speech import UTTERANCES


@pytest.fixture(scope="session")
def model() -> SileroVad:
    vad = SileroVad()
    vad.warm_up()
    return vad


@pytest.fixture(scope="session")
def speech_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("speech")


@pytest.fixture(scope="session")
def utterances_16k(speech_dir):
    return [speak(text, voice, 16000, speech_dir) for voice, text in UTTERANCES]


@pytest.fixture(scope="session")
def utterances_8k(speech_dir):
    return [speak(text, voice, 8000, speech_dir) for voice, text in UTTERANCES]
