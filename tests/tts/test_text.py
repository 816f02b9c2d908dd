"""Sentence splitting (incremental) and speakable text."""

from __future__ import annotations

import re

import pytest

from services.tts.text import SentenceSplitter, speakable, split_sentences


def texts(text: str, **kw) -> list[str]:
    return [s.text for s in split_sentences(text, **kw)]


def streamed(pieces: list[str], **kw) -> list:
    splitter = SentenceSplitter(**kw)
    out = []
    for piece in pieces:
        out += splitter.push(piece)
    return out + splitter.close()


@pytest.mark.parametrize("text, expected", [
    ("Dr. Smith arrived. He sat down.", ["Dr. Smith arrived.", "He sat down."]),
    ("It costs 3.14 dollars. Cheap!", ["It costs 3.14 dollars.", "Cheap!"]),
    ("Use tools, e.g. a hammer. Then rest.", ["Use tools, e.g. a hammer.", "Then rest."]),
    ("Wait... what? Yes!", ["Wait... what?", "Yes!"]),
    ('He said "Stop!" Then he ran.', ['He said "Stop!"', "Then he ran."]),
    ("It is big (really big.) Fine.", ["It is big (really big.)", "Fine."]),
    ("Mr. T arrived at 5 p.m. He left.", ["Mr. T arrived at 5 p.m.", "He left."]),
    ("No final stop here", ["No final stop here"]),
    ("Title\n- one\n- two", ["Title", "- one", "- two"]),
    ("Look:\n```python\nprint('x')\n```\nDone.", ["Look:", "Done."]),
])
def test_sentence_ends(text, expected):
    assert texts(text, first_max_chars=0, first_unit_words=0) == expected


def test_spans_point_into_the_original_text():
    text = "  Hello there.  Dr. Who lives at 3.5 Baker St.\nBye"
    for sentence in split_sentences(text):
        assert text[sentence.start:sentence.end] == sentence.text
    assert [s.index for s in split_sentences(text)] == [0, 1, 2]


@pytest.mark.parametrize("chunking", ["chars", "words", "whole"])
def test_streaming_matches_whole_text(chunking):
    text = ("Well, the answer, as far as I can tell from the data, is 42. It was 3.14 percent, "
            "e.g. not much... Next line\n- item one\n```\ncode();\n```\nAfter code. End")
    pieces = {"chars": list(text), "words": re.findall(r"\S+|\s+", text), "whole": [text]}[chunking]
    got = streamed(pieces)
    assert [s.text for s in got] == texts(text)
    for sentence in got:
        assert text[sentence.start:sentence.end] == sentence.text


def test_a_sentence_is_emitted_as_soon_as_the_next_one_starts():
    splitter = SentenceSplitter(first_max_chars=0)
    assert splitter.push("Hello there.") == []  # "." may still be "..." or "3.14"
    assert [s.text for s in splitter.push(" The")] == ["Hello there."]
    assert [s.text for s in splitter.close()] == ["The"]


def test_the_opening_is_cut_at_clause_boundaries_into_growing_units():
    text = "Sure, that is a good question about the history of Rome; it is long. Second one, kept whole."
    assert texts(text, first_max_chars=30) == ["Sure,", "that is a good question about the history of Rome;",
                                               "it is long.", "Second one, kept whole."]
    assert texts(text, first_max_chars=0, first_unit_words=0)[0] == (
        "Sure, that is a good question about the history of Rome; it is long.")


def test_the_first_words_are_spoken_before_the_first_sentence_ends():
    """A first sentence without a clause: its first four words go out as soon as the fifth begins, marked as
    continuing (spoken on without a pause); the second unit may hold twice as many words, then sentences are whole."""
    text = "The capital of France is a city that sits on the river Seine and has about two million people. Yes."
    splitter = SentenceSplitter()
    pieces = re.findall(r"\S+\s*", text)
    assert [s.text for piece in pieces[:4] for s in splitter.push(piece)] == []
    first = splitter.push(pieces[4])
    assert [(s.text, s.continues) for s in first] == [("The capital of France", True)]
    rest = [s for piece in pieces[5:] for s in splitter.push(piece)] + splitter.close()
    assert [(s.text, s.continues) for s in rest] == [
        ("is a city that sits on the river", True), ("Seine and has about two million people.", False), ("Yes.", False)]
    assert [s.index for s in first + rest] == [0, 1, 2, 3]
    assert "".join(text[s.start:s.end] + " " for s in first + rest).split() == text.split()


def test_a_clause_is_preferred_to_a_cut_between_words():
    assert [(s.text, s.continues) for s in streamed(re.findall(r"\S+\s*", "Sure, I can help with that."))] == [
        ("Sure,", False), ("I can help with that.", False)]


def test_first_clause_is_spoken_before_the_first_sentence_ends():
    splitter = SentenceSplitter(first_max_chars=30, min_clause_chars=12)
    first = splitter.push("Well, the short answer to your question, as far as I can")
    assert [s.text for s in first] == ["Well, the short answer to your question,"]
    rest = splitter.push(" tell, is yes. Later, longer sentences are never cut, even long ones like this.")
    rest += splitter.close()
    assert [s.text for s in rest] == ["as far as I can tell, is yes.",
                                      "Later, longer sentences are never cut, even long ones like this."]
    assert [s.index for s in first + rest] == [0, 1, 2]


def test_the_clause_must_be_long_enough_to_stand_alone():
    splitter = SentenceSplitter(first_max_chars=10, min_clause_chars=12)
    got = splitter.push("Sure, that is a good question about Rome; it is long.") + splitter.close()
    assert [s.text for s in got] == ["Sure, that is a good question about Rome;", "it is long."]


def test_short_first_sentence_is_not_cut():
    assert texts("Yes, of course. Go on.", first_max_chars=30) == ["Yes, of course.", "Go on."]


@pytest.mark.parametrize("text, expected", [
    ("**Bold** and _it_ with `x` 🎉", "Bold and it with x"),
    ("See [the docs](http://example.com/a) now", "See the docs now"),
    ("Visit https://www.example.com/path today", "Visit example.com today"),
    ("## Heading", "Heading"),
    ("It costs $3.50", "It costs three dollars and fifty cents"),
    ("Only $1", "Only one dollar"),
    ("A €2.5 million deal", "A two point five million euros deal"),
    ("45% off", "forty-five percent off"),
    ("At 5:30 pm", "At five thirty P M"),
    ("At 10:00.", "At ten o'clock."),
    ("At 7:05", "At seven oh five"),
    ("The 22nd time", "The twenty-second time"),
    ("In 1999", "In nineteen ninety-nine"),
    ("1,234 people", "one thousand, two hundred and thirty-four people"),
    ("pi is 3.14", "pi is three point one four"),
    ("It was -5 degrees", "It was minus five degrees"),
    ("Salt & pepper", "Salt and pepper"),
    ("2 + 2 = 4", "two plus two equals four"),
    ("Use tools, e.g. hammers", "Use tools, for example hammers"),
])
def test_speakable(text, expected):
    assert speakable(text) == expected


def test_speakable_of_only_markup_is_empty():
    assert speakable("🎉🎉 **") == ""


def test_a_long_first_sentence_without_a_clause_is_cut_at_a_space_while_it_streams():
    text = "The picture shows a wooden table with a red cup and an open laptop next to a window. Nice."
    words = re.findall(r"\S+\s*", text)
    splitter = SentenceSplitter(first_max_chars=24)
    got, first_at = [], None
    for i, word in enumerate(words):
        got += splitter.push(word)
        if got and first_at is None:
            first_at = i
    got += splitter.close()
    assert first_at is not None and first_at < len(words) - 3, "the first piece waited for the sentence's end"
    assert len(got[0].text) <= 48 and text.startswith(got[0].text + " "), got[0]
    for sentence in got:
        assert text[sentence.start:sentence.end] == sentence.text
    assert "".join(text[s.start:s.end] + " " for s in got).split() == text.split()


def test_a_first_clause_goes_out_as_soon_as_its_comma_arrives():
    splitter = SentenceSplitter()
    assert splitter.push("Le") + splitter.push(" Grand") + splitter.push(" Paris") == []
    assert [(s.text, s.continues) for s in splitter.push(",")] == [("Le Grand Paris,", False)]
    assert [s.text for s in splitter.push(" le Grand.") + splitter.close()] == ["le Grand."]


def test_a_comma_inside_a_number_is_not_a_clause():
    splitter = SentenceSplitter()
    assert splitter.push("About 1") + splitter.push(",") == []
    assert [s.text for s in splitter.push("000 dollars.") + splitter.close()] == ["About 1,000 dollars."]
