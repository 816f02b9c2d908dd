"""The clips both pipelines hear in `make bench-peers`, where each one's speech ends, and the order of turns.

Human speech comes first: synthetic voices mislead both the end-of-turn model and the recogniser, and a side
comparison on espeak alone would reward whichever pipeline guesses espeak's flat prosody best. Two Debian
packages carry free recordings (fetched by name with `apt-get download` + `dpkg -x` into a cache, never
committed): `asterisk-core-sounds-en-wav` (one professional speaker, 8 kHz, CC-BY-SA-3.0) and
`pocketsphinx-testdata` (LibriVox read speech and spoken card names, 16 kHz, BSD-2). The bench's own spoken
cases (espeak-ng, `tools.bench.fixtures`) follow, so the figures line up with `make bench`.

Every clip is 16 kHz mono PCM16; its end of speech is found once, here, by Silero on the whole clip with silence
alone, so both sides are timed from the same sample.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.common.audio import read_wav, wav_bytes
from services.vad.engine import SileroVad, SpeechEventKind, VadSettings
from tools.bench.fixtures import LONG_QUESTION, SHORT_QUESTION
from tools.eval.human_speech import fetch  # the evaluation's fetcher: one way to get the packages
from tools.speech import speak

RATE = 16000
PACKAGES = ("asterisk-core-sounds-en-wav", "pocketsphinx-testdata")
_ALLISON = "usr/share/asterisk/sounds/en_US_f_Allison"
_PS = "usr/share/pocketsphinx/test/data"
# (name, path in the unpacked packages, what is said): complete sentences, so both end-of-turn models should
# let them go; a mix of one prompt voice and several read-speech lengths.
HUMAN = (
    ("allison_cannot_complete", f"{_ALLISON}/cannot-complete-as-dialed.wav",
     "Your call cannot be completed as dialed."),
    ("allison_only_person", f"{_ALLISON}/conf-onlyperson.wav", "You are currently the only person in this conference."),
    ("allison_wait_for_leader", f"{_ALLISON}/conf-waitforleader.wav",
     "The conference will begin when the leader arrives."),
    ("allison_removed", f"{_ALLISON}/confbridge-removed.wav", "You have been removed from the conference."),
    ("librivox_0880", f"{_PS}/librivox/sense_and_sensibility_01_austen_64kb-0880.wav",
     "He was not an ill disposed young man."),
    ("librivox_0890", f"{_PS}/librivox/sense_and_sensibility_01_austen_64kb-0890.wav",
     "Unless to be rather cold hearted and rather selfish is to be ill disposed."),
    ("librivox_0930", f"{_PS}/librivox/sense_and_sensibility_01_austen_64kb-0930.wav",
     "He might even have been made amiable himself."),
    ("librivox_0920", f"{_PS}/librivox/sense_and_sensibility_01_austen_64kb-0920.wav",
     "Had he married a more amiable woman he might have been made still more respectable than he was."),
    ("cards_005", f"{_PS}/cards/005.wav", "Eight of spades, four of clubs, seven of hearts."),
)


@dataclass(frozen=True)
class Clip:
    name: str
    source: str          # "human" or "espeak"
    text: str
    pcm16: bytes         # 16 kHz mono
    speech_end_s: float  # where the last speech ends, from the clip's start

    @property
    def seconds(self) -> float:
        return len(self.pcm16) / (2 * RATE)


def to_16k(path: Path, workdir: Path) -> bytes:
    """16 kHz mono PCM16 of a WAV file (sox resamples with a fixed dither, as tools.speech does)."""
    out = workdir / f"{path.stem}.16k.wav"
    subprocess.run(["sox", "-R", str(path), "-r", str(RATE), "-c", "1", "-b", "16", str(out)], check=True)
    return read_wav(out.read_bytes()).pcm


def speech_end_s(pcm16: bytes, vad: SileroVad) -> float:
    """Where the clip's last speech ends: Silero on the whole clip, silence alone, no padding."""
    settings = VadSettings(threshold=0.5, min_speech_ms=100, min_silence_ms=300, speech_pad_ms=0, semantic=False)
    ends = []
    with vad.open_stream(RATE, settings) as stream:
        events = stream.push(pcm16 + bytes(RATE))  # one second of silence closes the last segment
        ends = [e.end_sample for e in events + stream.flush() if e.kind is SpeechEventKind.ENDED]
    if not ends:
        raise ValueError("no speech found in the clip")
    return min(ends[-1], len(pcm16) // 2) / RATE


def human_clips(cache: Path, workdir: Path, vad: SileroVad) -> list[Clip]:
    root = fetch(PACKAGES, cache)
    clips = []
    for name, rel, text in HUMAN:
        pcm = to_16k(root / rel, workdir)
        clips.append(Clip(name, "human", text, pcm, speech_end_s(pcm, vad)))
    return clips


def espeak_clips(workdir: Path, vad: SileroVad) -> list[Clip]:
    """The bench's spoken cases (`make bench`: spoken_short, spoken_long), the same espeak-ng speech."""
    clips = []
    for name, text in (("spoken_short", SHORT_QUESTION), ("spoken_long", LONG_QUESTION)):
        pcm = speak(text, "en-us", RATE, workdir).astype("<i2").tobytes()
        clips.append(Clip(name, "espeak", text, pcm, speech_end_s(pcm, vad)))
    return clips


def write_clip(clip: Clip, workdir: Path) -> Path:
    """The clip as a WAV file, for the Pipecat runner (another venv, another process)."""
    path = workdir / f"{clip.name}.wav"
    path.write_bytes(wav_bytes(clip.pcm16, RATE))
    return path


def schedule(names: list[str], rounds: int) -> list[tuple[str, tuple[str, str]]]:
    """The run's turns: every clip once per round, and for each clip both sides back to back; the side that
    goes first alternates from one pair to the next and, for each clip, from one round to the next, so neither
    side always follows the other's leftovers (a warm cache, a still-closing session) or always meets a busier
    moment of the machine."""
    order = []
    for r in range(rounds):
        for i, name in enumerate(names):
            first_sotto = (i + r) % 2 == 0
            order.append((name, ("sotto", "pipecat") if first_sotto else ("pipecat", "sotto")))
    return order


def trailing_silence(seconds: float) -> bytes:
    return np.zeros(int(seconds * RATE), dtype="<i2").tobytes()
