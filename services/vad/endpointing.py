"""What counts as a turn: endpointing settings, speech events, and the state machine that
turns per-window speech probabilities into speech start / end edges.

Pure logic in samples, no model and no audio: ``Endpointer`` is VADIterator's hysteresis plus a
minimum speech time, with two additions. Semantic end of turn: after a short silence it asks for the
turn model's verdict instead of ending the turn, and holds an incomplete one open up to a longer
silence. Barge-in gate: while an answer plays, a new turn needs speech held longer at a higher
probability and near the user's own level, so residual echo of the answer does not start one.
``CaptureClock`` maps sample offsets back to capture timestamps.
"""

from __future__ import annotations

import enum
import math
from collections import deque
from dataclasses import dataclass

import numpy as np

# The user's level, as the page's gate learns it (services/gateway/static/js/capture.js): the median of their
# confident speech windows over the last ~10 s of it, heard while no answer played nor had just played (the echo
# reaches the microphone for a while after playback stops), once there are enough of them.
USER_LEVEL_S = 10.0
USER_LEVEL_MIN_WINDOWS = 8
ECHO_TAIL_S = 0.5


@dataclass(frozen=True)
class VadSettings:
    """Endpointing knobs of one stream; validated on construction.

    threshold: speech probability at or above which a window is speech.
    neg_threshold: probability below which a window is silence (hysteresis); default
        ``threshold - 0.15`` as in VADIterator.
    min_speech_ms: voiced time needed before a turn starts; shorter blips never start one.
    min_silence_ms: silence needed before a started turn ends (end-of-turn latency) when turns end
        on silence alone.
    speech_pad_ms: widens reported segments on both sides.
    semantic: let a turn model decide (streams given one); False: silence alone.
    turn_silence_ms: silence after which the turn model judges the utterance.
    early_turn_silence_ms: silence after which a turn ends when the turn model, asked as the pause began (a
        guess: see ``services.vad.engine``), judged it complete; at most turn_silence_ms.
    max_turn_silence_ms: silence after which an utterance judged incomplete ends anyway.
    barge_in_threshold / barge_in_min_speech_ms: while an answer plays, a new turn needs this long
        of windows at or above this probability within one onset (short words and the gaps between
        them add up; an onset that dies starts the count again).
    barge_in_level_db: while an answer plays, only windows within this many dB of the user's own
        speech level count toward that (0: no level test). Silero rates even faint echo of the answer
        as speech; its level is what tells it from the user.
    """

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_ms: int = 300
    min_silence_ms: int = 400
    speech_pad_ms: int = 30
    semantic: bool = True
    turn_silence_ms: int = 200
    early_turn_silence_ms: int = 128
    max_turn_silence_ms: int = 1500
    barge_in_threshold: float = 0.7
    barge_in_min_speech_ms: int = 160
    barge_in_level_db: float = 0.0

    def __post_init__(self) -> None:
        _check_range("threshold", self.threshold, 0.05, 0.95)
        if self.neg_threshold is not None:
            _check_range("neg_threshold", self.neg_threshold, 0.01, self.threshold)
        _check_range("min_speech_ms", self.min_speech_ms, 0, 5000)
        _check_range("min_silence_ms", self.min_silence_ms, 100, 10000)
        # Pads wider than half the minimum gap would let two segments overlap.
        _check_range("speech_pad_ms", self.speech_pad_ms, 0, min(500, self.min_silence_ms // 2))
        _check_range("turn_silence_ms", self.turn_silence_ms, 2 * self.speech_pad_ms, 5000)
        _check_range("early_turn_silence_ms", self.early_turn_silence_ms, 2 * self.speech_pad_ms,
                     self.turn_silence_ms)
        _check_range("max_turn_silence_ms", self.max_turn_silence_ms, self.turn_silence_ms, 10000)
        _check_range("barge_in_threshold", self.barge_in_threshold, self.threshold, 1.0)
        _check_range("barge_in_min_speech_ms", self.barge_in_min_speech_ms, 0, 5000)
        _check_range("barge_in_level_db", self.barge_in_level_db, 0, 60)

    @property
    def stop_threshold(self) -> float:
        if self.neg_threshold is not None:
            return self.neg_threshold
        return max(self.threshold - 0.15, 0.01)


def _check_range(name: str, value: float, low: float, high: float) -> None:
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")


class SpeechEventKind(enum.Enum):
    STARTED = "started"
    ENDED = "ended"
    PROBABILITY = "probability"  # one per window, only for streams that ask for them
    HELD = "held"  # the turn model judged the utterance incomplete: it stays open
    SUPPRESSED = "suppressed"  # speech that would have started a turn, held back by the barge-in gate


class EndReason(enum.Enum):
    """Why a turn ended."""

    SILENCE = "silence"  # min_silence_ms, without a turn model
    COMPLETE = "complete"  # the turn model's verdict after turn_silence_ms
    TIMEOUT = "timeout"  # held open, then max_turn_silence_ms of silence
    CLIENT = "client"  # the client's end of speech, taken at its word
    STREAM_END = "stream_end"


class Edge(enum.Enum):
    """What ``Endpointer.step`` reports."""

    STARTED = "started"
    ENDED = "ended"
    VERDICT_DUE = "verdict_due"  # turn_silence_ms of silence: the turn model is to judge the utterance now
    SUPPRESSED = "suppressed"


@dataclass(frozen=True)
class SpeechEvent:
    """An edge of a speech segment, in stream samples and in capture time (ms).

    ``STARTED`` carries the segment's (padded) start; ``ENDED`` carries both ends, so a
    consumer of ends alone still has whole segments. ``probability`` is the model output
    of the window that decided the edge (``PROBABILITY``: of the window spanning start..end).
    ``processed_samples`` is how far the model had got when the event was decided. ``ENDED`` and
    ``HELD`` carry why (``reason``), the turn model's probability when it judged
    (``turn_probability``) and ``decision_ms``: the silence waited since the speech ended plus the
    turn model's own time.
    """

    kind: SpeechEventKind
    start_sample: int
    start_ms: float
    end_sample: int | None = None
    end_ms: float | None = None
    probability: float | None = None
    processed_samples: int = 0
    reason: EndReason | None = None
    turn_probability: float | None = None
    decision_ms: float | None = None


class _Phase(enum.Enum):
    SILENCE = "silence"
    ONSET = "onset"  # above threshold, not yet long enough to be a turn
    SPEECH = "speech"


class Endpointer:
    """VADIterator-style hysteresis plus a minimum speech time; works in samples only.

    ``semantic``: a turn's silence reports ``VERDICT_DUE`` once it lasts turn_silence_ms, and the
    caller answers with ``verdict``; a turn held open ends at max_turn_silence_ms, and speech that
    resumes continues it. ``gated`` (an answer is playing): a turn starts only on speech at the
    barge-in threshold for barge_in_min_speech_ms; an onset that would otherwise have started one is
    reported as ``SUPPRESSED`` when it dies.
    """

    def __init__(self, settings: VadSettings, sample_rate: int, window: int, semantic: bool = False):
        per_ms = sample_rate / 1000
        self._threshold = settings.threshold
        self._stop_threshold = settings.stop_threshold
        self._min_speech = round(settings.min_speech_ms * per_ms)
        self._min_silence = round(settings.min_silence_ms * per_ms)
        self._turn_silence = round(settings.turn_silence_ms * per_ms)
        self._max_turn_silence = round(settings.max_turn_silence_ms * per_ms)
        self._gate_threshold = settings.barge_in_threshold
        self._gate_speech = round(settings.barge_in_min_speech_ms * per_ms)
        self._pad = round(settings.speech_pad_ms * per_ms)
        self._window = window
        self._level_db = settings.barge_in_level_db
        self._user_levels: deque[float] = deque(maxlen=max(1, round(USER_LEVEL_S * sample_rate / window)))
        self._echo_tail = round(ECHO_TAIL_S * sample_rate)
        self._gate_off_at: int | None = None  # where the last answer stopped playing
        self._floor_db = -math.inf  # while gated: the lowest level that counts toward a barge-in
        self.semantic = semantic
        self.gated = False
        self.reset()

    def reset(self) -> None:
        self.phase = _Phase.SILENCE
        self._onset = 0  # first sample of the first speech window
        self._voiced = 0  # samples at or above the stop threshold since the onset
        self._quiet_since: int | None = None  # first sample below the stop threshold
        self._fading_since: int | None = None  # first sample below the speech threshold
        self._floor = 0  # a new segment never starts before the last one ended
        self._gate_off_at = None  # positions start again (the user's level is kept: the same person)
        self._clear_gate()
        self.verdict_pending = False  # VERDICT_DUE reported (or a verdict asked for), not yet answered
        self.held = False  # judged incomplete, and no speech since
        self.end_reason = EndReason.SILENCE  # of the last ENDED edge
        self.silence_waited = 0  # samples of silence before the last end was decided

    def _clear_gate(self) -> None:
        self._gate_run = 0  # samples at or above the barge-in threshold in the current onset
        self._gate_onset = 0
        self._would_start = False  # the onset passed the ungated test

    @property
    def pause_began(self) -> int | None:
        """Where the open turn's current silence began (its first window below the speech threshold): the pause's
        identity, since a later pause of the same turn always begins later. None while speech goes on or no turn
        is open."""
        return self._fading_since if self.phase is _Phase.SPEECH else None

    def silence_at(self, position: int) -> int:
        """Samples of silence at ``position`` since the open turn's speech stopped (0 while it goes on)."""
        return 0 if self._fading_since is None else max(0, position - self._fading_since)

    def oldest_needed(self, position: int) -> int:
        """The earliest sample an edge may still be reported at."""
        if self.phase is _Phase.ONSET:
            return max(self._floor, self._onset - self._pad)
        if self.phase is _Phase.SPEECH and self._fading_since is not None:
            return self._fading_since
        return max(0, position - self._pad)

    def set_gate(self, on: bool, position: int = 0) -> tuple[Edge, int] | None:
        """An answer starts or stops playing (at sample ``position``). An onset in progress is dropped: it began
        under the other rule."""
        if on == self.gated:
            return None
        self.gated = on
        self._gate_off_at = None if on else position
        self._floor_db = self._user_floor() if on else -math.inf
        edge = (Edge.SUPPRESSED, self._onset) if self.phase is _Phase.ONSET and self._would_start else None
        if self.phase is _Phase.ONSET:
            self._to_silence()
        self._clear_gate()
        return edge

    def _user_floor(self) -> float:
        if not self._level_db or len(self._user_levels) < USER_LEVEL_MIN_WINDOWS:
            return -math.inf  # no level test until the user has been heard
        return float(np.median(self._user_levels)) - self._level_db

    def _learn_level(self, start: int, prob: float, level_db: float | None) -> None:
        if (level_db is None or self.gated or prob < self._gate_threshold or self.phase is _Phase.SILENCE
                or (self._gate_off_at is not None and start - self._gate_off_at < self._echo_tail)):
            return
        self._user_levels.append(level_db)

    def step(self, start: int, prob: float, level_db: float | None = None) -> tuple[Edge, int] | None:
        """Feed the probability of the window at [start, start + window), and its level (dBFS; None: unknown,
        no level test)."""
        end = start + self._window
        if self.phase is _Phase.SILENCE:
            if prob < self._threshold:
                return None
            self.phase, self._onset, self._voiced = _Phase.ONSET, start, 0
            self._clear_gate()
        if prob >= self._threshold:
            self._quiet_since = self._fading_since = None
            self.verdict_pending = self.held = False  # speech resumed: the same turn goes on
        else:
            self._fading_since = start if self._fading_since is None else self._fading_since
            if prob < self._stop_threshold and self._quiet_since is None:
                self._quiet_since = start
        quiet = 0 if self._quiet_since is None else end - self._quiet_since

        self._learn_level(start, prob, level_db)
        if self.phase is _Phase.ONSET:
            if prob >= self._stop_threshold:
                self._voiced += self._window
            if self.gated:
                return self._gated_onset(start, prob, quiet, level_db is None or level_db >= self._floor_db)
            if self._voiced >= self._min_speech:
                self.phase = _Phase.SPEECH
                return Edge.STARTED, max(self._floor, self._onset - self._pad)
            if quiet >= self._min_silence:  # a blip: it never became a turn
                self._to_silence()
            return None

        if self._fading_since is None:
            return None
        if not self.semantic:
            return self._end(EndReason.SILENCE, end) if quiet >= self._min_silence else None
        if quiet >= self._max_turn_silence:
            return self._end(EndReason.TIMEOUT, end)
        # The verdict counts its short silence from the first window below the speech threshold: Silero's
        # probability fades for a while after the last word, and the model, not the hysteresis, judges the pause.
        if end - self._fading_since >= self._turn_silence and not (self.verdict_pending or self.held):
            self.verdict_pending = True
            return Edge.VERDICT_DUE, end
        return None

    def _gated_onset(self, start: int, prob: float, quiet: int, loud: bool) -> tuple[Edge, int] | None:
        """`loud`: the window is within the level test's reach of the user's own level (or there is no test)."""
        if prob >= self._gate_threshold and loud:
            self._gate_onset = start if self._gate_run == 0 else self._gate_onset
            self._gate_run += self._window
        self._would_start = self._would_start or self._voiced >= self._min_speech
        if self._gate_run >= max(self._gate_speech, self._window):
            self.phase = _Phase.SPEECH
            start = max(self._floor, self._gate_onset - self._pad)
            self._clear_gate()
            return Edge.STARTED, start
        if quiet >= self._min_silence:
            suppressed = self._would_start
            self._to_silence()
            self._clear_gate()
            return (Edge.SUPPRESSED, self._onset) if suppressed else None
        return None

    def request_verdict(self) -> bool:
        """The client heard the end of speech and asks for a verdict: False when no turn is open."""
        if self.phase is not _Phase.SPEECH:
            return False
        self.verdict_pending = True
        return True

    def verdict(self, complete: bool, position: int) -> int | None:
        """The turn model's answer: where the open turn ends (complete), or None (held open)."""
        if not self.verdict_pending or self.phase is not _Phase.SPEECH:
            return None
        self.verdict_pending = False
        if not complete:
            self.held = True
            return None
        self.end_reason = EndReason.COMPLETE
        return self._close(position)

    def finish(self, position: int) -> int | None:
        """End of stream at sample ``position``: where an open segment ends, if any."""
        if self.phase is not _Phase.SPEECH:
            self._to_silence()
            return None
        self.end_reason = EndReason.CLIENT
        return self._close(position)

    def _end(self, reason: EndReason, position: int) -> tuple[Edge, int]:
        # The stop threshold only keeps a turn open across dips; the speech itself
        # ended where the probability first fell below the speech threshold.
        self.end_reason = reason
        return Edge.ENDED, self._close(position)

    def _close(self, position: int) -> int:
        self.silence_waited = 0 if self._fading_since is None else max(0, position - self._fading_since)
        end = position if self._fading_since is None else min(position, self._fading_since + self._pad)
        self._floor = end
        self._to_silence()
        return end

    def _to_silence(self) -> None:
        self.phase, self._quiet_since, self._fading_since = _Phase.SILENCE, None, None
        self.verdict_pending = self.held = False


class CaptureClock:
    """Maps stream sample offsets to the capture time (ms) of the chunk they came in.

    Each chunk with a timestamp anchors its first sample, so gaps and jitter in capture
    carry through; chunks without one continue the previous anchor's clock.
    """

    def __init__(self, sample_rate: int):
        self._ms_per_sample = 1000 / sample_rate
        self._anchors: deque[tuple[int, float]] = deque([(0, 0.0)])

    def mark(self, sample: int, capture_ms: float | None) -> None:
        if capture_ms is None:
            return
        if self._anchors[-1][0] == sample:  # nothing arrived since: replace
            self._anchors.pop()
        self._anchors.append((sample, float(capture_ms)))

    def to_ms(self, sample: int) -> float:
        anchor_sample, anchor_ms = self._anchors[0]
        for candidate in reversed(self._anchors):
            if candidate[0] <= sample:
                anchor_sample, anchor_ms = candidate
                break
        return anchor_ms + (sample - anchor_sample) * self._ms_per_sample

    def forget_before(self, sample: int) -> None:
        while len(self._anchors) > 1 and self._anchors[1][0] <= sample:
            self._anchors.popleft()
