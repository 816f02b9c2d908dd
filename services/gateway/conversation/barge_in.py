"""Speech over an answer whose synthesis is over but which the client is still playing: how much was heard.

A running turn is cut by `Turn.interrupt`. Piper often synthesises a short answer faster than the user can speak
over it, so the turn is over (`turn.done` sent) while the client still plays it; a client without its own VAD (every
Realtime client) never sends `interrupt`, and the answer went on. The gateway sees what it sent, not what the
speaker played, so it estimates: the client began playing when the first audio went out and plays in real time;
what it reported having played (`playback`) is taken where it is further on. LiveKit's `AudioOutput` makes the same
call from `on_playback_finished(position, interrupted)`; a client that reports nothing gets the estimate.
"""

from __future__ import annotations

from services.gateway.conversation.playback import PLAYBACK_MARGIN_S
from services.gateway.conversation.turn import Turn


def heard_samples(turn: Turn, now: float, reported: int) -> int:
    """Samples of the answer the user has heard by `now` (at most all that was sent); `reported`: what the client
    said it played."""
    if turn.first_audio_at is None:
        return 0
    played = round((now - turn.first_audio_at) * turn.audio_rate)
    return min(turn.samples_sent, max(reported, played))


def cut_point(turn: Turn | None, now: float, reported: int) -> int | None:
    """Where a finished answer still being played is cut by speech over it (samples heard), or None: no answer is
    playing (never begun, cut already, played out by the client's report or by its length plus the client's
    buffers), the turn still runs (`Turn.interrupt` stops it), or by the estimate all of it was heard."""
    if turn is None or not turn.finished or turn.interrupted or turn.first_audio_at is None:
        return None
    if now >= turn.first_audio_at + turn.samples_sent / turn.audio_rate + PLAYBACK_MARGIN_S:
        return None
    heard = heard_samples(turn, now, reported)
    return heard if heard < turn.samples_sent else None


def heard_now(turn: Turn | None, running: bool, now: float, reported: int) -> bool:
    """An answer is being heard: audio of the running turn went out, or a finished one still plays (`cut_point`)."""
    if turn is None or turn.interrupted or turn.first_audio_at is None:
        return False
    return running or cut_point(turn, now, reported) is not None
