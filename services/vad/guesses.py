"""Turn verdicts taken ahead of time: the turn model judges a pause from its first silent window while the audio goes
on, so the model's own time is spent inside the silence instead of after it.

Bookkeeping only, in samples: which pause a guess is about (a pause is known by the sample it began at), whether it
is still current when it comes back, and when a guess of "complete" may end the turn. The stream
(``services.vad.engine.VadStream``) owns the audio and the model; ``Endpointer`` owns the pauses.

The rule: a guess of complete ends the turn once the pause has lasted the early turn silence. A guess of incomplete
heard only the pause's first window, so it decides nothing: the model takes its usual look at the turn silence, and
the turn is held only if that look says incomplete too. A guess whose pause the user spoke through is dropped, and
each pause gets one guess.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from services.vad.endpointing import Endpointer
from services.vad.smart_turn import COMPLETE_ABOVE


@dataclass(frozen=True)
class TurnGuess:
    """The turn model's input for a verdict taken ahead of time: the utterance's audio (a copy, so any thread may
    read it) as it was ``silence_ms`` into the pause that began at sample ``pause``, the pause's identity."""

    audio: np.ndarray
    pause: int
    silence_ms: float


@dataclass(frozen=True)
class Verdict:
    """A settled guess: the model's probability and when it was known, counted in silence of its pause (the silence
    it heard plus the model's own time)."""

    pause: int
    probability: float
    known_at_ms: float

    @property
    def complete(self) -> bool:
        return self.probability > COMPLETE_ABOVE


class Guesses:
    """One stream's guesses: at most one out at a time, one per pause."""

    def __init__(self, early_silence: int):
        self._early_silence = early_silence  # samples of silence after which a guess of complete ends the turn
        self.reset()

    def reset(self) -> None:
        self._out: int | None = None  # the pause of the guess handed out and not settled yet
        self._settled: Verdict | None = None  # the settled guess of the latest pause guessed, if any
        self._guessed: int | None = None  # the pause the last guess was taken for

    def due(self, endpointer: Endpointer) -> bool:
        """A pause has begun that no guess judges yet, and no verdict is asked or given for it. A pause that begins
        while an older guess is out gets its own once that one is settled."""
        pause = endpointer.pause_began
        return (pause is not None and self._out is None and self._guessed != pause
                and not (endpointer.verdict_pending or endpointer.held))

    def awaiting(self, endpointer: Endpointer) -> bool:
        """The verdict is due and the guess of this very pause is still out: wait for it, do not ask twice."""
        return endpointer.verdict_pending and self._out is not None and self._out == endpointer.pause_began

    def take(self, pause: int) -> None:
        self._out = self._guessed = pause

    @staticmethod
    def current(guess: TurnGuess, endpointer: Endpointer) -> bool:
        """The guess's pause still goes on: no speech resumed, and the turn was neither ended nor held meanwhile."""
        return guess.pause == endpointer.pause_began and not endpointer.held

    def settle(self, guess: TurnGuess, probability: float, model_ms: float, endpointer: Endpointer) -> bool:
        """Keep a guess that came back while its pause goes on; False: dropped."""
        if self._out == guess.pause:
            self._out = None
        if not self.current(guess, endpointer):
            return False
        self._settled = Verdict(guess.pause, probability, guess.silence_ms + model_ms)
        return True

    def early_end_due(self, endpointer: Endpointer, position: int) -> bool:
        """The current pause's guess says complete and the pause has lasted the early turn silence at ``position``."""
        settled = self._settled
        return (settled is not None and settled.complete and settled.pause == endpointer.pause_began
                and not (endpointer.verdict_pending or endpointer.held)
                and endpointer.silence_at(position) >= self._early_silence)

    def verdict(self, endpointer: Endpointer) -> Verdict | None:
        """The current pause's guess if it says complete, for the verdict now due; a guess of incomplete is dropped
        here, and the model takes its own look."""
        settled, self._settled = self._settled, None
        if settled is None or settled.pause != endpointer.pause_began or not settled.complete:
            return None
        return settled
