"""A held turn ended early on complete words: the words' half of the end of turn, on the side of answering sooner.

When the vad's turn model calls a pause incomplete it holds the utterance (TURN_HELD) for up to
SOTTO_VAD_MAX_TURN_SILENCE_MS, and on human read speech it does so after many complete sentences, which a person
then waits 1.5 s to have answered. For a model that takes text only (the cascade) the words are awaited anyway, and
the recogniser has usually heard the utterance so far already (a pause starts a background run): when those words
are a complete sentence (conversation/word_turn.py) the utterance ends now, instead of when the hold runs out. The
vad ends it only while it still holds it (`end_if_held`), so speech that resumed meanwhile is never cut; speech that
resumes after the end, before any of the answer was heard, is joined to it (conversation/resumption.py), as any
pause within one utterance is.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable

from services.common import config
from services.gateway import metrics
from services.gateway.conversation import word_turn

_LOGGER = logging.getLogger(__name__)


class EarlyEnd:
    def __init__(self, *, words_so_far: Callable[[], Awaitable[str | None]], end_held: Callable[[], None],
                 enabled: bool, wait_s: float) -> None:
        """`words_so_far()`: the recogniser's words for the open utterance until now (None: none, or it ended
        meanwhile); `end_held()`: ask the vad to end the utterance if it still holds it; `wait_s`: how long the
        words are worth waiting for (the hold itself: later, the vad has ended the turn anyway)."""
        self._words_so_far = words_so_far
        self._end_held = end_held
        self._enabled = enabled
        self._wait_s = wait_s
        self._task: asyncio.Task | None = None

    @classmethod
    def of(cls, cfg: config.Settings, words_so_far: Callable[[], Awaitable[str | None]],
           end_of_speech: Callable[..., None]) -> EarlyEnd:
        """A session's, from the settings (SOTTO_GATEWAY_EARLY_END, SOTTO_VAD_MAX_TURN_SILENCE_MS)."""
        return cls(words_so_far=words_so_far, end_held=lambda: end_of_speech(if_held=True),
                   enabled=cfg.gateway.early_end, wait_s=cfg.vad.max_turn_silence_ms / 1000.0)

    def held(self, cascade: bool) -> None:
        """The vad holds the open utterance: read its words, for a model that takes them as its message."""
        if not (self._enabled and cascade):
            return
        self.cancel()
        self._task = asyncio.create_task(self._decide(), name="early_end")

    def cancel(self) -> None:
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None

    async def _decide(self) -> None:
        try:
            async with asyncio.timeout(self._wait_s):
                text = await self._words_so_far()
        except TimeoutError:
            return
        if text is None or word_turn.verdict(text) is not word_turn.WordVerdict.COMPLETE:
            return
        _LOGGER.info("held_turn_ended_by_words", extra={"chars": len(text)})
        metrics.ENDED_BY_WORDS.inc()
        self._end_held()

    async def close(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
