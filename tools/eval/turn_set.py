"""The generated set of the end-of-turn evaluation: espeak-ng utterances followed by silence, in four classes.

- ``complete``: questions and statements that end the turn.
- ``filler``: a start that trails into "um... uh", a pause, then the rest.
- ``trailing``: a clause that trails off ("so I was thinking that maybe we could"), a pause, then the rest.
- ``mid_pause``: a pause in mid-sentence with no filler ("I'd like to book a table for", pause, "two people").

Several voices and speeds, some with noise. espeak-ng's flat prosody gives no audible cue that a sentence is
unfinished, so ``mid_pause`` is the class a synthetic voice cannot test fairly (docs/performance.md).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tools.speech import speak

RATE = 16000
LEAD_S = 0.4  # silence before the speech
TAIL_S = 2.0  # silence after the last words: longer than the longest held silence
NOISE_DBFS = -45.0

COMPLETE = ("What is the capital of France?", "Can you turn off the kitchen lights?",
            "Please set a timer for ten minutes.", "How far away is the moon?",
            "I would like a cup of tea.", "What time does the train to Boston leave?",
            "Tell me a joke about cats.")
FILLER = (("So I was thinking um... uh", "we could go to the beach tomorrow."),
          ("I want to, um, uh", "order a pizza for dinner."),
          ("Could you tell me, uh, um", "how tall the Eiffel tower is?"))
TRAILING = (("So I was thinking that maybe we could", "go to the beach tomorrow."),
            ("I wanted to ask you whether", "you could help me with my homework."),
            ("If it rains tomorrow then", "we should stay at home."))
MID_PAUSE = (("I'd like to book a table for", "two people tonight."),
             ("What is the capital of", "Australia?"),
             ("Remind me to call my", "mother on Sunday."))
VOICES = ("en-us", "en-gb", "en-us+f3", "en-gb-scotland+m3")
SPEEDS = (150, 175, 210)
PAUSES_S = (0.6, 0.9, 1.2)  # before the continuation of an unfinished turn


@dataclass
class Item:
    name: str
    kind: str                  # complete, filler, trailing, mid_pause
    voice: str
    speed: int
    noisy: bool
    audio: np.ndarray          # int16 at 16 kHz
    speech_end: int            # sample where the (first part of the) speech ends
    continuation: int | None   # sample where the rest begins (unfinished turns)


def _noise(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(0, 32768 * 10 ** (NOISE_DBFS / 20), n)


def build(workdir: Path) -> list[Item]:
    """44 items: 16 complete, 28 unfinished (4 voices x 3 speeds over the texts, every third with noise)."""
    styles = itertools.cycle(itertools.product(VOICES, SPEEDS))
    items = []
    plan = [("complete", (text, None)) for text in COMPLETE + COMPLETE[:5] + COMPLETE[:4]]
    plan += [(kind, pair) for kind, pairs in (("filler", FILLER), ("trailing", TRAILING), ("mid_pause", MID_PAUSE))
             for pair in pairs * 3]
    plan += [("filler", FILLER[0])]
    for index, (kind, (first_text, rest_text)) in enumerate(plan):
        voice, speed = next(styles)
        first = speak(first_text, voice, RATE, workdir, speed)
        lead = np.zeros(int(LEAD_S * RATE))
        parts, continuation = [lead, first], None
        speech_end = len(lead) + len(first)
        if rest_text is not None:
            pause = np.zeros(int(PAUSES_S[index % len(PAUSES_S)] * RATE))
            continuation = speech_end + len(pause)
            parts += [pause, speak(rest_text, voice, RATE, workdir, speed)]
        parts.append(np.zeros(int(TAIL_S * RATE)))
        audio = np.concatenate(parts).astype(np.float64)
        noisy = index % 3 == 2
        if noisy:
            audio += _noise(len(audio), index)
        items.append(Item(f"{kind}-{index:02d}", kind, voice, speed, noisy,
                          np.clip(audio, -32768, 32767).astype(np.int16), speech_end, continuation))
    return items
