"""Fixtures shared across test folders."""

from __future__ import annotations

import pytest

from tools.speech import speak


@pytest.fixture(scope="session")
def utterance(tmp_path_factory: pytest.TempPathFactory):
    """espeak-ng speech as 16 kHz PCM16 bytes."""
    workdir = tmp_path_factory.mktemp("speech")

    def make(text: str, voice: str = "en-us") -> bytes:
        return speak(text, voice, 16000, workdir).astype("<i2").tobytes()
    return make
