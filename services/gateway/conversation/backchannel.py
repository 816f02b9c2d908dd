"""Speech over an answer being heard: a backchannel or noise ducks the answer, anything else cuts it.

What users complain about most after self-interruption is an assistant that stops on "uh-huh", a cough or a knock
(livekit/agents#4450, #1229). The rule (SOTTO_GATEWAY_BACKCHANNEL, on by default):

1. While an answer is heard, speech the vad starts **ducks** it at once: the client is told (`TurnDuck`, gain
   SOTTO_GATEWAY_DUCK_DB) and the audio the gateway still sends of that turn is attenuated by the same gain.
2. The answer is **cut** (a running turn is interrupted, a finished one still playing gets `TurnCut`) as soon as
   - the recogniser's stable words so far hold a stop word (SOTTO_GATEWAY_STOP_WORDS: "stop", "wait", "no", a
     question word), or SOTTO_GATEWAY_INTERRUPT_MIN_WORDS words or more of which one is in no backchannel phrase, or
   - the speech has gone on longer than a backchannel lasts (SOTTO_GATEWAY_BACKCHANNEL_MAX_MS from its start), or
   - the utterance ends and its final words cut by the same test (or no words could be had: the recogniser
     failed, so the speech is taken as meant, as before this rule).
3. The answer is **resumed** (`TurnUnduck`: gain restored; playback never paused, so it goes on where it was) when
   the utterance ends within that time with words that do not cut: all backchannel phrases ("Uh-huh.", "Oh,
   okay."), a single word that is no stop word (most often a backchannel misheard in a room), or none at all
   (speech-like noise Whisper gives no words for, or more words than a person says in the sound's length:
   SOTTO_GATEWAY_BACKCHANNEL_MAX_WORDS_PER_S, Whisper inventing a sentence for half a second of sound). That
   utterance is not a turn: no answer, not in the history, no error.

In practice on a CPU the words come after the time limit for anything longer than a backchannel, so a long cut-in
is cut by its length and the words decide short ones ("Stop." at its end). LiveKit's `resume_false_interruption`
resumes after a pause; Pipecat's minimum-words strategy waits for N words; here a cut needs no words at all once the
speech is long, and a short sound never stops the answer.

This module is the decision only (pure, no clock of its own): `conversation/ducking.py` applies it to a session,
and `tools/eval/echo_room.py` runs the same code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from services.common.config import GatewayConfig

_BRACKETED = re.compile(r"\[[^\]]*\]|\([^)]*\)|\*[^*]*\*")  # Whisper's "[Music]", "(coughs)", "*sigh*": not words
_NOT_LETTER = re.compile(r"[^a-z' ]+")
_REPEATS = re.compile(r"(.)\1{2,}")  # "hmmm", "mmmm", "ohhh": the same sound held longer


def words_of(text: str) -> list[str]:
    """The words as the rule compares them: lower case, punctuation and hyphens gone ("Uh-huh." -> uh huh), a
    letter held over three times once ("Hmmm" -> hmm), annotations dropped."""
    text = _BRACKETED.sub(" ", text.lower()).replace("-", " ")
    text = _NOT_LETTER.sub(" ", text)
    return [_REPEATS.sub(r"\1\1", w.strip("'")) for w in text.split() if w.strip("'")]


def phrases_of(listed: str) -> tuple[tuple[str, ...], ...]:
    """SOTTO_GATEWAY_BACKCHANNEL_WORDS (comma-separated) as word tuples, longest first (matched greedily)."""
    found = {tuple(words_of(item)) for item in listed.split(",")}
    return tuple(sorted((p for p in found if p), key=len, reverse=True))


def all_backchannel(words: list[str], phrases: tuple[tuple[str, ...], ...]) -> bool:
    """Every word belongs to a backchannel phrase said whole ("yeah yeah", "oh okay", "i see"); no words: True."""
    i = 0
    while i < len(words):
        match = next((p for p in phrases if tuple(words[i:i + len(p)]) == p), None)
        if match is None:
            return False
        i += len(match)
    return True


def foreign_word(words: list[str], phrases: tuple[tuple[str, ...], ...]) -> bool:
    """Some word is in no backchannel phrase at all: whatever follows, the words are not a backchannel. (A word
    of a phrase may yet be completed by the next: "i" of "i see" alone decides nothing.)"""
    known = {w for p in phrases for w in p}
    return any(w not in known for w in words)


class Verdict(Enum):
    DUCKED = "ducked"    # undecided: the answer plays on, lowered
    CUT = "cut"          # the answer stops; the utterance is a turn
    RESUMED = "resumed"  # the answer's gain comes back; the utterance is not a turn


def contains(words: list[str], phrases: tuple[tuple[str, ...], ...]) -> bool:
    """Some phrase occurs in the words, whole and in order ("hold on" in "oh hold on")."""
    return any(tuple(words[i:i + len(p)]) == p for p in phrases for i in range(len(words) - len(p) + 1))


@dataclass(frozen=True)
class Rule:
    phrases: tuple[tuple[str, ...], ...]
    max_s: float          # SOTTO_GATEWAY_BACKCHANNEL_MAX_MS, in seconds
    stops: tuple[tuple[str, ...], ...] = ()  # SOTTO_GATEWAY_STOP_WORDS: cut alone
    min_words: int = 1    # SOTTO_GATEWAY_INTERRUPT_MIN_WORDS: other words cut from this many on
    max_words_per_s: float = float("inf")  # SOTTO_GATEWAY_BACKCHANNEL_MAX_WORDS_PER_S

    @classmethod
    def of(cls, listed: str, max_ms: int, stops: str = "", min_words: int = 1,
           max_words_per_s: float = float("inf")) -> Rule:
        return cls(phrases=phrases_of(listed), max_s=max_ms / 1000.0, stops=phrases_of(stops), min_words=min_words,
                   max_words_per_s=max_words_per_s)

    @classmethod
    def of_config(cls, gw: GatewayConfig) -> Rule:
        return cls.of(gw.backchannel_words, gw.backchannel_max_ms, gw.stop_words, gw.interrupt_min_words,
                      gw.max_words_per_s)

    def _heard(self, text: str, speech_s: float) -> list[str]:
        """The words, unless there are more than anyone says in `speech_s`: Whisper, given half a second of a
        backchannel over a room's echo, can write a whole sentence ("We're going to have to burn." for "right"),
        and a sentence a person did not say must not stop the answer."""
        words = words_of(text)
        return [] if len(words) > max(1.0, self.max_words_per_s * speech_s) else words

    def _cuts(self, words: list[str]) -> bool:
        """Pipecat's minimum-words strategy, with a list of words that cut alone: one short word over the answer is
        most often a backchannel the recogniser got wrong ("right" heard as "Bye.", "oh" as "Boom."), while a request
        to stop, or a question word, is meant. Backchannel phrases said whole never cut ("oh no")."""
        if all_backchannel(words, self.phrases):
            return False
        if contains(words, self.stops):
            return True
        return len(words) >= self.min_words and foreign_word(words, self.phrases)

    def on_words(self, stable: str, speech_s: float = float("inf")) -> Verdict:
        """The recogniser's stable words so far, while the speech goes on (`speech_s` of it so far)."""
        return Verdict.CUT if self._cuts(self._heard(stable, speech_s)) else Verdict.DUCKED

    def on_time(self, speech_s: float) -> Verdict:
        """The speech has lasted `speech_s` and goes on."""
        return Verdict.CUT if speech_s > self.max_s else Verdict.DUCKED

    def on_end(self, final: str | None, speech_s: float) -> Verdict:
        """The utterance ended after `speech_s` with these final words (None: the recogniser gave none, failed)."""
        if final is None or speech_s > self.max_s:
            return Verdict.CUT
        return Verdict.CUT if self._cuts(self._heard(final, speech_s)) else Verdict.RESUMED


class SpeechExtent:
    """How far into an utterance its sound reaches: the end of its last 32 ms window within 20 dB of its loudest.

    The vad reports a speech's end only after a silence (and the end-of-turn model's verdict, or a hold up to
    SOTTO_VAD_MAX_TURN_SILENCE_MS), far later than a backchannel's last sound; counting the time since the start would
    cut every "uh-huh" in that silence. A relative level, as the asr's pause test uses, ignores microphone gain and a
    steady noise floor; a room's reverberation falls 20 dB within about a third of its RT60.
    """

    WINDOW = 512  # samples at 16 kHz, Silero's window
    QUIET_RATIO = 0.1  # -20 dB of the loudest window so far

    def __init__(self, sample_rate: int = 16000) -> None:
        self._rate = sample_rate
        self._rest = np.zeros(0, dtype=np.float64)
        self._windows = 0
        self._peak = 0.0
        self._last_loud = 0  # windows up to the end of the last loud one

    def push(self, pcm16: bytes) -> float:
        """Add the utterance's next audio; returns the seconds from its start to the end of its last loud window."""
        x = np.concatenate([self._rest, np.frombuffer(pcm16, dtype="<i2").astype(np.float64)])
        whole = len(x) // self.WINDOW * self.WINDOW
        self._rest = x[whole:]
        for w in x[:whole].reshape(-1, self.WINDOW):
            rms = float(np.sqrt(np.mean(w * w)))
            self._windows += 1
            self._peak = max(self._peak, rms)
            if rms > 0 and rms >= self.QUIET_RATIO * self._peak:
                self._last_loud = self._windows
        return self.seconds

    @property
    def seconds(self) -> float:
        return self._last_loud * self.WINDOW / self._rate
