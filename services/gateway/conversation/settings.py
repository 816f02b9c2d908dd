"""A session's time limits, built once from the gateway's settings, in the units they are used in (seconds).

The settings are written in milliseconds (`SOTTO_*_MS`, docs/settings.md); every collaborator of a session (the
turn, the asr and vad links, the media intake, the Realtime wire) takes these instead of converting on its own.
"""

from __future__ import annotations

from dataclasses import dataclass

from services.common import config


@dataclass(frozen=True)
class SessionSettings:
    # SOTTO_REQUEST_TIMEOUT_MS: each stage's first answer (Turn._first), stalled input, the vad stream's connect
    # wait, one-off calls; an utterance's words get this plus words_wait_per_audio_s per second of it (links/asr.py)
    request_timeout_s: float
    turn_deadline_s: float   # SOTTO_TURN_DEADLINE_MS: the gRPC deadline of a turn's llm and tts calls
    answer_wait_s: float     # SOTTO_GATEWAY_ANSWER_WAIT_MS: a turn's wait for the llm's first text, then first audio
    words_wait_per_audio_s: float  # SOTTO_GATEWAY_WORDS_WAIT_PER_AUDIO_S: the words' wait grows with the audio
    jitter_s: float          # SOTTO_JITTER_BUFFER_MS: the longest wait to re-order audio frames
    preroll_s: float         # SOTTO_PREROLL_MS: audio kept before the detected speech start

    def words_deadline_s(self, audio_s: float) -> float:
        """How long the words of `audio_s` of speech are waited for: a recogniser's time grows with the audio, and a
        slow one (a loaded machine) is worth waiting for up to the turn's own deadline."""
        return min(self.turn_deadline_s, self.request_timeout_s + audio_s * self.words_wait_per_audio_s)

    @classmethod
    def of(cls, gw: config.GatewayConfig) -> SessionSettings:
        return cls(request_timeout_s=gw.request_timeout_ms / 1000.0, turn_deadline_s=gw.turn_deadline_ms / 1000.0,
                   answer_wait_s=min(gw.answer_wait_ms, gw.turn_deadline_ms) / 1000.0,
                   words_wait_per_audio_s=gw.words_wait_per_audio_s, jitter_s=gw.jitter_ms / 1000.0,
                   preroll_s=gw.preroll_ms / 1000.0)
