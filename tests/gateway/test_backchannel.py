"""The backchannel rule (conversation/backchannel.py): which words and which lengths of speech over an answer cut
it, and which leave it playing."""

from __future__ import annotations

import numpy as np
import pytest

from services.common import config
from services.gateway.conversation.backchannel import Rule, SpeechExtent, Verdict, words_of

DEFAULTS = config.load_all({}).gateway
RULE = Rule.of_config(DEFAULTS)
SHORT = 0.4  # seconds of speech: within the default limit


@pytest.mark.parametrize("said", ["Uh-huh.", "Mm-hmm.", "Mhm.", "Yeah.", "Yeah, yeah.", "Oh, okay.", "Right.",
                                  "OK!", "Hmmm.", "I see.", "Got it.", "All right.", "uh huh", "Mm hmm", "Sure",
                                  "Really?", "Great.", "Thank you.", "Oh no!"])
def test_a_short_backchannel_in_whispers_spellings_resumes_the_answer(said: str) -> None:
    assert RULE.on_end(said, SHORT) is Verdict.RESUMED


@pytest.mark.parametrize("said", ["", " ", "[Music]", "(coughs)", "..."])
def test_a_short_sound_with_no_words_resumes_the_answer(said: str) -> None:
    assert RULE.on_end(said, SHORT) is Verdict.RESUMED


@pytest.mark.parametrize(("said", "seconds"), [
    ("Stop.", SHORT), ("Wait.", SHORT), ("No.", SHORT), ("Okay, stop.", 0.5), ("Thank you, but no.", 0.59),
    ("Why?", SHORT), ("Hold on.", SHORT), ("Run it!", SHORT), ("Ready for", SHORT)])
def test_a_short_utterance_with_a_stop_word_or_two_other_words_cuts_the_answer(said: str, seconds: float) -> None:
    assert RULE.on_end(said, seconds) is Verdict.CUT


@pytest.mark.parametrize("said", ["Bye.", "Boom.", "I", "Hello."])
def test_one_short_word_that_is_no_stop_word_lets_the_answer_play_on(said: str) -> None:
    """What Whisper made of "right" and "oh" over an answer in a room (docs/performance.md)."""
    assert RULE.on_end(said, SHORT) is Verdict.RESUMED


def test_one_word_cuts_when_the_minimum_is_one() -> None:
    rule = Rule.of(DEFAULTS.backchannel_words, 600, DEFAULTS.stop_words, min_words=1)
    assert rule.on_end("Bye.", SHORT) is Verdict.CUT


def test_no_words_at_all_because_the_recogniser_failed_cuts_as_before() -> None:
    assert RULE.on_end(None, SHORT) is Verdict.CUT


def test_speech_longer_than_a_backchannel_cuts_whatever_its_words() -> None:
    over = RULE.max_s + 0.05
    assert RULE.on_end("Yeah.", over) is Verdict.CUT
    assert RULE.on_time(over) is Verdict.CUT
    assert RULE.on_time(RULE.max_s - 0.05) is Verdict.DUCKED


def test_stable_words_cut_on_a_stop_word_or_the_second_other_word() -> None:
    assert RULE.on_words("Yeah") is Verdict.DUCKED
    assert RULE.on_words("I") is Verdict.DUCKED  # may become "I see"
    assert RULE.on_words("Yeah, what") is Verdict.CUT  # a question word cuts alone
    assert RULE.on_words("Hold") is Verdict.DUCKED  # one word: "hold on" cuts, "hold" may be misheard
    assert RULE.on_words("Hold on") is Verdict.CUT
    assert RULE.on_words("Tell me") is Verdict.CUT


def test_the_list_is_the_setting() -> None:
    rule = Rule.of("sure, thank you", 600)
    assert rule.on_end("Thank you.", SHORT) is Verdict.RESUMED
    assert rule.on_end("Yeah.", SHORT) is Verdict.CUT


def test_whisper_spellings_are_normalised() -> None:
    assert words_of("Uh-huh. Mm-hmm!") == ["uh", "huh", "mm", "hmm"]
    assert words_of("Hmmmm, [BLANK_AUDIO] okay") == ["hmm", "okay"]


def _tone(seconds: float, amplitude: float) -> bytes:
    t = np.arange(int(seconds * 16000)) / 16000
    return (np.sin(2 * np.pi * 220 * t) * amplitude).astype("<i2").tobytes()


def test_the_length_of_speech_is_where_its_sound_ends_not_where_the_vad_ends_it() -> None:
    extent = SpeechExtent()
    extent.push(_tone(0.4, 8000))
    # the silence (with a faint floor, 30 dB down) the vad waits through before it ends the speech
    assert extent.push(_tone(0.8, 250)) == pytest.approx(0.4, abs=0.04)
    assert RULE.on_time(extent.seconds) is Verdict.DUCKED
    assert extent.push(_tone(0.5, 6000)) == pytest.approx(1.7, abs=0.04)  # speech again: it goes on
    assert RULE.on_time(extent.seconds) is Verdict.CUT


@pytest.mark.parametrize("said", ["We're going to have to burn.", "I'm going to eat a..."])
def test_more_words_than_a_person_says_in_the_sound_are_whispers_not_the_users(said: str) -> None:
    """What Whisper wrote for half a second of a human "right" over an answer in a room (docs/performance.md)."""
    assert RULE.on_end(said, 0.576) is Verdict.RESUMED
    assert RULE.on_words(said, 0.576) is Verdict.DUCKED


def test_a_fast_real_request_still_cuts() -> None:
    assert RULE.on_end("No, no, stop.", 0.55) is Verdict.CUT
    assert RULE.on_end("Tell me more.", 0.5) is Verdict.CUT
