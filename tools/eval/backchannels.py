"""Human backchannels and non-speech sounds for the barge-in evaluation and tests (never committed: built from
the human speech packages at run time, tools/eval/human_speech.py).

No packaged human recording says "uh-huh", "yeah" or "okay" alone. The Asterisk prompts (one professional
speaker) do hold a one-word "oh" (the digit) and "right" (in "right brace", "right bracket"): the word is cut out
with faster-whisper's word timestamps (Whisper tiny.en, the offline kit's), with 40 ms of margin either side, never
into the next word. A knock is synthesised (decaying resonant impulses: no recorded knock or cough is in an
installed package); there is no cough.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tools.eval.human_speech import SAMPLE_RATE, WORD_MARGIN_S, Clip, asterisk_clips, timed_words, word_end

_CUT_FROM = {"asterisk/letters/ascii125": "right", "asterisk/letters/ascii93": "right"}
_WHOLE = ("asterisk/digits/oh",)


@dataclass(frozen=True)
class Sound:
    name: str
    audio: np.ndarray  # 16 kHz mono int16
    words: bool        # a backchannel (words) or a noise (none)

    @property
    def seconds(self) -> float:
        return len(self.audio) / SAMPLE_RATE


def _cut_word(clip: Clip, word: str) -> np.ndarray:
    words = timed_words(clip)
    for i, w in enumerate(words):
        if w.word.strip().strip(".,!?").lower() == word:
            a = max(0, int((w.start - WORD_MARGIN_S) * SAMPLE_RATE))
            return _before_next_onset(clip.audio[a:min(len(clip.audio), int(word_end(words, i) * SAMPLE_RATE))])
    raise RuntimeError(f"Whisper found no '{word}' in {clip.id}: {clip.transcript!r}")


_WINDOW = 512  # 32 ms at 16 kHz, the vad's window
_ONSET_DB = 10.0  # a rise this far above the quietest window after the word's loudest: the next word begins


def _before_next_onset(audio: np.ndarray) -> np.ndarray:
    """The cut word without the next word's first sound.

    Whisper tiny's word timestamps can end a word late, after the next word has begun ("right" then the "b" of
    "brace"): a backchannel cut that way is a word and a bit, and lasts longer than the person's word. The cut ends
    after the quietest window that follows the word's loudest, where the sound rises again by _ONSET_DB.
    """
    n = len(audio) // _WINDOW
    if n < 3:
        return audio
    frames = audio[:n * _WINDOW].astype(np.float64).reshape(n, _WINDOW)
    db = 10 * np.log10(np.mean(frames * frames, axis=1) + 1e-9)
    loudest = int(np.argmax(db))
    quietest = loudest + int(np.argmin(db[loudest:]))
    if np.max(db[quietest:], initial=-np.inf) - db[quietest] < _ONSET_DB:
        return audio  # no sound rises after the word's decay: it is whole
    return audio[:(quietest + 1) * _WINDOW]


def backchannels() -> list[Sound]:
    """Human one-word backchannels: the whole "oh" prompt, and "right" cut from two prompts."""
    clips = {c.id: c for c in asterisk_clips() if c.id in _CUT_FROM or c.id in _WHOLE}
    sounds = [Sound(cid.rsplit("/", 1)[-1], clips[cid].audio, True) for cid in _WHOLE]
    sounds += [Sound(f"{word} ({cid.rsplit('/', 1)[-1]})", _cut_word(clips[cid], word), True)
               for cid, word in _CUT_FROM.items()]
    return sounds


def knock(raps: int = 2, gap_s: float = 0.18, seed: int = 0) -> Sound:
    """Knuckles on a door: `raps` impulses `gap_s` apart, each a resonant body (a few hundred Hz) decaying in about
    40 ms, with a click of noise on top."""
    rng = np.random.default_rng(seed)
    rap_len = int(0.08 * SAMPLE_RATE)
    t = np.arange(rap_len) / SAMPLE_RATE
    out = np.zeros(int((raps - 1) * gap_s * SAMPLE_RATE) + rap_len + int(0.05 * SAMPLE_RATE))
    for i in range(raps):
        body = sum(np.sin(2 * np.pi * f * t) * a for f, a in ((180, 1.0), (410, 0.6), (950, 0.3)))
        click = rng.normal(0, 0.5, rap_len) * np.exp(-t / 0.004)
        rap = (body * np.exp(-t / 0.012) + click) * (0.9 - 0.15 * i)
        at = int(i * gap_s * SAMPLE_RATE)
        out[at:at + rap_len] += rap
    out *= 0.5 * 32767 / np.abs(out).max()
    return Sound(f"knock x{raps}", out.astype(np.int16), False)
