"""A session's turn-taking around pauses: an utterance whose answer nobody heard yet is continued, not answered
twice, and one whose words stop mid-phrase is held open a little longer.

Two cases end in one joined user turn (conversation/utterance_join.py):
- the vad ended the utterance and a turn started, but the user went on before any of its answer had been sent:
  the turn is interrupted and dropped (never in the history), and its input becomes the first part;
- a text-only model's words for the ended utterance stop on a word no sentence ends with (conversation/
  word_turn.py): the turn is not begun for up to the vad's longest turn silence (SOTTO_VAD_MAX_TURN_SILENCE_MS, counted
  from the end of speech); speech that comes meanwhile continues it. The words are awaited there anyway (they are
  the message), so a complete sentence loses nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.gateway import metrics
from services.gateway.conversation import utterance_join, word_turn
from services.gateway.conversation.turn import Turn, TurnInput

_LOGGER = logging.getLogger(__name__)


@dataclass
class _Part:
    inp: TurnInput
    text: asyncio.Future[str | None]  # its words (None: none could be had)


class Resumption:
    def __init__(self, *, begin: Callable[[TurnInput], Awaitable[None]], hold_s: float, word_turn_on: bool,
                 grace_s: float) -> None:
        """`begin` starts a turn; `hold_s`: the longest silence an unfinished phrase is held for; `grace_s`: how
        much later than a client's stop the audio of the speech that stopped it may arrive
        (utterance_join.resumes_unheard)."""
        self._grace_s = grace_s
        self._begin = begin
        self._hold_s = hold_s
        self._word_turn_on = word_turn_on
        self._first: _Part | None = None
        self._dropped: dict[str, asyncio.Future[str | None]] = {}  # turn id -> the future its words go to
        self._hold: asyncio.Task | None = None
        self._last_done: tuple[str, str, float] | None = None  # the last turn remembered: id, user words, when

    def speech_started(self, turn: Turn | None, resumed_at: float, heard_samples: int | None) -> str | None:
        """New speech, first received at `resumed_at`: None when it starts a new utterance; else it continues the
        last one, and the result is the id of the turn dropped for it ("": the utterance was held, no turn ran).
        `heard_samples`: what the client reported it played of `turn`'s answer (None: it reports nothing)."""
        if self._hold is not None and not self._hold.done():
            self._hold.cancel()
            self._hold = None
            metrics.INTERRUPTIONS.labels("resumed_while_held").inc()
            return ""
        done = self._last_done if turn is not None and self._last_done is not None and \
            self._last_done[0] == turn.inp.turn_id else None
        if not utterance_join.resumes_unheard(turn, resumed_at, done[2] if done else None, self._grace_s,
                                              heard_samples):
            return None
        assert turn is not None
        future: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._first = _Part(turn.inp, future)
        if done is not None:  # stopped by the client's own VAD a moment ago: its words are known
            future.set_result(done[1])
            self._last_done = None
        else:
            self._dropped[turn.inp.turn_id] = future
            turn.interrupt(0, "resumed_unheard")
        _LOGGER.info("utterance_resumed", extra={"dropped_turn": turn.inp.turn_id})
        return turn.inp.turn_id

    def remembered(self, turn_id: str, user_text: str) -> bool:
        """A turn is over: False when it was dropped for a join (its words go to the joined turn instead). A turn
        remembered may still be withdrawn by `speech_started` (the caller then takes it out of the history)."""
        future = self._dropped.pop(turn_id, None)
        if future is None:
            self._last_done = (turn_id, user_text, time.monotonic())
            return True
        if not future.done():
            future.set_result(user_text)
        return False

    def joined(self, second: TurnInput) -> tuple[TurnInput, asyncio.Future[str | None] | None]:
        """The ended utterance widened by the part before it, if any, and that part's words on their way (None:
        no part before it)."""
        first, self._first = self._first, None
        if first is None:
            return second, None
        metrics.INTERRUPTIONS.labels("utterance_joined").inc()
        return utterance_join.joined_input(first.inp, second), first.text

    async def ended(self, inp: TurnInput) -> None:
        """An utterance ended (joined already): begin its turn, or hold it while its words say it is unfinished."""
        words = inp.words
        if not (self._word_turn_on and words is not None and words.cascade):
            await self._begin(inp)
            return
        self._hold = asyncio.create_task(self._hold_then_begin(inp), name=f"hold-{inp.turn_id}")

    async def _hold_then_begin(self, inp: TurnInput) -> None:
        assert inp.words is not None
        text = asyncio.ensure_future(inp.words.peek())
        self._first = _Part(inp, text)  # if the user goes on, this is the first part

        def remaining() -> float:
            return max(0.0, self._hold_s - (time.monotonic() - inp.t_input_end))

        try:  # words later than the hold could last cannot hold the turn: begin it, the words follow
            async with asyncio.timeout(remaining()):
                words = await asyncio.shield(text)
        except TimeoutError:
            words = None
        if word_turn.verdict(words or "") is word_turn.WordVerdict.INCOMPLETE and remaining() > 0:
            _LOGGER.info("turn_held_by_words", extra={"hold_ms": round(remaining() * 1000)})
            await asyncio.sleep(remaining())
        self._hold, self._first = None, None  # from here on, speech is a barge-in on this turn
        await self._begin(inp)

    async def close(self) -> None:
        if self._hold is not None:
            self._hold.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._hold
