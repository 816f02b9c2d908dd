import pytest

from services.vad.engine import SileroVad
from tools.speech import speak

from .speech import TURN_TEXTS, UTTERANCES


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


@pytest.fixture(scope="session")
def turn_model():
    """The smart-turn model `make turn-model` extracts; missing, its error says how to get it."""
    from services.common import config
    from services.vad.smart_turn import SmartTurn, default_model_path

    model = SmartTurn(default_model_path(config.load(config.CommonConfig).model_dir))
    model.warm_up()
    return model


@pytest.fixture(scope="session")
def turn_clips(speech_dir):
    """espeak-ng clips at 16 kHz: a complete question, a filler-ended start and its continuation."""
    return {name: speak(text, "en-us", 16000, speech_dir) for name, text in TURN_TEXTS.items()}
