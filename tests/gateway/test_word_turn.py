"""The words' half of the end of turn: what a phrase ends on says whether the user is done."""

from __future__ import annotations

import pytest

from services.gateway.conversation.word_turn import WordVerdict, verdict


@pytest.mark.parametrize("text", [
    "I went to the shop and", "Can you tell me about the", "What is the capital of", "So, um",
    "My favourite colour is", "I was wondering if", "Tell me a story about a dragon,", "Well, I think...",
    "It depends on whether", "Hi there. I wanted to ask you about",
    # unfinished clauses, full stop and all (Whisper writes one after most pauses)
    "To leave the conference.", "Because it was raining.", "Hi. If you could help me with my essay.",
    "There are currently.", "The time will be exactly.", "The last caller was.", "My flight is currently"])
def test_a_phrase_that_stops_mid_sentence_is_held(text: str) -> None:
    assert verdict(text) is WordVerdict.INCOMPLETE


@pytest.mark.parametrize("text", [
    "What is the capital of France?", "Hi there.", "Tell me a joke!", "What is it made of?",
    "Who are you talking to?", "Thank you very much.", "Thank you.", "How are you?", "Can you help me?",
    "Can you tell me what a rainbow is?", "Do you know where they are?", "To be honest, I don't know.",
    "If you can, help me.", "It is likely.", "The train was late.", "It was done quickly.",
    "Tell me a story. To make it fun, add a dragon."])
def test_a_complete_sentence_ends_the_turn(text: str) -> None:
    assert verdict(text) is WordVerdict.COMPLETE


@pytest.mark.parametrize("text", ["", "   ", "yes", "the weather in Paris today", "Agent logged in.",
                                  "Turn the lights off.",
                                  "He is more respectable than he was.", "Yes, it is.", "I know where the station is.",
                                  "That is what it was."])
def test_words_that_say_neither_leave_it_to_the_audio_model(text: str) -> None:
    assert verdict(text) is WordVerdict.UNSURE
