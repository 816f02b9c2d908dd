"""Requests against the size of the model's context (the tiny fixture's: 2048 tokens, about one token a character):
a prompt that cannot fit is refused as invalid input with its size, and history that would not leave room for the
reply is trimmed, oldest turns first."""

from __future__ import annotations

import numpy as np
import pytest

from services.common.audio import wav_bytes
from services.llm.context import ContextBudget
from services.llm.conversations import Turn
from services.llm.engine import FinishReason, GenerateRequest, Sampling
from services.llm.errors import InvalidInput

CONTEXT = 2048
SENTENCE = "the quiet river runs past the old mill. "


def test_a_prompt_over_the_context_is_refused_with_its_size(tiny_text_engine) -> None:
    assert tiny_text_engine.info.context_tokens == CONTEXT
    request = GenerateRequest(text=(SENTENCE * 60)[:2200], sampling=Sampling.greedy(8), session_id="too-long")
    with pytest.raises(InvalidInput, match=rf"the prompt is \d+ tokens; this model takes at most {CONTEXT - 1}"):
        list(tiny_text_engine.generate(request))
    *_, finished = tiny_text_engine.generate(GenerateRequest(text="Hello", sampling=Sampling.greedy(4),
                                                             session_id="too-long"))
    assert finished.decode_tokens > 0  # the engine is fine


def test_a_growing_conversation_is_trimmed_oldest_first_and_keeps_room_for_the_reply(tiny_text_engine) -> None:
    """As the gateway sends it: every turn carries the whole history so far, and the llm reuses its conversation
    while it can. The third turn of 900 tokens no longer fits beside the first two."""
    history: tuple[Turn, ...] = ()
    dropped = []
    for i in range(4):
        text = f"turn {i}: " + (SENTENCE * 23)[:900]
        *_, finished = tiny_text_engine.generate(GenerateRequest(text=text, history=history, session_id="growing",
                                                                 sampling=Sampling.greedy(16)))
        assert finished.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
        assert finished.context_tokens <= CONTEXT
        assert finished.decode_tokens == 16 or finished.finish_reason is FinishReason.STOP  # room for the reply
        dropped.append(finished.history_dropped)
        history += (Turn("user", text), Turn("assistant", finished.text))
    assert dropped[:2] == [0, 0] and all(d > 0 and d % 2 == 0 for d in dropped[2:]), dropped


def test_history_beside_long_audio_is_trimmed_by_what_the_audio_really_takes(tiny_engine) -> None:
    """Audio tokens cannot be counted before the engine encodes the clip: the engine's own refusal tells how many
    there were, and the conversation is rebuilt with fewer turns instead of failing."""
    history = tuple(Turn("user" if i % 2 == 0 else "assistant", f"turn {i}: " + (SENTENCE * 8)[:300])
                    for i in range(6))
    pcm = (np.sin(np.arange(16000 * 28) / 5) * 3000).astype("<i2").tobytes()
    *_, finished = tiny_engine.generate(GenerateRequest(text="What is this?", audio=(wav_bytes(pcm, 16000),),
                                                        history=history, session_id="audio",
                                                        sampling=Sampling.greedy(16)))
    assert finished.context_tokens <= CONTEXT
    assert finished.decode_tokens == 16 or finished.finish_reason is FinishReason.STOP
    assert 0 < finished.history_dropped < len(history) and finished.history_dropped % 2 == 0


def test_the_oldest_turns_go_first_and_the_kept_history_opens_with_a_user_turn() -> None:
    budget = ContextBudget(tokenize=lambda text: text.split(), context_tokens=100, markup_tokens=2)
    turns = [("user", "a " * 20), ("assistant", "b " * 20), ("user", "c " * 20), ("assistant", "d " * 20)]
    # prompt: 1 + (3 + 2) + (1 + 2) = 9 tokens, reserve 10: 81 left for turns of 22 tokens each
    assert budget.plan(turns, system_prompt="be brief please", user_text="hi", reserve=10) == (1 + 1, 9 + 44)
    assert budget.plan(turns, system_prompt="", user_text="hi", reserve=0) == (0, 4 + 88)
    assert budget.plan(turns, system_prompt="", user_text="hi", reserve=0, at_least=1)[0] == 2
