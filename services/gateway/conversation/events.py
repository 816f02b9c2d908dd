"""What a conversation says to its client, as plain typed events: the core emits these and knows no wire.

Each wire is an adapter that serializes them its own way (`wires/protocol.py` for `/ws`, `wires/realtime_events.py`
for `/v1/realtime`), as Pipecat's transports put a FrameSerializer on typed frames: no wire builds another's JSON,
and nothing is parsed on the way out. Events are immutable; audio travels as the PCM the tts service sent.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

# What session.ready announces: the tts's rate (Kokoro speaks at 24 kHz). Each turn's `AudioStarted` states the
# rate of that turn's audio, which is what a client plays it at.
SAMPLE_RATE_OUT = 24000


@dataclass(frozen=True, slots=True)
class SessionReady:
    """The session is open: what it was opened with and what the gateway knows of the models now."""

    session_id: str
    sample_rate_in: int
    sample_rate_out: int
    voices: list[str]
    voice: str
    model: dict[str, Any]        # the llm's ModelInfo as the gateway learnt it
    limits: dict[str, Any]       # the session's limits, named as the settings are
    health: dict[str, str]       # each model service's health word
    turn: dict[str, Any]         # how turns are taken (semantic end of turn, silences, barge-in gate)


@dataclass(frozen=True, slots=True)
class SpeechStarted:
    ts_ms: float                 # the client's capture clock


@dataclass(frozen=True, slots=True)
class SpeechEnded:
    ts_ms: float


@dataclass(frozen=True, slots=True)
class TurnHeld:
    """The end-of-turn model judged the utterance unfinished: the turn stays open up to `max_silence_ms`."""

    ts_ms: float
    max_silence_ms: int


@dataclass(frozen=True, slots=True)
class TurnStarted:
    turn_id: str
    source: str                  # "speech" or "text"
    audio_ms: int
    images: int


@dataclass(frozen=True, slots=True)
class Transcript:
    """A spoken turn's words; `text` None with `error` once per outage of the asr service."""

    turn_id: str
    text: str | None
    recognition_ms: float | None = None
    error: str | None = None


@dataclass(frozen=True, slots=True)
class TextDelta:
    turn_id: str
    text: str


@dataclass(frozen=True, slots=True)
class AudioStarted:
    turn_id: str
    sample_rate: int


@dataclass(frozen=True, slots=True)
class AudioChunk:
    """PCM16 mono of the answer; `sample_offset` counts from the turn's first sample. Dropped unsent when its turn
    is interrupted."""

    turn_id: str
    sequence: int
    sample_offset: int
    pcm16: bytes = field(repr=False)


@dataclass(frozen=True, slots=True)
class AudioDone:
    turn_id: str
    samples: int


@dataclass(frozen=True, slots=True)
class TurnDone:
    turn_id: str
    text: str                    # everything the model said
    heard_text: str              # what the user heard of it (the history keeps this)
    interrupted: bool
    finish_reason: str           # conversation.turn.Outcome's value
    timings: dict[str, float]


@dataclass(frozen=True, slots=True)
class TurnCut:
    """Speech over an answer whose turn is over (`TurnDone` sent) but which the client is still playing, by the
    playback estimate: stop playing it; the history keeps `heard_text`, the words of its first `played_samples`."""

    turn_id: str
    played_samples: int
    sample_rate: int
    heard_text: str


@dataclass(frozen=True, slots=True)
class TurnDuck:
    """Speech over this turn's answer that may be a backchannel or a noise (conversation/backchannel.py): play it
    on at `gain_db` (the audio still to come is sent lowered too) until `TurnUnduck`, or stop it on a cut."""

    turn_id: str
    gain_db: float


@dataclass(frozen=True, slots=True)
class TurnUnduck:
    """The speech was a backchannel or a noise: play this turn's answer at full gain again (it was never paused)."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class TurnResumed:
    """The user went on speaking before any audio of this turn's answer was sent: the turn is withdrawn (it ends
    interrupted and is not remembered) and the next turn answers the whole utterance."""

    turn_id: str


@dataclass(frozen=True, slots=True)
class Error:
    code: str
    message: str
    turn_id: str = ""


@dataclass(frozen=True, slots=True)
class Busy:
    turn_id: str
    message: str


@dataclass(frozen=True, slots=True)
class Health:
    service: str
    status: str


@dataclass(frozen=True, slots=True)
class Pong:
    pass


Event = (SessionReady | SpeechStarted | SpeechEnded | TurnHeld | TurnStarted | Transcript | TextDelta | AudioStarted
         | AudioChunk | AudioDone | TurnDone | TurnCut | TurnDuck | TurnUnduck | TurnResumed | Error | Busy | Health
         | Pong)
