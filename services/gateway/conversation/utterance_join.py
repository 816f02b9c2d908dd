"""One utterance stays one turn: when the user goes on speaking before any of the answer was heard, the answer is
dropped unheard and the two parts become one user turn.

The rule, from what users of voice pipelines report: a sentence split into several turns and answered in pieces
(microsoft/call-center-ai#396, where a "rollback" of the premature answer was asked for), an agent that does not
wait while the user looks for a word (twilio-labs/call-gpt#20); and Pipecat's maintainers keeping in the context
only what the user actually heard (pipecat-ai/pipecat#1391). So: a pause followed by more speech is the same
utterance as long as no audio of the answer had gone out when the user resumed; the premature answer is rolled back
(cancelled, never in the history). Once its first audio was sent before they resumed, they heard it start and spoke
over it: a barge-in, cut to what was heard as before. The comparison is between the gateway's own clock readings:
when it sent the first audio, and when it received the resumed speech's first sample.
"""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np

from services.common import audio
from services.gateway.conversation.turn import Turn, TurnInput


def resumes_unheard(turn: Turn | None, resumed_at: float, finished_at: float | None, grace_s: float,
                    heard_samples: int | None) -> bool:
    """Speech received at `resumed_at` continues `turn`'s utterance: a spoken turn still running then, or that ended
    at most `grace_s` before (`finished_at`; None: it runs), and of whose answer the user heard nothing. The grace
    is for a client with its own VAD (the page): it stops the answer (`interrupt`) as its VAD confirms the speech,
    just before it sends that speech's audio, pre-roll first.

    What was heard: a client that reports its playback says it (`heard_samples`, from its reports and its
    `interrupt`), which no clock on the gateway can: a page's speech arrives only once its VAD confirms it, so
    the gateway's reading of when it began can fall before an answer the user had in fact heard. For a client that
    reports nothing (None), no audio of the answer sent before the speech arrived stands for nothing heard."""
    if turn is None or turn.inp.source != "speech":
        return False
    if turn.finished and (finished_at is None or finished_at + grace_s <= resumed_at):
        return False
    if heard_samples is not None:
        return heard_samples == 0
    return turn.first_audio_at is None or turn.first_audio_at > resumed_at


def received_at(at: float | None, turn: Turn | None) -> float:
    """When the gateway got new speech's first sample (`at`: the tape's reading). A client with its own VAD sends
    only speech, so the padded start can fall into the previous utterance's audio, received long before: a time not
    after that utterance's end is not this speech's, and then now (a little late, so never a heard answer
    withdrawn)."""
    last_end = turn.inp.t_input_end if turn is not None else None
    return at if at is not None and (last_end is None or at > last_end) else time.monotonic()


def join_wav(first: bytes, second: bytes) -> bytes:
    """The two parts' audio as one WAV (16 kHz mono PCM16, as the intake cuts it)."""
    a, b = audio.read_wav(first), audio.read_wav(second)
    pcm = np.concatenate([np.frombuffer(a.pcm, dtype="<i2"), np.frombuffer(b.pcm, dtype="<i2")])
    return audio.wav_bytes(pcm.tobytes(), a.sample_rate)


def join_words(first: str, second: str) -> str:
    return " ".join(part.strip() for part in (first, second) if part.strip())


def joined_input(first: TurnInput, second: TurnInput) -> TurnInput:
    """The second part's input widened to the whole utterance: audio joined, and the first part's opening keyframe
    ahead of the second part's (so at most one more image than a single utterance has)."""
    return replace(second, audio_wav=join_wav(first.audio_wav, second.audio_wav) if first.audio_wav else
                   second.audio_wav, audio_ms=first.audio_ms + second.audio_ms,
                   images=first.images[:1] + second.images, image_ts=first.image_ts[:1] + second.image_ts)
