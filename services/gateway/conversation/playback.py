"""Is an answer being heard now? While it is, the vad's barge-in gate holds (residual echo of the answer must not
interrupt it); the gateway tells the vad on its audio stream (`VadLink`).

The gateway sees what it sent, not what the speaker plays: an answer is taken as heard from its first audio until
it is interrupted, or the turn is over and either the client reports having played it all or its length (plus a
margin for the client's buffers) has passed since it began.
"""

from __future__ import annotations

from services.gateway.conversation.turn import Turn

# Audio queued in the client's player and the network ahead of it, beyond the answer's own length.
PLAYBACK_MARGIN_S = 0.5


def answer_playing(turn: Turn | None, now: float) -> bool:
    if turn is None or turn.interrupted or turn.first_audio_at is None:
        return False
    if not turn.finished:
        return True
    if turn.played_samples >= turn.samples_sent:
        return False
    return now < turn.first_audio_at + turn.samples_sent / turn.audio_rate + PLAYBACK_MARGIN_S
