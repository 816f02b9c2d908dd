"""Fitting a request into the model's context: history trimmed oldest-first, a prompt that cannot fit refused.

The context (the KV cache) holds the system prompt, the history, the user's turn and the reply. Before a
conversation is built, `ContextBudget` counts the text with the model's own tokenizer, plus the chat template's
markup per message (measured from the template once), keeps room for the reply (its max_new_tokens) and drops the
oldest history turns until the rest fits; a kept history starts with a user turn, as chat templates expect.

What cannot be counted up front, the tokens of audio and images, shows in LiteRT-LM's own refusal of a prompt over
the context ("Input token ids are too long ... N >= M"). `overflow` reads N and M from it: the generation then
rebuilds with fewer turns, counting the rest of N as the media's share, and a prompt that does not fit even without
history is refused as invalid input with its size.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Sequence

_TOO_LONG = re.compile(r"too long\D*?(\d+)\s*>=\s*(\d+)")
_BOS = 1  # the one token a prompt starts with


@dataclasses.dataclass(frozen=True)
class Overflow:
    """LiteRT-LM refused a prompt of `prompt_tokens`: it takes fewer than `limit` tokens."""

    prompt_tokens: int
    limit: int

    def describe(self) -> str:
        return (f"the prompt is {self.prompt_tokens} tokens; this model takes at most {self.limit - 1}: "
                "send a shorter message")


def overflow(reason: str) -> Overflow | None:
    """The Overflow in a native error message, or None when the error is about something else."""
    found = _TOO_LONG.search(reason)
    return Overflow(int(found[1]), int(found[2])) if found else None


class ContextBudget:
    """Token counts of text as the engine will see it. Uses the engine's tokenizer: call it under the engine's
    lock, like everything that touches the engine."""

    def __init__(self, tokenize: Callable[[str], list[int]], context_tokens: int, markup_tokens: int) -> None:
        self._tokenize = tokenize
        self.context_tokens = context_tokens
        self._markup = markup_tokens  # what the chat template adds around one message, at most

    def message(self, text: str) -> int:
        """One message of this text, with its markup."""
        return len(self._tokenize(text)) + self._markup if text else self._markup

    def plan(self, turns: Sequence[tuple[str, str]], *, system_prompt: str, user_text: str, reserve: int,
             media_tokens: int = 0, at_least: int = 0) -> tuple[int, int]:
        """(how many of the oldest (role, content) turns to leave out, the text tokens of what is kept) so that
        the kept turns, the prompt's own text, `media_tokens` and `reserve` tokens for the reply fit the context.
        At least `at_least` turns go, and a kept history never opens with a reply."""
        sizes = [self.message(content) for _, content in turns]
        fixed = _BOS + (self.message(system_prompt) if system_prompt else 0) + self.message(user_text)
        room = self.context_tokens - reserve - media_tokens - fixed
        drop = at_least
        while drop < len(turns) and (sum(sizes[drop:]) > room or turns[drop][0] != "user"):
            drop += 1
        return drop, fixed + sum(sizes[drop:])

    def fits_after(self, held_tokens: int, user_text: str, reserve: int) -> bool:
        """Whether a conversation already holding `held_tokens` takes this user turn and the reply."""
        return held_tokens + self.message(user_text) + reserve <= self.context_tokens
