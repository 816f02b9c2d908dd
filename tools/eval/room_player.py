"""A client's loudspeaker and microphone in one simulated room (tools.eval.echo_room's), on the microphone's clock
and in real time: what the loudspeaker plays (each piece of the answer as it arrives, or when the one before it ends;
lowered, or stopped, when the client says so) and what the microphone hears of it, of a person and of the room's noise.
Used by tools.eval.echo_wires, which streams that microphone to the gateway's sockets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import soxr
from scipy.signal import fftconvolve

from tools.eval import echo_room

RATE = 16000                # the room's and the microphone's
ANSWER_RATE = 24000         # the tts service's
FRAME = RATE // 50          # 20 ms
OUTPUT_LATENCY_S = 0.04     # from a piece's arrival to the loudspeaker: the client's player and sound device


@dataclass(frozen=True)
class Acoustics:
    """The room's paths to the microphone (impulse responses at RATE), the gain that puts the answers' echo at its
    level, and the room's noise."""

    speaker_rir: np.ndarray
    person_rir: np.ndarray
    echo_gain: float
    noise_dbfs: float

    @classmethod
    def of(cls, room: echo_room.Room, echo_dbfs: float) -> Acoustics:
        """Piper's answers, played through the room, at `echo_dbfs` (active level) at the microphone."""
        speaker = room.impulse(room.speaker)
        reference = echo_room.reference_answer(RATE)
        gain = 10 ** ((echo_dbfs - echo_room.active_dbfs(np.convolve(reference, speaker))) / 20)
        return cls(speaker, room.impulse(room.person), float(gain), room.noise_dbfs)


class RoomPlayer:
    """The client's loudspeaker and microphone in one room: what the loudspeaker plays, on the microphone's clock
    (`timeline`, one sample per microphone sample), and what the microphone hears: that through the room, the
    person through the room, and noise."""

    def __init__(self, acoustics: Acoustics, seed: int) -> None:
        self.speaker_rir, self.person_rir = acoustics.speaker_rir, acoustics.person_rir
        self.echo_gain = acoustics.echo_gain
        self.noise = 32768 * 10 ** (acoustics.noise_dbfs / 20)
        self.rng = np.random.default_rng(seed)
        self.t0 = time.monotonic()
        self.timeline = np.zeros(RATE * 120, np.float32)
        self.pieces: list[tuple[int, int]] = []   # (first sample on the timeline, length) of the current answer
        self.play_end = 0
        self.stopped_at: float | None = None
        self.resampler = soxr.ResampleStream(ANSWER_RATE, RATE, 1, dtype="float32")
        self.person = np.zeros(0, np.float32)
        self.person_from = 0

    def index(self, at: float) -> int:
        return max(0, round((at - self.t0) * RATE))

    def time_of(self, index: int) -> float:
        return self.t0 + index / RATE

    def play(self, pcm16: bytes, at: float) -> None:
        """A piece of the answer arrived at `at` (monotonic): it plays once the one before it has ended."""
        if self.stopped_at is not None:
            return  # the client stopped this answer: its late audio is dropped
        x = self.resampler.resample_chunk(np.frombuffer(pcm16, dtype="<i2").astype(np.float32))
        first = max(self.index(at + OUTPUT_LATENCY_S), self.play_end)
        x = x[: max(0, len(self.timeline) - first)]
        self.timeline[first: first + len(x)] = x
        self.pieces.append((first, len(x)))
        self.play_end = first + len(x)

    def stop(self, at: float) -> None:
        """The client stops playback at `at`: nothing more of this answer reaches the loudspeaker."""
        if self.stopped_at is None:
            cut = self.index(at)
            self.timeline[cut: max(cut, self.play_end)] = 0
            self.play_end = min(self.play_end, cut)
            self.stopped_at = at

    def duck(self, gain_db: float, at: float) -> None:
        """The answer plays on at `gain_db` from `at` (the audio already queued: what comes later the gateway
        lowers itself); a positive gain brings it back up."""
        now = self.index(at)
        self.timeline[now: max(now, self.play_end)] *= 10 ** (gain_db / 20)

    def played(self, at: float) -> int:
        """Samples of the answer played by `at`, at the answer's rate (what a /ws client reports)."""
        now = self.index(at)
        return round(sum(min(max(now - first, 0), n) for first, n in self.pieces) * ANSWER_RATE / RATE)

    def playing(self, at: float) -> bool:
        return self.index(at) < self.play_end

    @property
    def first_played_at(self) -> float | None:
        return self.time_of(self.pieces[0][0]) if self.pieces else None

    @property
    def ends_at(self) -> float:
        return self.time_of(self.play_end)

    def speak(self, person: np.ndarray, at: float, dbfs: float) -> None:
        """The person (16 kHz) starts speaking at `at`, heard at `dbfs` (active level) through the room."""
        self.person = echo_room.at_level(np.convolve(person.astype(np.float64), self.person_rir), dbfs)
        self.person_from = self.index(at)

    def microphone(self, k: int) -> bytes:
        """The microphone's k-th 20 ms frame."""
        first, taps = k * FRAME, len(self.speaker_rir)
        lo = first - taps + 1
        segment = self.timeline[max(lo, 0): first + FRAME]
        if lo < 0:
            segment = np.concatenate([np.zeros(-lo, np.float32), segment])
        out = fftconvolve(segment, self.speaker_rir)[taps - 1: taps - 1 + FRAME] * self.echo_gain
        at = first - self.person_from
        if len(self.person) and at + FRAME > 0 and at < len(self.person):
            lo, hi = max(at, 0), min(at + FRAME, len(self.person))
            out[lo - at: hi - at] += self.person[lo:hi]
        out += self.rng.standard_normal(FRAME) * self.noise
        return np.clip(np.rint(out), -32768, 32767).astype("<i2").tobytes()
