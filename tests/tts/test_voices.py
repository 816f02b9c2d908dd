"""A Kokoro voice's language, from its name, and the language the engine speaks it in when none is asked for."""

from __future__ import annotations

import pytest

from services.tts.kokoro_base import KokoroBase
from services.tts.voices import language_of


@pytest.mark.parametrize("voice, language", [
    ("af_heart", "en-us"), ("bf_emma", "en-gb"), ("jf_alpha", "ja"), ("zm_yunxi", "zh"), ("xx_nobody", "?"),
])
def test_a_voices_first_letter_names_its_language(voice, language):
    assert language_of(voice, "?") == language


@pytest.mark.parametrize("default, expected", [
    ("en-us", {"af_heart": "en-us", "bf_emma": "en-gb", "jf_alpha": "en-us"}),
    ("en-gb", {"af_heart": "en-gb", "bf_emma": "en-gb", "jf_alpha": "en-gb"}),
])
def test_without_a_language_british_voices_speak_british_english_and_the_rest_the_configured_one(default, expected):
    engine = KokoroBase(expected, tokenizer=None, default_language=default)
    assert {voice: engine.check(voice, 1.0, None)[1] for voice in expected} == expected
    assert engine.check("bf_emma", 1.0, "en-us") == ("bf_emma", "en-us")  # an asked-for language wins
