"""What counts as a turn: endpointing settings, speech events, and the state machine that
turns per-window speech probabilities into speech start / end edges.

Pure logic in samples, no model and no audio: ``Endpointer`` is VADIterator's hysteresis plus a
minimum speech time; ``CaptureClock`` maps sample offsets back to capture timestamps.
"""

from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True)
class VadSettings:
    """Endpointing knobs of one stream; validated on construction.

    threshold: speech probability at or above which a window is speech.
    neg_threshold: probability below which a window is silence (hysteresis); default
        ``threshold - 0.15`` as in VADIterator.
    min_speech_ms: voiced time needed before a turn starts; shorter blips never start one.
    min_silence_ms: silence needed before a started turn ends (end-of-turn latency).
    speech_pad_ms: widens reported segments on both sides.
    """

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_ms: int = 300
    min_silence_ms: int = 400
    speech_pad_ms: int = 30

    def __post_init__(self) -> None:
        _check_range("threshold", self.threshold, 0.05, 0.95)
        if self.neg_threshold is not None:
            _check_range("neg_threshold", self.neg_threshold, 0.01, self.threshold)
        _check_range("min_speech_ms", self.min_speech_ms, 0, 5000)
        _check_range("min_silence_ms", self.min_silence_ms, 100, 10000)
        # Pads wider than half the minimum gap would let two segments overlap.
        _check_range("speech_pad_ms", self.speech_pad_ms, 0, min(500, self.min_silence_ms // 2))

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


@dataclass(frozen=True)
class SpeechEvent:
    """An edge of a speech segment, in stream samples and in capture time (ms).

    ``STARTED`` carries the segment's (padded) start; ``ENDED`` carries both ends, so a
    consumer of ends alone still has whole segments. ``probability`` is the model output
    of the window that decided the edge (``PROBABILITY``: of the window spanning start..end).
    ``processed_samples`` is how far the model had got when the event was decided.
    """

    kind: SpeechEventKind
    start_sample: int
    start_ms: float
    end_sample: int | None = None
    end_ms: float | None = None
    probability: float | None = None
    processed_samples: int = 0


class _Phase(enum.Enum):
    SILENCE = "silence"
    ONSET = "onset"  # above threshold, not yet long enough to be a turn
    SPEECH = "speech"


class Endpointer:
    """VADIterator-style hysteresis plus a minimum speech time; works in samples only."""

    def __init__(self, settings: VadSettings, sample_rate: int, window: int):
        per_ms = sample_rate / 1000
        self._threshold = settings.threshold
        self._stop_threshold = settings.stop_threshold
        self._min_speech = round(settings.min_speech_ms * per_ms)
        self._min_silence = round(settings.min_silence_ms * per_ms)
        self._pad = round(settings.speech_pad_ms * per_ms)
        self._window = window
        self.reset()

    def reset(self) -> None:
        self.phase = _Phase.SILENCE
        self._onset = 0  # first sample of the first speech window
        self._voiced = 0  # samples at or above the stop threshold since the onset
        self._quiet_since: int | None = None  # first sample below the stop threshold
        self._fading_since: int | None = None  # first sample below the speech threshold
        self._floor = 0  # a new segment never starts before the last one ended

    def oldest_needed(self, position: int) -> int:
        """The earliest sample an edge may still be reported at."""
        if self.phase is _Phase.ONSET:
            return max(self._floor, self._onset - self._pad)
        if self.phase is _Phase.SPEECH and self._fading_since is not None:
            return self._fading_since
        return max(0, position - self._pad)

    def step(self, start: int, prob: float) -> tuple[SpeechEventKind, int] | None:
        """Feed the probability of the window at [start, start + window)."""
        end = start + self._window
        if self.phase is _Phase.SILENCE:
            if prob < self._threshold:
                return None
            self.phase, self._onset, self._voiced = _Phase.ONSET, start, 0
        if prob >= self._threshold:
            self._quiet_since = self._fading_since = None
        else:
            self._fading_since = start if self._fading_since is None else self._fading_since
            if prob < self._stop_threshold and self._quiet_since is None:
                self._quiet_since = start
        quiet_enough = self._quiet_since is not None and end - self._quiet_since >= self._min_silence

        if self.phase is _Phase.ONSET:
            if prob >= self._stop_threshold:
                self._voiced += self._window
            if self._voiced >= self._min_speech:
                self.phase = _Phase.SPEECH
                return SpeechEventKind.STARTED, max(self._floor, self._onset - self._pad)
            if quiet_enough:  # a blip: it never became a turn
                self.phase, self._quiet_since, self._fading_since = _Phase.SILENCE, None, None
            return None

        if quiet_enough:
            # The stop threshold only keeps a turn open across dips; the speech itself
            # ended where the probability first fell below the speech threshold.
            self._floor = self._fading_since + self._pad
            self.phase, self._quiet_since, self._fading_since = _Phase.SILENCE, None, None
            return SpeechEventKind.ENDED, self._floor
        return None

    def finish(self, position: int) -> int | None:
        """End of stream at sample ``position``: where an open segment ends, if any."""
        open_segment = self.phase is _Phase.SPEECH
        end = position if self._fading_since is None else min(position, self._fading_since + self._pad)
        self.phase, self._quiet_since, self._fading_since = _Phase.SILENCE, None, None
        if open_segment:
            self._floor = end
            return end
        return None


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
