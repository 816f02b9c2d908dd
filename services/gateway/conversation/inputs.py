"""What a wire hands the conversation core, in the core's own terms: how a session opens, timestamped media, and the
error for media the core refuses. Each wire translates its own messages into these (`wires/ws.py` from protocol v1,
`wires/realtime.py` from OpenAI events), so the core knows no wire's format.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common import audio


@dataclass(frozen=True)
class Opening:
    """How a client opens its session."""

    sample_rate: int = audio.SPEECH_RATE
    voice: str = ""            # "" : the gateway's voice (SOTTO_GATEWAY_VOICE), else the tts default
    language: str = ""
    client_vad: bool = False   # the client sends audio only while its own VAD hears speech
    camera: bool = False
    turn_hold: bool = False    # the client keeps streaming after its end of speech when a turn is held
    # The client reports what it played (`playback`). A Realtime client does not: what was sent stands for heard
    # only for a cut's history, and speech over a finished answer is judged by the playback estimate alone.
    reports_playback: bool = True
    echo_cancel: bool = False  # remove the answer's echo from its audio (the client's microphone hears its speaker)


@dataclass(frozen=True)
class MediaFrame:
    """One piece of audio (PCM16 at the session's rate) or one camera image (JPEG), on the client's clock."""

    sequence: int
    ts_ms: float
    payload: bytes


class InputError(ValueError):
    """Input the conversation refuses; `code` is one of the error codes of docs/protocol.md (`bad_frame`,
    `too_large`, ...), and the message names what is accepted."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
