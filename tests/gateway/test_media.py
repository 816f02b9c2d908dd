"""Jitter buffer, audio tape and keyframe choice."""

from __future__ import annotations

import numpy as np

from services.gateway.conversation.inputs import MediaFrame
from services.gateway.conversation.media import AudioTape, CameraFrame, JitterBuffer, pick_keyframes


def _f(seq: int) -> MediaFrame:
    return MediaFrame(seq, float(seq), b"\x00\x00")


def test_jitter_buffer_reorders_and_drops_late_and_duplicates() -> None:
    jb = JitterBuffer(0.5)
    out = [f.sequence for f in jb.push(_f(0), now=0.0)]
    out += [f.sequence for f in jb.push(_f(2), now=0.01)]
    out += [f.sequence for f in jb.push(_f(1), now=0.02)]
    assert out == [0, 1, 2]
    assert jb.push(_f(1), now=0.03) == [] and jb.dropped["late"] == 1
    jb.push(_f(5), now=0.04)
    assert jb.push(_f(5), now=0.05) == [] and jb.dropped["duplicate"] == 1


def test_jitter_buffer_gives_up_on_a_gap_after_the_max_wait() -> None:
    jb = JitterBuffer(0.5)
    jb.push(_f(0), now=0.0)
    assert jb.push(_f(2), now=0.1) == []
    assert [f.sequence for f in jb.release(now=0.7)] == [2]
    assert jb.push(_f(1), now=0.8) == [] and jb.dropped["late"] == 1


def test_audio_tape_cuts_by_sample_and_forgets_old_audio() -> None:
    tape = AudioTape(16000, keep_s=1.0)
    for i in range(30):  # 3 s in 100 ms pieces
        tape.append(np.full(1600, i, dtype="<i2").tobytes(), 1000.0 + i * 100, float(i))
    assert tape.origin == 48000 - 16000
    cut = np.frombuffer(tape.cut(46400, 48000), dtype="<i2")
    assert len(cut) == 1600 and (cut == 29).all()
    assert tape.received_at(46400 + 800) == 29.0
    assert tape.cut(0, 100) == b""


def _frame(ts: float, value: float) -> CameraFrame:
    return CameraFrame(ts, b"", np.full((16, 16), value, dtype=np.float32))


def test_keyframes_are_first_one_second_in_and_last() -> None:
    frames = [_frame(1000 + i * 250, i * 20) for i in range(9)]  # 2 s of distinct frames
    chosen = pick_keyframes(frames, 1000, 3000, slack_ms=0)
    assert [f.ts_ms for f in chosen] == [1000, 2000, 3000]


def test_near_identical_keyframes_are_dropped() -> None:
    frames = [_frame(1000 + i * 250, 50.0) for i in range(9)]
    assert len(pick_keyframes(frames, 1000, 3000)) == 1


def test_a_frame_shortly_before_speech_is_used_when_none_came_during_it() -> None:
    assert [f.ts_ms for f in pick_keyframes([_frame(100, 1)], 5000, 6000)] == [100]
