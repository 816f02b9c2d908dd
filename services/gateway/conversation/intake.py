"""A session's incoming media: audio through the jitter buffer onto the tape and on to the vad, camera frames kept
for the next turn's keyframes, and the open utterance, cut from the tape when the vad hears its end.

It also watches the open utterance: one whose audio stops arriving is dropped after the request timeout, and
frames held behind a gap are released once the jitter buffer gives up on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from services.common import audio, config
from services.gateway import metrics
from services.gateway.conversation.echo_cancel import EchoCanceller
from services.gateway.conversation.settings import SessionSettings
from services.gateway.conversation.media import AudioTape, CameraFrame, JitterBuffer, decode_jpeg, pick_keyframes
from services.gateway.conversation.inputs import MediaFrame

SAMPLE_RATE_IN = audio.SPEECH_RATE  # what the page and the vad speak; session.start's sample_rate says so
_SAMPLES_PER_MS = SAMPLE_RATE_IN // 1000


@dataclass(kw_only=True)
class Utterance:
    wav: bytes
    audio_ms: float
    images: list[bytes]
    image_ts: list[float]
    received_at: float  # monotonic: when the gateway got the utterance's last audio


class MediaIntake:
    def __init__(self, *, gw: config.GatewayConfig, settings: SessionSettings, name: str,
                 to_vad: Callable[[bytes, float, int], None],
                 drop_utterance: Callable[[str, str], Awaitable[None]], echo: EchoCanceller | None = None) -> None:
        """`to_vad(pcm, capture_ts_ms, tape_start)` takes audio in order; `drop_utterance(code, message)` reports an
        utterance given up and resets the vad's state for it; `echo` removes the answer's echo before both."""
        self._gw = gw
        self._settings = settings
        self._to_vad = to_vad
        self._drop_utterance = drop_utterance
        self.jitter = JitterBuffer(settings.jitter_s)
        self.tape = AudioTape(SAMPLE_RATE_IN, gw.max_turn_audio_s + settings.preroll_s + 2)
        self.frames: list[CameraFrame] = []
        self.utterance_start: int | None = None  # tape sample of the open utterance's start
        self._last_audio_at = 0.0
        self.echo = echo
        self._feeding = asyncio.Lock()  # the canceller runs in a worker thread: pieces must not overtake
        self._watch_wanted = asyncio.Event()  # set by audio and by a speech start: wakes a parked watchdog
        self._watchdog = asyncio.create_task(self._watch_stalls(), name=f"{name}::stalls")

    @property
    def in_utterance(self) -> bool:
        return self.utterance_start is not None

    def camera(self, frame: MediaFrame) -> None:
        """Keep a camera frame (checked first: raises InputError) for the keyframes of the next utterance."""
        thumb = decode_jpeg(frame.payload, self._gw.max_image_pixels)
        self.frames.append(CameraFrame(frame.ts_ms, frame.payload, thumb))
        del self.frames[: -self._gw.max_frames_per_turn]

    async def audio(self, frame: MediaFrame) -> None:
        self._watch_wanted.set()
        before = dict(self.jitter.dropped)
        for ready in self.jitter.push(frame):
            await self._feed(ready.payload, ready.ts_ms)
        for reason, count in self.jitter.dropped.items():
            if count > before[reason]:
                metrics.DROPPED.labels(f"audio_{reason}").inc(count - before[reason])

    async def _feed(self, pcm: bytes, ts_ms: float) -> None:
        async with self._feeding:
            now = time.monotonic()
            self._last_audio_at = now
            if self.echo is not None and self.echo.enabled:
                # What the canceller held back of the last piece comes first, captured that much earlier.
                ts_ms -= self.echo.held_samples / _SAMPLES_PER_MS
                pcm = await self.echo.cancel(pcm, now)
                if not pcm:
                    return
            await self._to_tape(pcm, ts_ms, now)

    async def _to_tape(self, pcm: bytes, ts_ms: float, now: float) -> None:
        start = self.tape.append(pcm, ts_ms, now)
        limit_s = self._gw.max_turn_audio_s
        if self.utterance_start is not None and (self.tape.end - self.utterance_start) / SAMPLE_RATE_IN > limit_s:
            self.utterance_start = None
            await self._drop_utterance("too_large", f"the utterance is longer than {limit_s:g} s; it was dropped")
            return
        self._to_vad(pcm, ts_ms, start)

    def speech_started(self, tape_sample: int) -> None:
        self.utterance_start = tape_sample
        self._watch_wanted.set()

    def end_utterance(self, *, start: int, end: int, start_ts_ms: float, end_ts_ms: float) -> Utterance:
        """The utterance between two tape samples (with the pre-roll before `start`) and its keyframes; camera
        frames up to its end are used up."""
        self.utterance_start = None
        pcm = self.tape.cut(start - int(self._settings.preroll_s * SAMPLE_RATE_IN), end)
        received = self.tape.received_at(min(end, self.tape.end - 1)) or time.monotonic()
        keyframes = pick_keyframes(self.frames, start_ts_ms, end_ts_ms)
        self.frames = [f for f in self.frames if f.ts_ms > end_ts_ms]
        return Utterance(wav=audio.wav_bytes(pcm, SAMPLE_RATE_IN), audio_ms=len(pcm) / 2 / _SAMPLES_PER_MS,
                         images=[f.jpeg for f in keyframes], image_ts=[f.ts_ms for f in keyframes],
                         received_at=received)

    def abandon_utterance(self) -> None:
        self.utterance_start = None

    async def _watch_stalls(self) -> None:
        """With neither an utterance nor a held frame to watch it parks until audio or a speech start arrives:
        a session whose reply is being prepared, or an idle one, then does not wake the gateway 10 times a
        second, and on a small machine each wake-up is taken from the synthesis of the first sentence
        (docs/performance.md)."""
        timeout = self._settings.request_timeout_s
        while True:
            if self.utterance_start is None and not self.jitter.pending:
                self._watch_wanted.clear()
                await self._watch_wanted.wait()
            await asyncio.sleep(min(0.1, timeout / 4))
            for ready in self.jitter.release():
                await self._feed(ready.payload, ready.ts_ms)
            if self.utterance_start is not None and time.monotonic() - self._last_audio_at > timeout:
                self.utterance_start = None
                await self._drop_utterance("stalled_input", f"audio stopped arriving mid-utterance for over "
                                                            f"{self._gw.request_timeout_ms} ms; the utterance was "
                                                            "dropped")

    async def close(self) -> None:
        """Stop the watchdog and drop the buffered media now: a closed session can stay reachable through
        reference cycles until a full GC pass, which may be many sessions later."""
        self._watchdog.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await self._watchdog
        self.frames.clear()
        self.tape = AudioTape(SAMPLE_RATE_IN, 0)
        self.jitter = JitterBuffer(self._settings.jitter_s)
