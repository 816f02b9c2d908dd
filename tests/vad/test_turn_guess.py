"""The turn model's verdict taken ahead of time: judged from a pause's first silent window while the audio goes on,
used at the turn silence instead of a second inference, and dropped when the user speaks again before it."""

from __future__ import annotations

import numpy as np
import pytest

from services.vad.engine import EndReason, SpeechEvent, SpeechEventKind, TurnGuess, VadSettings, VadStream

from .speech import silence

RATE = 16000
CHUNK = 320  # 20 ms, as a microphone sends


class Guesser:
    """Drives a stream as the service does: a guess taken when due, its answer handed back ``delay`` chunks later
    (the model running beside the audio) or at once when the verdict waits for it. ``probability`` overrides the
    model's answer, so a test can tell whose verdict ended the turn."""

    def __init__(self, stream: VadStream, delay: int = 2, probability: float | None = None, model_ms: float = 10.0):
        self.stream, self.delay, self.probability, self.model_ms = stream, delay, probability, model_ms
        self.out: tuple[TurnGuess, int] | None = None
        self.taken: list[TurnGuess] = []
        self.decided = 0  # verdicts the stream had to ask the model for itself

    def feed(self, audio: np.ndarray) -> list[tuple[int, SpeechEvent]]:
        events = []
        for offset in range(0, len(audio), CHUNK):
            got = self.stream.push(audio[offset: offset + CHUNK])
            if self.out is not None and (offset >= self.out[1] or self.stream.awaiting_guess):
                guess = self.out[0]
                self.out = None
                probability = self.stream.judge(guess) if self.probability is None else self.probability
                got += self.stream.settle(guess, probability, self.model_ms)
            if self.stream.guess_due:
                guess = self.stream.take_guess()
                self.taken.append(guess)
                self.out = (guess, offset + self.delay * CHUNK)
            if self.stream.verdict_due:
                self.decided += 1
                got += self.stream.decide()
            events += [(offset + CHUNK, e) for e in got]
        return events


def of_kind(events, kind: SpeechEventKind) -> list[tuple[int, SpeechEvent]]:
    return [(at, e) for at, e in events if e.kind is kind]


def test_the_guess_taken_when_the_pause_begins_is_the_verdict(model, turn_model, turn_clips):
    """The filler-ended start, which the model itself holds open, ends at the turn silence when the guess said
    complete: the verdict is the guess's, and the model is not asked again."""
    audio = np.concatenate([silence(0.5), turn_clips["filler"], silence(1.0)])
    speech_end = int(0.5 * RATE) + len(turn_clips["filler"])
    with model.open_stream(RATE, VadSettings(), turn_model=turn_model) as stream:
        guesser = Guesser(stream, probability=0.97)
        events = guesser.feed(audio)
    (at, ended), = of_kind(events, SpeechEventKind.ENDED)
    assert ended.reason is EndReason.COMPLETE and ended.turn_probability == pytest.approx(0.97)
    assert guesser.decided == 0 and len(guesser.taken) >= 1
    # Taken on the pause's first silent window; the turn ended at the early turn silence (one 32 ms window's
    # rounding), the model's time inside it. The filler's "um..." may be that pause: at the latest, the speech's end.
    early = VadSettings().early_turn_silence_ms
    assert early < VadSettings().turn_silence_ms
    assert guesser.taken[-1].silence_ms < early <= ended.decision_ms < early + 32
    assert at < speech_end + 0.5 * RATE


def test_the_guess_the_model_gives_ends_a_complete_question(model, turn_model, turn_clips):
    audio = np.concatenate([silence(0.5), turn_clips["complete"], silence(1.0)])
    with model.open_stream(RATE, VadSettings(), turn_model=turn_model) as stream:
        guesser = Guesser(stream)
        (_, ended), = of_kind(guesser.feed(audio), SpeechEventKind.ENDED)
    assert ended.reason is EndReason.COMPLETE and ended.turn_probability > 0.5 and guesser.decided == 0


def test_a_guess_is_dropped_when_speech_resumes_and_the_next_pause_is_judged_anew(model, turn_model, turn_clips):
    """A guess of "complete" on a pause the user speaks through ends nothing, whether it came back before or after
    the speech resumed: the pause after the continuation is judged on its own."""
    first, rest = turn_clips["filler"], turn_clips["rest"]
    rest_end = int(0.3 * RATE) + len(first) + int(0.5 * RATE) + len(rest)
    audio = np.concatenate([silence(0.3), first, silence(0.5), rest, silence(2.5)])
    # Turn silences longer than the pause: the verdict is only ever due after the continuation.
    settings = VadSettings(turn_silence_ms=800, early_turn_silence_ms=800, max_turn_silence_ms=1500)
    for delay in (1, 40):  # back within the pause / after the speech resumed
        with model.open_stream(RATE, settings, turn_model=turn_model) as stream:
            guesser = Guesser(stream, delay=delay, probability=0.99)
            assert of_kind(guesser.feed(audio[:rest_end]), SpeechEventKind.ENDED) == []
            guesser.probability = 0.95
            (at, ended), = of_kind(guesser.feed(audio[rest_end:]), SpeechEventKind.ENDED)
        pauses = [guess.pause for guess in guesser.taken]
        assert len(set(pauses)) == len(pauses) >= 2, "each pause is guessed once, the continuation's anew"
        assert ended.reason is EndReason.COMPLETE and ended.turn_probability == pytest.approx(0.95)
        assert ended.start_sample < int(0.4 * RATE) and ended.end_sample > rest_end - 0.3 * RATE
        assert guesser.decided == 0


def test_a_guess_of_incomplete_gets_a_second_look_at_the_turn_silence(model, turn_model, turn_clips):
    """The guess heard only the pause's first window: at the turn silence the model judges again, and its verdict,
    not the guess's, holds the filler-ended start (or ends a complete question)."""
    for clip, kind in (("filler", SpeechEventKind.HELD), ("complete", SpeechEventKind.ENDED)):
        audio = np.concatenate([silence(0.5), turn_clips[clip], silence(0.6)])
        with model.open_stream(RATE, VadSettings(), turn_model=turn_model) as stream:
            guesser = Guesser(stream, probability=0.03)
            events = [e for _, e in guesser.feed(audio) if e.kind in (SpeechEventKind.HELD, SpeechEventKind.ENDED)]
        assert events and events[-1].kind is kind, f"{clip}: {events}"
        assert all(e.turn_probability != pytest.approx(0.03) for e in events)
        assert guesser.decided == len(events)


def test_a_verdict_due_before_its_guess_is_back_waits_for_it_and_counts_its_time(model, turn_model, turn_clips):
    """A client faster than real time reaches the turn silence while the guess still runs: the stream asks no second
    verdict, and the decision counts the guess's silence plus the model's time."""
    audio = np.concatenate([silence(0.5), turn_clips["complete"], silence(1.0)])
    with model.open_stream(RATE, VadSettings(), turn_model=turn_model) as stream:
        # Back 240 ms after it was taken: after the turn silence (about 224 ms from the pause's first window).
        guesser = Guesser(stream, delay=12, probability=0.9, model_ms=500.0)
        (_, ended), = of_kind(guesser.feed(audio), SpeechEventKind.ENDED)
    assert guesser.decided == 0 and ended.turn_probability == pytest.approx(0.9)
    # The model's 500 ms outlast the turn silence: the turn was decided when the guess came back.
    assert ended.decision_ms == pytest.approx(guesser.taken[-1].silence_ms + 500.0)


def test_a_stream_without_guesses_still_decides_at_the_turn_silence(model, turn_model, turn_clips):
    audio = np.concatenate([silence(0.5), turn_clips["complete"], silence(1.0)])
    with model.open_stream(RATE, VadSettings(), turn_model=turn_model) as stream:
        decided = []
        for offset in range(0, len(audio), CHUNK):
            stream.push(audio[offset: offset + CHUNK])
            if stream.verdict_due:
                decided += stream.decide()
    assert [e.kind for e in decided] == [SpeechEventKind.ENDED]
    with pytest.raises(RuntimeError, match="guess_due"):
        with model.open_stream(RATE, VadSettings(), turn_model=turn_model) as stream:
            stream.take_guess()
