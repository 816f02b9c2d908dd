"""The llm's tokens gathered into fewer, larger messages for the tts stream.

Why: each token sent on its own is one gRPC write from the gateway and one read, wake-up and sentence-split pass
in the tts service, and the tokens keep coming while the tts synthesises the first sentence on the same cores.

What is never held, so that no sentence reaches the tts later: the tts speaks a sentence (or a first clause) once
its end mark has arrived and the next word has begun, so text with a boundary mark goes at once, and so does all
text after it up to the next word character. Nothing is held before the first sentence has ended (an end mark
followed by a word), because the tts may cut a long first sentence at a clause mark or a space by its length,
at any token. Text held is therefore mid-clause words of later sentences, which the tts could not speak yet
anyway. This needs only which marks can end a clause, none of the tts's sentence rules; an abbreviation ("Dr.")
taken for a sentence end can delay a first clause cut by length, by at most one token after `hold_s`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# Marks after which the tts may end a sentence or a first clause (pysbd's stops, closing quotes and brackets,
# clause marks, dashes, line breaks, code fences, and their CJK forms). A superset is safe: it only sends sooner.
BOUNDARY_MARKS = frozenset(".!?…;:,\n\r—–-)]}\"'”’`。！？；：，、")
SENTENCE_END_MARKS = frozenset(".!?…\n\r。！？")


class TextHold:
    """`push(token)` returns the text to send now ("" to keep holding); `flush()` returns what is held."""

    def __init__(self, hold_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._hold_s = hold_s
        self._clock = clock
        self._held = ""
        self._held_since = 0.0
        self._after_boundary = False  # a boundary mark was seen and no word character since
        self._after_sentence_end = False  # the same, for a sentence end mark
        self._first_sentence_over = False
        self._last_char = ""

    def push(self, piece: str) -> str:
        if self._hold_s <= 0:
            return piece
        if not self._held:
            self._held_since = self._clock()
        self._held += piece
        send = self._after_boundary or not self._first_sentence_over
        for char in piece:
            if char in BOUNDARY_MARKS:
                send = self._after_boundary = True
                self._after_sentence_end = self._after_sentence_end or char in SENTENCE_END_MARKS
            elif char.isalnum():
                ends = self._after_sentence_end and self._last_char != "."  # "3.50", "p.m" end nothing
                self._first_sentence_over = self._first_sentence_over or ends
                self._after_boundary = self._after_sentence_end = False
            self._last_char = char
        if send or self._clock() - self._held_since >= self._hold_s:
            return self.flush()
        return ""

    def flush(self) -> str:
        held, self._held = self._held, ""
        return held
