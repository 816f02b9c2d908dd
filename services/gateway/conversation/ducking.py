"""A session's speech over an answer being heard, judged by the backchannel rule (conversation/backchannel.py).

The session hands each such utterance here: `begin` at the vad's speech start (the answer is ducked: `TurnDuck`),
its audio as it comes (`audio`: its length), the recogniser's stable words (`stable`), and its end (`verdict`, with
the final words). The rule's cut calls the session back (`on_cut`: stop the answer as a barge-in always did) and
announces the speech (`announce`: `SpeechStarted`, held back until then, so a Realtime client, which stops its
playback on `input_audio_buffer.speech_started`, hears a backchannel's answer go on). An utterance that ends as a
backchannel or a noise un-ducks the answer (`TurnUnduck`) and is not a turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import numpy as np

from services.common import config
from services.gateway import metrics
from services.gateway.conversation import events
from services.gateway.conversation.backchannel import Rule, SpeechExtent, Verdict
from services.gateway.conversation.turn import Turn
from services.gateway.links.asr import Words

_LOGGER = logging.getLogger(__name__)


def attenuated(pcm16: bytes, gain: float) -> bytes:
    """PCM16 scaled by a linear `gain` (<= 1: no clipping)."""
    x = np.frombuffer(pcm16, dtype="<i2").astype(np.float32) * gain
    return np.round(x).astype("<i2").tobytes()


@dataclass
class Judged:
    """One utterance over a heard answer, until its verdict."""

    turn: Turn
    ts_ms: float                      # its start on the client's capture clock (for `SpeechStarted`)
    extent: SpeechExtent = field(default_factory=SpeechExtent)
    speaking: bool = True             # the vad has not ended it yet
    verdict: Verdict = Verdict.DUCKED
    announced: bool = False           # `SpeechStarted` was sent for it


class Ducking:
    def __init__(self, gw: config.GatewayConfig, *, send: Callable[[events.Event], None],
                 on_cut: Callable[[Turn], None], announce: Callable[[float], None]) -> None:
        """Off (SOTTO_GATEWAY_BACKCHANNEL=false): `enabled` is False, and the session cuts at once as before."""
        self.rule = Rule.of_config(gw) if gw.backchannel else None
        self.gain_db = gw.duck_db
        self._gain = float(10 ** (gw.duck_db / 20))
        self._send = send
        self._on_cut = on_cut
        self._announce = announce
        self._ducked: Turn | None = None  # the answer lowered now
        self._open: list[Judged] = []     # utterances over it without a verdict, oldest first
        self._verdicts: set[asyncio.Task] = set()

    @property
    def enabled(self) -> bool:
        return self.rule is not None

    def gain(self, turn: Turn | None) -> float:
        """The linear gain of `turn`'s audio now (1: not ducked)."""
        return self._gain if turn is not None and turn is self._ducked else 1.0

    def begin(self, turn: Turn, ts_ms: float, pcm_so_far: bytes) -> None:
        """Speech started over `turn`'s heard answer, with its audio so far: duck the answer, judge the speech."""
        if self._ducked is not turn:
            self._open.clear()  # judgements of an answer gone by (cut, or a newer turn) have no answer to resume
            self._ducked = turn
            self._send(events.TurnDuck(turn_id=turn.inp.turn_id, gain_db=self.gain_db))
            metrics.INTERRUPTIONS.labels("ducked").inc()
        self._open.append(Judged(turn=turn, ts_ms=ts_ms))
        self.audio(pcm_so_far)

    def _current(self) -> Judged | None:
        return self._open[-1] if self._open and self._open[-1].speaking else None

    def audio(self, pcm16: bytes) -> None:
        """The next audio of the speech being judged (no-op when none is)."""
        if (j := self._current()) is None or not pcm16 or self.rule is None:
            return
        if self.rule.on_time(j.extent.push(pcm16)) is Verdict.CUT:
            self._cut(j, "length")

    def stable(self, text: str) -> None:
        """The recogniser's stable words of the speech being judged."""
        if (j := self._current()) is not None and self.rule is not None and \
                self.rule.on_words(text, j.extent.seconds) is Verdict.CUT:
            self._cut(j, "words")

    def speech_ended(self) -> Judged | None:
        """The vad ended the speech: the judgement it belongs to (None: it was not over a heard answer)."""
        j = self._current()
        if j is not None:
            j.speaking = False
        return j

    def judge(self, j: Judged, words: Words | None, turn: Callable[[Words | None], Awaitable[None]]) -> None:
        """The speech ended: once its words are in, a backchannel or a noise is dropped, anything else becomes a
        turn (`turn`, given the words)."""
        async def run() -> None:
            if await self.verdict(j, words) is Verdict.CUT:
                await turn(words)

        task = asyncio.create_task(run(), name="ducking::verdict")
        self._verdicts.add(task)
        task.add_done_callback(self._verdicts.discard)

    async def verdict(self, j: Judged, words: Words | None) -> Verdict:
        """The utterance's verdict once its final words are in (`words` None: none were streamed)."""
        text = await words.text() if words is not None else None
        assert self.rule is not None
        if j.verdict is Verdict.DUCKED:
            if self.rule.on_end(text, j.extent.seconds) is Verdict.CUT:
                self._cut(j, "end_words")
            else:
                j.verdict = Verdict.RESUMED
                self._resume(j)
        if j.verdict is Verdict.CUT and not j.announced:
            j.announced = True
            self._announce(j.ts_ms)
        _LOGGER.info("speech_over_answer", extra={"verdict": j.verdict.value, "speech_ms": round(
            j.extent.seconds * 1000), "words": len(text.split()) if text else 0})
        return j.verdict

    def _resume(self, j: Judged) -> None:
        if j in self._open:
            self._open.remove(j)
        if self._ducked is j.turn and not self._open:
            self._ducked = None
            metrics.INTERRUPTIONS.labels("resumed_after_duck").inc()
            self._send(events.TurnUnduck(turn_id=j.turn.inp.turn_id))

    def _cut(self, j: Judged, why: str) -> None:
        """The rule says cut: every utterance open over this answer is a turn now, and the answer stops."""
        for other in self._open:
            other.verdict = Verdict.CUT
        j.verdict = Verdict.CUT
        if not j.announced:
            j.announced = True
            self._announce(j.ts_ms)
        if self._ducked is j.turn:
            self._ducked = None
            _LOGGER.info("ducked_answer_cut", extra={"by": why, "speech_ms": round(j.extent.seconds * 1000)})
            self._on_cut(j.turn)
        self._open = []

    async def close(self) -> None:
        self._open.clear()
        self._ducked = None
        for task in list(self._verdicts):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
