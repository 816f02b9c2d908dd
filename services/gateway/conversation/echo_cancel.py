"""The answer's echo removed from the microphone of a client that does not cancel its own.

A client without its own VAD (every OpenAI Realtime client, a `/ws` client that does not say it runs one) streams
its microphone all the time, and on a loudspeaker that microphone hears the answer: the vad would take that echo for
the user and the answer would interrupt itself. The gateway knows exactly what it sent (the answer's PCM) and, from
the client's playback reports or, without them, from when each chunk went out, when the client plays it. That
reference, resampled to the microphone's rate and placed on the microphone's timeline, goes to WebRTC's AEC3 (through
`livekit`'s `AudioProcessingModule`, a maintained binding: an echo canceller is not something to write by hand),
which removes it before the tape, the vad and the recogniser see the audio.

Alignment: both streams are put on the gateway's monotonic clock. The microphone's sample m was captured about
`t0 + m / rate`, with `t0` the earliest arrival seen (network delay only ever makes audio later; a gap longer than
the jitter buffer's wait restarts it). The answer's sample j plays at `anchor_t + (j - anchor_j) / rate`, anchored
by the client's last playback report or, without reports, by the chunk that started playing (a chunk that arrives
after the previous one has finished restarts playback, as a client's player does), plus the delay from sending to
playing that the client's reports showed on earlier answers (none for a client that does not report: AEC3's own
delay estimate covers a client that plays what it gets at once). The reference is fed `lead_s`
ahead of that estimate, because AEC3 finds echo that comes after its reference (it estimates that delay) but can do
nothing with echo that comes before it.

AEC3 works on 10 ms frames: audio is processed in whole frames and the remainder waits for the next piece. Away from
any answer (before its first sample, after its last plus `tail_s`) audio passes untouched and costs nothing.

Each answer gets a fresh AEC3. One carried over from the previous answer (even one fed all along) let the start of
the next answer's echo through, and Silero hears speech in residual echo far below the user's level; a fresh one is
conservative while it converges, and cancelled whole answers, people's cut-ins over the echo still heard
(tools/eval/echo_room.py, tests/gateway/test_echo_cancel.py). Where there is no echo at all (headphones, a client
streaming a file) that fresh AEC3 finds no echo path and keeps muting the microphone while the answer plays: hence
on by default only for Realtime clients (`near_field` turns it off), on request on `/ws` (docs/performance.md).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import soxr
from livekit import rtc

from services.common import config
from services.gateway.conversation import events

if TYPE_CHECKING:
    from services.gateway.conversation.inputs import Opening
    from services.gateway.conversation.turn import Turn

_LOGGER = logging.getLogger(__name__)

FRAME_S = 0.01  # AEC3's frame: exactly 10 ms
TAIL_S = 1.0    # how long after the answer's last sample the room may still ring with it
REALIGN_S = 0.15  # a reference early by more than this, by the client's playback report, is moved to it


def _aec3() -> rtc.AudioProcessingModule:
    return rtc.AudioProcessingModule(echo_cancellation=True, high_pass_filter=True)


@dataclass(frozen=True)
class EchoSettings:
    """How the canceller aligns the answer with the microphone, in seconds (from SOTTO_GATEWAY_ECHO_*)."""

    lead_s: float        # the reference goes this much ahead of its estimated playback (SOTTO_GATEWAY_ECHO_LEAD_MS)
    gap_s: float         # a microphone pause longer than this restarts its clock (SOTTO_JITTER_BUFFER_MS)
    tail_s: float = TAIL_S
    realign_s: float = REALIGN_S

    @classmethod
    def of(cls, gw: config.GatewayConfig) -> EchoSettings:
        return cls(lead_s=gw.echo_lead_ms / 1000.0, gap_s=gw.jitter_ms / 1000.0)


@dataclass
class _FarEnd:
    """One answer as the client plays it, at the microphone's rate."""

    turn_id: str
    rate: int                   # the microphone's rate, which the answer is resampled to
    resampler: soxr.ResampleStream
    pcm: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int16))
    anchor: tuple[float, float] | None = None  # (monotonic time, answer sample then playing)
    min_delay_s: float | None = None  # the least delay from sending to playing its reports implied
    delay_s: float = 0.0        # from a chunk's sending to its playing, as `anchor` has it
    sent: list[tuple[float, float]] = field(default_factory=list)  # (monotonic time, answer sample) where each
    # run of chunks began: as `anchor`, were there no delay
    end: int | None = None      # the answer was cut here: nothing after it plays
    turn: Turn | None = None    # the answer's turn: interrupted, its client stops playing; what its client reports
    polled: int = 0             # the most of it the client had reported played when last looked at

    def add(self, pcm16: bytes, now: float) -> None:
        first = len(self.pcm)
        more = self.resampler.resample_chunk(np.frombuffer(pcm16, dtype="<i2"))
        self.pcm = np.concatenate([self.pcm, more.astype(np.int16)])
        if not self.sent or now > self.sent_time(first):
            self.sent.append((now, float(first)))
        # The player had run dry: this chunk starts on arrival, whether or not the client reports its playback
        # (a report made before the gap says nothing of how long the gap was).
        if self.anchor is None or now + self.delay_s > self.time_of(first):
            self.anchor = (now + self.delay_s, float(first))

    def sent_time(self, sample: float) -> float:
        """When `sample` would have played, were there no delay: from the start of the run of chunks it is in (a
        run begins with a chunk that came after the ones before it had played out)."""
        at, first = next((run for run in reversed(self.sent) if run[1] <= sample), self.sent[0])
        return at + (sample - first) / self.rate

    def time_of(self, sample: float) -> float:
        assert self.anchor is not None
        return self.anchor[0] + (sample - self.anchor[1]) / self.rate

    def sample_at(self, t: float) -> float:
        assert self.anchor is not None
        return self.anchor[1] + (t - self.anchor[0]) * self.rate

    @property
    def last(self) -> int:
        return len(self.pcm) if self.end is None else min(self.end, len(self.pcm))

    def segment(self, first: int, n: int) -> np.ndarray:
        """Samples first..first+n of the answer as played: silence before it starts and after it ends."""
        out = np.zeros(n, np.int16)
        lo, hi = max(first, 0), min(first + n, self.last)
        if hi > lo:
            out[lo - first: hi - first] = self.pcm[lo:hi]
        return out


class EchoTap:
    """A session's output, watched: each answer chunk the client is sent becomes the canceller's reference when it
    goes out (not when it is queued), and a `TurnCut` ends it."""

    def __init__(self, output: Any, gw: config.GatewayConfig, turn: Callable[[], Turn | None],
                 opening: Callable[[], Opening | None]) -> None:
        self.output = output
        self.echo = EchoCanceller(EchoSettings.of(gw), turn, opening)

    async def send(self, item: Any) -> None:
        # The time before the send: on a busy event loop the await can return long after the client had the audio,
        # and a reference placed that late is behind the echo (which AEC3 cannot cancel).
        now = time.monotonic()
        await self.output.send(item)
        self.echo.on_sent(item, now)

    async def close(self, *, code: int = 1000, message: bytes = b"") -> None:
        await self.output.close(code=code, message=message)


class EchoCanceller:
    """A session's canceller: `on_sent()` is told each answer chunk as it goes out, `playback()` the client's
    reports; `prepare()` (on the event loop) pairs the microphone's frames with the answer's,
    and `process()` (blocking native work: run it in a worker thread) cancels; their order must be kept."""

    def __init__(self, settings: EchoSettings, turn: Callable[[], Turn | None] = lambda: None,
                 opening: Callable[[], Opening | None] = lambda: None) -> None:
        """`turn()`: the session's current turn; `opening()`: how its client opened it (None before), which turns
        the canceller on or off unless `configure` said otherwise first."""
        self.settings = settings
        self.rate = 0
        self._turn, self._opening, self._configured = turn, opening, False
        self._apm: rtc.AudioProcessingModule | None = None
        self._far: _FarEnd | None = None
        self._delay_s = 0.0  # from sending to playing, learnt from the client's playback reports
        self._mic_t0: float | None = None  # when the microphone's sample 0 was captured, on our clock
        self._mic_samples = 0              # microphone samples received so far
        self._held = np.zeros(0, np.int16)  # the part of a frame still waiting for its remainder

    @property
    def enabled(self) -> bool:
        if not self._configured and (opening := self._opening()) is not None:
            self.configure(enabled=opening.echo_cancel, rate=opening.sample_rate)
        return self._apm is not None

    @property
    def held_samples(self) -> int:
        """Audio held back (part of a frame) until the next piece."""
        return len(self._held)

    def configure(self, *, enabled: bool, rate: int) -> None:
        """Turn cancelling on or off for audio at `rate` Hz (a fresh canceller: its filter learns the room anew)."""
        self.rate, self._configured = rate, True
        self._held = np.zeros(0, np.int16)
        self._apm = _aec3() if enabled else None
        _LOGGER.info("echo_cancel", extra={"enabled": enabled, "sample_rate": rate})

    # -- the answer --------------------------------------------------------------------------------------------
    def on_sent(self, item: events.Event | object, now: float | None = None) -> None:
        """An event went out to the client at `now` (monotonic): an answer's start or a chunk of it are the
        reference, a `TurnCut` ends it."""
        if not self.enabled:
            return
        now = time.monotonic() if now is None else now
        if isinstance(item, events.AudioStarted):
            self._apm = _aec3()  # fresh for each answer: see the module's docstring
            resampler = soxr.ResampleStream(item.sample_rate, self.rate, 1, dtype="int16")
            turn = self._turn()
            self._far = _FarEnd(item.turn_id, self.rate, resampler, delay_s=self._delay_s,
                                turn=turn if turn is not None and turn.inp.turn_id == item.turn_id else None)
        elif isinstance(item, events.AudioChunk) and self._far is not None and self._far.turn_id == item.turn_id:
            self._far.add(item.pcm16, now)
        elif isinstance(item, events.TurnCut):
            self.cut(item.turn_id, item.played_samples, item.sample_rate)

    def cut(self, turn_id: str, played_samples: int, sample_rate: int) -> None:
        """The client stopped playing the answer after `played_samples` (at the answer's rate): what follows is no
        echo, and a reference of audio that never played would only be taken out of the user's voice."""
        far = self._far
        if far is not None and far.turn_id == turn_id:
            end = round(played_samples * far.rate / sample_rate)
            far.end = end if far.end is None else min(far.end, end)

    def playback(self, turn_id: str, played_samples: int, sample_rate: int, now: float) -> None:
        """The client reports having played `played_samples` (at the answer's rate) of the answer by `now`. A report
        of nothing played says nothing of when playing starts: it is left out."""
        far = self._far
        if far is not None and far.turn_id == turn_id and played_samples > 0:
            played = played_samples * far.rate / sample_rate
            if not far.sent:
                far.anchor = (now, played)
                return
            # A report comes late (the trip here, a player that finished before it reported): the earliest playing
            # it implies, against when that audio was sent, is this client's delay; the next answer starts so.
            delay = max(0.0, now - far.sent_time(played))  # nothing plays before it is sent
            far.min_delay_s = delay if far.min_delay_s is None else min(far.min_delay_s, delay)
            self._delay_s = far.min_delay_s
            # The reference moves only where the report shows it too far off: each move is a jump in AEC3's
            # reference, which then re-learns the echo path while the echo goes through (a jump of the client's
            # 50 ms delay, made at its first report, let most answers interrupt themselves: tools/eval/echo_wires.py).
            # AEC3 finds echo that comes after its reference on its own, but none that comes before it.
            # A report of a sample before the anchor's is about a run of chunks that has played out (the player ran
            # dry since): it says nothing of when the run now playing began.
            off = far.sent_time(played) + far.min_delay_s - far.time_of(played)  # > 0: the reference is early
            if played >= far.anchor[1] and (off > self.settings.realign_s or off < -self.settings.lead_s / 2):
                # the delay goes with the anchor: a restart after the player runs dry is placed as this one
                far.anchor, far.delay_s = (far.sent_time(played) + far.min_delay_s, played), far.min_delay_s
                _LOGGER.info("echo_realigned", extra={"turn_id": turn_id, "moved_ms": round(off * 1000),
                                                      "delay_ms": round(far.delay_s * 1000)})

    def _look_at_turn(self, far: _FarEnd, now: float) -> None:
        """What the answer's turn says by `now`: interrupted, the answer stops there (as `cut`); a client that
        reports its playback (`Opening.reports_playback`) reported more of it (as `playback`)."""
        turn, opening = far.turn, self._opening()
        if turn is None:
            return
        if far.end is None and far.anchor is not None and turn.interrupted:
            far.end = max(0, round(far.sample_at(now)))
        if opening is not None and opening.reports_playback and turn.playback_reported \
                and turn.played_samples > far.polled:
            far.polled = turn.played_samples
            self.playback(far.turn_id, turn.played_samples, turn.audio_rate, now)

    # -- the microphone ----------------------------------------------------------------------------------------
    def prepare(self, pcm16: bytes, now: float) -> tuple[np.ndarray, np.ndarray | None]:
        """The microphone audio that arrived at `now`, as (whole frames of it, the answer's frames beside them),
        or (audio, None) where it needs no cancelling. Keeps back any part of a frame."""
        mic = np.frombuffer(pcm16, dtype="<i2")
        first = self._mic_samples - len(self._held)  # microphone sample index of what is handed on now
        self._mic_samples += len(mic)
        start_t = self._place(now)
        far = self._far
        if self._apm is None or far is None or far.anchor is None:
            return self._release(mic), None
        self._look_at_turn(far, now)
        span_t0 = start_t + first / self.rate
        span_t1 = start_t + self._mic_samples / self.rate
        if span_t1 < far.time_of(0) - self.settings.lead_s or span_t0 > far.time_of(far.last) + self.settings.tail_s:
            return self._release(mic), None  # no answer is heard in this audio
        audio = np.concatenate([self._held, mic])
        frame = round(self.rate * FRAME_S)
        whole = len(audio) // frame * frame
        self._held = audio[whole:].copy()
        ref_first = round(far.sample_at(span_t0 + self.settings.lead_s))
        return audio[:whole], far.segment(ref_first, whole)

    async def cancel(self, pcm16: bytes, now: float) -> bytes:
        """The microphone audio that arrived at `now`, its echo removed (whole frames of it: the remainder comes
        with the next piece). Callers keep the order: one piece at a time."""
        mic, ref = self.prepare(pcm16, now)
        if ref is None:
            return mic.tobytes()
        return await asyncio.to_thread(self.process, mic, ref)

    def process(self, mic: np.ndarray, ref: np.ndarray | None) -> bytes:
        """Cancel `ref` from `mic` (prepare's output), frame by frame: blocking native calls."""
        apm = self._apm
        if ref is None or apm is None:
            return mic.tobytes()
        frame = round(self.rate * FRAME_S)
        out = bytearray(mic.tobytes())
        view = memoryview(out)
        delay_ms = round(self.settings.lead_s * 1000)
        for i in range(0, len(mic), frame):
            apm.process_reverse_stream(rtc.AudioFrame(ref[i:i + frame].tobytes(), self.rate, 1, frame))
            apm.set_stream_delay_ms(delay_ms)
            near = rtc.AudioFrame(bytearray(view[2 * i: 2 * (i + frame)]), self.rate, 1, frame)
            apm.process_stream(near)
            view[2 * i: 2 * (i + frame)] = bytes(near.data)
        return bytes(out)

    def _release(self, mic: np.ndarray) -> np.ndarray:
        if not len(self._held):
            return mic
        audio, self._held = np.concatenate([self._held, mic]), np.zeros(0, np.int16)
        return audio

    def _place(self, now: float) -> float:
        """When the microphone's sample 0 was captured: the earliest `arrival - samples so far / rate` (later
        arrivals were delayed on the way), restarted when audio resumes after a pause."""
        t0 = now - self._mic_samples / self.rate
        if self._mic_t0 is None or t0 < self._mic_t0 or t0 - self._mic_t0 > self.settings.gap_s:
            self._mic_t0 = t0
        return self._mic_t0
