"""The held-out check of the end-of-turn rules: which prompts it may use, and that a prompt stopped after its middle
word holds the first half of its words and no more."""

from __future__ import annotations

import numpy as np

from tools.eval import truncated_speech as ts
from tools.eval.human_speech import COMPLETE, INCOMPLETE, Clip, asterisk_clips


def _clip(cid: str, words: str, label: str = COMPLETE) -> Clip:
    return Clip(cid, np.zeros(16000, dtype=np.int16), words, label, "test")


def test_only_unplayed_complete_prompts_of_six_words_or_more_are_held_out() -> None:
    clips = [_clip("asterisk/a", "please enter your password followed by pound"),
             _clip("asterisk/b", "please enter your password followed by pound"),
             _clip("asterisk/c", "press one for", INCOMPLETE),
             _clip("asterisk/d", "goodbye"),
             _clip("asterisk/letters/x", "one two three four five six"),
             _clip("pocketsphinx/librivox/e", "he was not an ill disposed young man")]
    assert [c.id for c in ts.held_out(clips, played={"asterisk/b"})] == ["asterisk/a"]


def test_a_prompt_stopped_midway_says_its_first_half_only() -> None:
    prompt = next(c for c in asterisk_clips() if c.id == "asterisk/agent-pass")  # "Please enter your password
    [cut] = ts.stopped_midway([prompt], limit=1)                                  #  followed by the pound key."
    assert cut.label == INCOMPLETE and cut.id.startswith("asterisk/agent-pass#to-word-")
    assert 0.3 * prompt.seconds < cut.seconds < 0.7 * prompt.seconds
    said = cut.transcript.lower()
    assert said.startswith("please enter") and "pound" not in said and "key" not in said
