"""The server's echo canceller (WebRTC AEC3) with real audio: a Piper answer played into a simulated room and heard
by the microphone of a client without its own VAD, people's recorded speech over it, and the vad service's Silero
engine with the barge-in gate it applies while an answer plays (tools.eval.echo_room replays the session's timeline).

The canceller is what stands between that echo and an answer that interrupts itself: each test runs without it as a
control in the same conditions, so a canceller that removed nothing would fail here.
"""

from __future__ import annotations

import numpy as np
import pytest

from services.vad.engine import SileroVad
from tools.eval import echo_room
from tools.eval.echo_room import Room, Timing, microphone, onset_s, replay
from tools.eval.human_speech import asterisk_clips

PERSON_DBFS = -26.0  # a person about a metre from the microphone
CUT_IN_AFTER_S = 1.0


@pytest.fixture(scope="module")
def vad() -> SileroVad:
    return SileroVad()


@pytest.fixture(scope="module")
def answers() -> list[np.ndarray]:
    """Four real answers in the offline kit's English voice (Piper), about 9 s each, the same on every run: with a
    new draw per run, about 1 cut-in in 36 took 580 ms (tools.eval.echo_room measures that spread)."""
    return echo_room.synthesise(echo_room.ANSWERS[:4], seed=0)


@pytest.fixture(scope="module")
def people() -> list[np.ndarray]:
    """Three short things a person says (human speech, Asterisk's prompts)."""
    wanted = ("asterisk/agent-loginok", "asterisk/all-circuits-busy-now", "asterisk/auth-thankyou")
    clips = {c.id: c.audio for c in asterisk_clips() if c.id in wanted}
    assert sorted(clips) == sorted(wanted), f"missing human clips: {set(wanted) - set(clips)}"
    return [clips[name] for name in wanted]


@pytest.mark.parametrize("echo_db", [-12.0, -6.0])
def test_the_answers_echo_interrupts_it_without_the_canceller_and_not_with_it(vad, answers, echo_db) -> None:
    """Every answer interrupts itself without the canceller; with it, at most 1 in 4 (the issue's bar is 1 in 20 at
    -12 dB, which tools.eval.echo_room measures over many answers: a test of a few allows the one)."""
    room, timing = Room(), Timing()
    stopped = {}
    for i, answer in enumerate(answers):
        mic = microphone(answer, room, timing, PERSON_DBFS + echo_db, seed=i)
        without = replay(mic, answer, cancel=False, timing=timing, vad=vad, seed=i)
        assert without, f"answer {i}: its echo at {echo_db} dB did not interrupt it even without the canceller"
        if with_it := replay(mic, answer, cancel=True, timing=timing, vad=vad, seed=i):
            stopped[i] = with_it
    assert len(stopped) <= 1, f"echo at {echo_db} dB interrupted answers {stopped} (at s) with the canceller"


def test_a_person_speaking_over_the_echo_is_heard_at_once(vad, answers, people) -> None:
    """With the canceller on and the answer's echo at -12 dB, a person's cut-in starts speech within 400 ms of their
    first word (the vad's own minimum speech is most of it), and nothing starts before they speak."""
    room, timing = Room(), Timing()
    at = timing.first_chunk_s + timing.client_delay_s + CUT_IN_AFTER_S
    for i, person in enumerate(people):
        answer = answers[i % len(answers)]
        mic = microphone(answer, room, timing, PERSON_DBFS - 12, person, at, PERSON_DBFS, seed=i)
        starts = replay(mic, answer, cancel=True, timing=timing, vad=vad, seed=i)
        spoke = at + onset_s(person)
        assert starts, f"cut-in {i} was not heard over the cancelled echo"
        assert spoke <= starts[0] <= spoke + 0.4, f"cut-in {i}: spoke at {spoke:.2f} s, speech started {starts}"


def test_playback_reports_align_the_answer_for_a_client_with_a_deep_buffer(vad, answers) -> None:
    """A client that plays 0.8 s after receiving: sending times alone place the answer too early for the canceller
    to find its echo; the client's playback reports on the first answer teach the session its delay, and the
    second answer is cancelled from its first word."""
    room, timing = Room(), Timing(client_delay_s=0.8)
    first, second = (microphone(a, room, timing, PERSON_DBFS - 12, seed=i) for i, a in enumerate(answers[:2]))
    assert replay(second, answers[1], cancel=True, timing=timing, vad=vad, seed=1), \
        "the echo was cancelled without reports: this test no longer tests them"
    reporting = echo_room.canceller(True)
    replay(first, answers[0], cancel=True, timing=timing, vad=vad, report_every_s=0.25, echo=reporting)
    assert replay(second, answers[1], cancel=True, timing=timing, vad=vad, report_every_s=0.25, echo=reporting,
                  start_s=len(first) / echo_room.RATE, seed=1) == []


def test_playback_reports_of_a_client_that_plays_at_once_do_not_let_the_echo_through(vad, answers) -> None:
    """A client that plays 50 ms after receiving and reports its playback every 250 ms, as the page does: its first
    report shows the answer 50 ms later than sending times placed it. Moving the reference by that much mid-answer
    made AEC3 re-learn the echo path while the echo went through, and most answers interrupted themselves; AEC3
    finds so small a delay on its own."""
    room, timing = Room(), Timing(client_delay_s=0.05)
    stopped = {}
    for i, answer in enumerate(answers):
        mic = microphone(answer, room, timing, PERSON_DBFS - 12, seed=i)
        if starts := replay(mic, answer, cancel=True, timing=timing, vad=vad, report_every_s=0.25, seed=i):
            stopped[i] = starts
    assert len(stopped) <= 1, f"the echo interrupted answers {stopped} (at s) with playback reports"
