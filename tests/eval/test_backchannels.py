"""The human backchannels the barge-in evaluation and tests play are one word each, not a word and a bit of the next:
a backchannel that holds the next word's onset lasts longer than the person's word, and is judged as longer."""

from __future__ import annotations

import numpy as np

from tools.eval import backchannels as bc


def _window_db(audio: np.ndarray) -> np.ndarray:
    n = len(audio) // 512
    frames = audio[:n * 512].astype(np.float64).reshape(n, 512)
    return 10 * np.log10(np.mean(frames * frames, axis=1) + 1e-9)


def _tone(seconds: float, dbfs: float, rng: np.random.Generator) -> np.ndarray:
    return rng.standard_normal(int(seconds * 16000)) * 32767 * 10 ** (dbfs / 20)


def test_a_word_cut_with_the_next_words_onset_loses_the_onset() -> None:
    rng = np.random.default_rng(0)
    word, gap, onset = _tone(0.4, -20, rng), _tone(0.1, -70, rng), _tone(0.06, -30, rng)
    cut = bc._before_next_onset(np.concatenate([word, gap, onset]))
    assert 0.4 <= len(cut) / 16000 <= 0.5 + 0.032, len(cut) / 16000  # the word and its gap, none of the onset


def test_a_whole_word_is_kept_whole() -> None:
    rng = np.random.default_rng(0)
    word = np.concatenate([_tone(0.3, -20, rng), _tone(0.2, -35, rng), _tone(0.1, -60, rng)])  # a decay
    assert len(bc._before_next_onset(word)) == len(word)


def test_every_human_backchannel_ends_in_its_own_decay() -> None:
    for sound in bc.backchannels():
        db = _window_db(sound.audio)
        quietest = int(np.argmax(db)) + int(np.argmin(db[int(np.argmax(db)):]))
        rise = float(np.max(db[quietest:]) - db[quietest])
        assert rise < 10, f"{sound.name} ends {rise:.0f} dB above its decay: the next word's onset"
