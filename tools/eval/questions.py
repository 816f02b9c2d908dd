"""The question set: what a voice assistant is asked, each with a rule for a correct answer.

Conversations, not lone questions: a follow-up ("And what about Spain?") is only answerable from the history, so
each conversation is asked in order, every answer joining the history as the gateway would keep it. A turn with no
rule sets the scene ("My name is Anna.") and is not scored.

A rule is a regular expression searched in the lower-cased answer; `need` > 1 asks for that many distinct matches
("Name three colours."). Rules accept the answer in words or digits and ignore what surrounds it, so a correct
answer in a full sentence counts; they are deliberately loose about style and strict about the fact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class Turn:
    ask: str
    accept: str | None  # regex on the lower-cased answer; None: a scene-setting turn, not scored
    need: int = 1       # distinct matches of `accept` required


@dataclass(frozen=True)
class Conversation:
    category: str       # fact, arithmetic, definition, request, follow-up
    turns: tuple[Turn, ...]


def _one(category: str, ask: str, accept: str, need: int = 1) -> Conversation:
    return Conversation(category, (Turn(ask, accept, need),))


_COLOURS = r"\b(red|orange|yellow|green|blue|purple|violet|indigo|pink|black|white|brown|gr[ae]y)\b"

CONVERSATIONS: tuple[Conversation, ...] = (
    _one("fact", "What is the capital of France?", r"\bparis\b"),
    _one("fact", "What is the capital of Japan?", r"\btokyo\b"),
    _one("fact", "What is the capital of Italy?", r"\brome\b"),
    _one("fact", "How many legs does a spider have?", r"\b(8|eight)\b"),
    _one("fact", "Who wrote Romeo and Juliet?", r"shakespeare"),
    _one("fact", "What is the largest planet in our solar system?", r"jupiter"),
    _one("fact", "At what temperature in Celsius does water boil?", r"\b(100|a hundred|one hundred)\b"),
    _one("fact", "Which ocean is the largest?", r"pacific"),
    _one("fact", "What colour is the sky on a clear day?", r"\bblue\b"),
    _one("fact", "How many days are there in a week?", r"\b(7|seven)\b"),
    _one("fact", "What is the chemical symbol for gold?", r"\bau\b"),
    _one("fact", "Who painted the Mona Lisa?", r"leonardo|da vinci"),
    _one("fact", "What is the closest star to the Earth?", r"\bsun\b"),
    _one("fact", "How many continents are there?", r"\b(7|seven)\b"),
    _one("fact", "What gas do plants take in from the air?", r"carbon dioxide|\bco2\b"),
    _one("fact", "What language do people speak in Brazil?", r"portuguese"),
    _one("fact", "Which animal is known as the king of the jungle?", r"\blions?\b"),
    _one("arithmetic", "What is two plus two?", r"\b(4|four)\b"),
    _one("arithmetic", "What is seven times eight?", r"\b(56|fifty[- ]six)\b"),
    _one("arithmetic", "What is ten minus three?", r"\b(7|seven)\b"),
    _one("arithmetic", "What is half of twenty?", r"\b(10|ten)\b"),
    _one("arithmetic", "What is fifteen plus twenty-seven?", r"\b(42|forty[- ]two)\b"),
    _one("arithmetic", "What is one hundred divided by four?", r"\b(25|twenty[- ]five)\b"),
    _one("arithmetic", "How many minutes are there in an hour?", r"\b(60|sixty) minutes|\b(is|are) (60|sixty)\b"),
    _one("arithmetic", "What is three squared?", r"\b(9|nine)\b"),
    _one("definition", "What is a noun?", r"person|place|thing|\bname"),
    _one("definition", "What does a thermometer measure?", r"temperature"),
    _one("definition", "What is a volcano?", r"lava|magma|erupt"),
    _one("definition", "What is a mammal?", r"milk|warm[- ]blooded|hair|\bfur\b"),
    _one("definition", "What is gravity?", r"force|pull|attract"),
    _one("definition", "What is a synonym?", r"(same|similar) meaning|means the same"),
    _one("definition", "What is photosynthesis?", r"light|\bsun"),
    _one("definition", "What is an island?", r"surrounded (on all sides )?by (the )?(water|sea|ocean)"),
    _one("request", "Say hello in Spanish.", r"\bhola\b"),
    _one("request", "Give me the opposite of hot.", r"\bcold\b"),
    _one("request", "Name three colours.", _COLOURS, need=3),
    _one("request", "Give me a word that rhymes with cat.",
         r"\b(hat|bat|mat|rat|sat|fat|pat|flat|chat|that|vat|brat)\b"),
    _one("request", "Count from one to five.", r"(1|one)\W+(2|two)\W+(3|three)\W+(4|four)\W+(5|five)"),
    _one("request", "Spell the word dog.", r"\bd\W{1,3}o\W{1,3}g\b"),
    Conversation("follow-up", (Turn("My name is Anna.", None), Turn("What is my name?", r"\banna\b"))),
    Conversation("follow-up", (Turn("What is the capital of Germany?", r"\bberlin\b"),
                               Turn("And what about Spain?", r"\bmadrid\b"))),
    Conversation("follow-up", (Turn("What is five plus three?", r"\b(8|eight)\b"),
                               Turn("Now multiply that by two.", r"\b(16|sixteen)\b"))),
    Conversation("follow-up", (Turn("My favourite colour is green.", None),
                               Turn("What is my favourite colour?", r"\bgreen\b"))),
    Conversation("follow-up", (Turn("I have three apples and I buy two more.", None),
                               Turn("How many apples do I have now?", r"\b(5|five)\b"))),
    Conversation("follow-up", (Turn("Tell me about the Eiffel Tower.", None),
                               Turn("In which city is it?", r"\bparis\b"))),
    Conversation("follow-up", (Turn("I live in London.", None),
                               Turn("Which country do I live in?", r"england|united kingdom|\buk\b|britain"))),
)


def correct(answer: str, turn: Turn) -> bool:
    """Whether `answer` satisfies the turn's rule (a turn without one is never scored)."""
    if turn.accept is None:
        raise ValueError(f"{turn.ask!r} sets the scene and has no rule to score")
    found = {m.group(0) for m in re.finditer(turn.accept, answer.lower())}
    return len(found) >= turn.need


def scored_turns() -> int:
    return sum(t.accept is not None for c in CONVERSATIONS for t in c.turns)
