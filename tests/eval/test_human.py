"""Where a recording's speech ends decides every endpoint delay the human-speech evaluation reports."""

from __future__ import annotations

import numpy as np

from tools.eval.human import speech_end


def test_speech_ends_before_the_recordings_own_room_tone():
    rng = np.random.default_rng(0)
    rate = 16000
    speech = (np.sin(2 * np.pi * 200 * np.arange(rate) / rate) * 8000).astype(np.int16)   # 1 s at about -15 dBFS
    room = rng.normal(0, 30, rate // 2).astype(np.int16)                                    # 0.5 s at about -60 dBFS
    end = speech_end(np.concatenate([speech, room]))
    assert rate - 160 <= end <= rate + 160  # within one 10 ms frame of the true end


def test_a_quiet_last_word_still_counts_as_speech():
    rate = 16000
    loud = (np.sin(2 * np.pi * 200 * np.arange(rate) / rate) * 8000).astype(np.int16)
    soft = (np.sin(2 * np.pi * 300 * np.arange(rate // 4) / rate) * 800).astype(np.int16)  # 20 dB down
    end = speech_end(np.concatenate([loud, soft, np.zeros(rate // 2, np.int16)]))
    assert abs(end - (rate + rate // 4)) <= 160
