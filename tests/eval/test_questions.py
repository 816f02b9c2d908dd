"""The question set's rules: a correct answer in a spoken sentence counts, a wrong or evasive one does not."""

from __future__ import annotations

import re

import pytest

from tools.eval.questions import CONVERSATIONS, Turn, correct, scored_turns


def _turn(ask: str) -> Turn:
    return next(t for c in CONVERSATIONS for t in c.turns if t.ask == ask)


def test_the_set_covers_what_an_assistant_is_asked():
    assert scored_turns() >= 40
    categories = {c.category for c in CONVERSATIONS}
    assert categories == {"fact", "arithmetic", "definition", "request", "follow-up"}
    for conversation in CONVERSATIONS:
        if conversation.category == "follow-up":
            assert len(conversation.turns) >= 2 and conversation.turns[-1].accept is not None
    for turn in (t for c in CONVERSATIONS for t in c.turns if t.accept):
        re.compile(turn.accept)


@pytest.mark.parametrize(("ask", "answer", "expected"), [
    ("What is the capital of France?", "The capital of France is Paris.", True),
    ("What is the capital of France?", "Le Marble, le mau Rouge. (The capital of France.)", False),
    ("What is seven times eight?", "Seven times eight is 56.", True),
    ("What is seven times eight?", "It is fifty-six.", True),
    ("What is seven times eight?", "It is 566.", False),
    ("How many legs does a spider have?", "A spider has eight legs.", True),
    ("How many legs does a spider have?", "Spiders have 18 legs.", False),
    ("Name three colours.", "Red, blue and green.", True),
    ("Name three colours.", "Blue, blue and blue.", False),
    ("Count from one to five.", "1, 2, 3, 4, 5.", True),
    ("Count from one to five.", "One, two, three.", False),
    ("What is the chemical symbol for gold?", "Its symbol is Au.", True),
    ("What is the chemical symbol for gold?", "Gold is a precious metal.", False),
    ("Spell the word dog.", "D-O-G.", True),
    ("Spell the word dog.", 'The word dog is spelled "Dog."', False),
    ("How many minutes are there in an hour?", "There are 60 minutes in an hour.", True),
    ("How many minutes are there in an hour?", "It can be expressed as 30/60 = 1", False),
    ("What is an island?", "An island is land surrounded by water.", True),
    ("What is an island?", "An island is a land area that is not covered by water.", False),
])
def test_rules_judge_the_fact_not_the_phrasing(ask, answer, expected):
    assert correct(answer, _turn(ask)) is expected


def test_a_scene_setting_turn_is_never_scored():
    with pytest.raises(ValueError, match="sets the scene"):
        correct("Nice to meet you, Anna.", _turn("My name is Anna."))
