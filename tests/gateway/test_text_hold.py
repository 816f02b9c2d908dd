"""The reply's tokens reach the tts in fewer messages, and no sentence starts later for it.

The sentences are found by the tts service's own splitter, so "no later" is checked against the rules that decide
when speech can start, not against a copy of them.
"""

from __future__ import annotations

import re

import pytest

from services.gateway.text_hold import TextHold
from services.tts.text import SentenceSplitter

REPLIES = [
    "Hello there. How are you today? I can see a red mug on your desk, next to a laptop.",
    "Well, it costs $3.50 (about 3.5 euros.) Then he left!",
    "\"Stop!\" she said. It was 10:30 p.m. and everyone — even the cat — was asleep.",
    "Here are three things:\n- bread\n- milk\n- eggs\nThat is all.",
    "Try this: ```print('hi')``` and run it. It prints hi.",
    "I think that the weather tomorrow will be sunny, with a light breeze; take a hat…",
    "这是一个测试。你好吗？很好，谢谢。",
    "Sure, I can help you with that. The mug on the left is red, the one on the right is blue.",
]
# The first clause of a long first sentence is cut by its length; "Dr." is taken for a sentence end, after
# which tokens are held, so that cut can come later, by at most the hold and one token.
ABBREVIATED = "Well, Dr. Smith said it costs $3.50 and the other one, he said, costs more."


def tokens(text: str) -> list[str]:
    """Pieces the way a model's tokens come: words with their leading space, marks on their own."""
    return re.findall(r"\s*\w+|\s*[^\w\s]|\s+", text)


def sentence_times(pieces: list[str], hold: TextHold | None) -> list[tuple[int, str]]:
    """(index of the token after which the tts had each sentence, the sentence)."""
    splitter, out = SentenceSplitter(), []
    for i, piece in enumerate(pieces):
        send = hold.push(piece) if hold else piece
        out += [(i, s.text) for s in splitter.push(send)] if send else []
    if hold:
        out += [(len(pieces), s.text) for s in splitter.push(hold.flush())]
    return out + [(len(pieces), s.text) for s in splitter.close()]


class Clock:
    def __init__(self, step_s: float) -> None:
        self.now, self.step_s = 0.0, step_s

    def __call__(self) -> float:
        return self.now


@pytest.mark.parametrize("reply", REPLIES)
def test_every_sentence_reaches_the_tts_with_the_same_token_as_without_holding(reply: str) -> None:
    pieces = tokens(reply)
    assert "".join(pieces) == reply
    never = TextHold(hold_s=3600.0, clock=Clock(0.0))  # only the marks decide
    assert sentence_times(pieces, never) == sentence_times(pieces, None)


def test_an_abbreviation_taken_for_a_sentence_end_delays_a_first_clause_at_most_one_token_past_the_hold() -> None:
    pieces, clock = tokens(ABBREVIATED), Clock(0.0)
    hold = TextHold(hold_s=0.2, clock=clock)
    splitter, plain, with_hold, without = SentenceSplitter(), SentenceSplitter(), [], []
    for i, piece in enumerate(pieces):
        clock.now = i * 0.05  # a token every 50 ms
        without += [(i, s.text) for s in plain.push(piece)]
        with_hold += [(i, s.text) for s in splitter.push(hold.push(piece))]
    assert [text for _, text in with_hold] == [text for _, text in without]
    assert without[0][1] == "Well," and with_hold[0][0] > without[0][0]  # the case this test is about
    for (late, _), (on_time, _) in zip(with_hold, without):
        assert on_time <= late <= on_time + 0.2 / 0.05 + 1


@pytest.mark.parametrize("reply", REPLIES)
def test_the_text_arrives_whole_and_later_sentences_in_fewer_messages(reply: str) -> None:
    hold = TextHold(hold_s=3600.0, clock=Clock(0.0))
    sent = [s for s in [*(hold.push(p) for p in tokens(reply)), hold.flush()] if s]
    assert "".join(sent) == reply
    assert len(sent) <= len(tokens(reply))


def test_a_typical_reply_reaches_the_tts_in_under_half_the_messages() -> None:
    reply = ("Sure, I can help you with that. The mug on the left is red, and the one on the right is blue. "
             "Both of them look like they are made of ceramic.")
    hold = TextHold(hold_s=3600.0, clock=Clock(0.0))
    sent = [s for s in [*(hold.push(p) for p in tokens(reply)), hold.flush()] if s]
    assert "".join(sent) == reply
    assert len(sent) < len(tokens(reply)) / 2, sent


def test_a_long_first_sentence_without_a_clause_mark_waits_at_most_one_token_past_the_hold() -> None:
    """The tts cuts such a sentence at a space once it is long: holding delays that cut, but only boundedly."""
    reply = "I really think that the weather tomorrow morning will turn out to be very sunny and warm and bright"
    pieces, clock = tokens(reply), Clock(0.0)
    hold = TextHold(hold_s=0.2, clock=clock)
    splitter, first_with, first_without = SentenceSplitter(), None, None
    plain = SentenceSplitter()
    for i, piece in enumerate(pieces):
        clock.now = i * 0.05  # a token every 50 ms
        if first_without is None and plain.push(piece):
            first_without = i
        if first_with is None and (send := hold.push(piece)) and splitter.push(send):
            first_with = i
    assert first_without is not None and first_with is not None
    assert first_without <= first_with <= first_without + 0.2 / 0.05 + 1


def test_a_zero_hold_sends_every_token_as_it_comes() -> None:
    hold = TextHold(hold_s=0.0)
    assert [hold.push(p) for p in ["Hel", "lo", " there"]] == ["Hel", "lo", " there"]
    assert hold.flush() == ""


def test_nothing_is_held_before_the_first_sentence_has_ended() -> None:
    hold = TextHold(hold_s=3600.0, clock=Clock(0.0))
    assert [hold.push(p) for p in ["I", " think", " so", ".", " It"]] == ["I", " think", " so", ".", " It"]
    assert [hold.push(p) for p in [" is", " big", "."]] == ["", "", " is big."]


def test_held_text_goes_once_it_has_waited_the_hold() -> None:
    clock = Clock(0.0)
    hold = TextHold(hold_s=0.2, clock=clock)
    assert hold.push("Yes. I") == "Yes. I"
    assert hold.push(" do") == ""
    clock.now = 0.1
    assert hold.push(" think") == ""
    clock.now = 0.2
    assert hold.push(" that") == " do think that"
    assert hold.push(" it") == ""  # the hold starts again with the next held token
