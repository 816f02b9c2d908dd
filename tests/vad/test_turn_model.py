"""Semantic end of turn: the smart-turn model's features and verdicts, and the stream that asks it after a short
silence; the barge-in gate that keeps the answer's own echo from starting a turn."""

from __future__ import annotations

import numpy as np
import pytest

from services.vad.endpointing import Edge, Endpointer
from services.vad.engine import EndReason, SpeechEvent, SpeechEventKind, VadSettings, VadStream
from services.vad.turn_features import input_features

from .speech import silence

RATE = 16000
SETTINGS = VadSettings()  # turn_silence 200 ms, max 1500 ms, silence-only min_silence 400 ms


def feed(stream: VadStream, audio: np.ndarray, chunk: int = 320) -> list[tuple[int, SpeechEvent]]:
    """Push like a microphone; run the verdict where one is due, as the service does. (received samples, event)."""
    out = []
    for offset in range(0, len(audio), chunk):
        events = stream.push(audio[offset : offset + chunk])
        if stream.verdict_due:
            events += stream.decide()
        out += [(offset + chunk, e) for e in events]
    return out


def of_kind(events, kind: SpeechEventKind) -> list[tuple[int, SpeechEvent]]:
    return [(at, e) for at, e in events if e.kind is kind]


def test_features_are_the_last_8_s_as_normalised_whisper_log_mel(turn_clips):
    speech = turn_clips["complete"].astype(np.float32) / 32768
    features = input_features(speech)
    assert features.shape == (1, 80, 800) and features.dtype == np.float32
    # Clamped at max - 8 then scaled by 1/4: a range of exactly 2.
    assert features.max() - features.min() == pytest.approx(2.0, abs=1e-5)
    # Zero mean, unit variance first: the level of the voice does not matter.
    np.testing.assert_allclose(input_features(speech * 0.05), features, atol=0.01)
    # Short audio is left-padded: the speech sits at the end, the padding before it is unchanging.
    frames = len(speech) // 160
    assert features[0, :, : 800 - frames - 2].std(axis=1).max() < 1e-5
    assert features[0, :, -frames:].std() > 0.1
    # Longer audio: only its last 8 s count.
    long = np.concatenate([np.random.default_rng(0).normal(0, 0.3, 10 * RATE).astype(np.float32), speech])
    np.testing.assert_allclose(input_features(long), input_features(long[-8 * RATE :]))


def test_the_model_hears_a_complete_question_and_a_filler_ended_start(turn_model, turn_clips):
    def verdict(clip):
        return turn_model.completeness(np.concatenate([clip, silence(0.2)]).astype(np.float32) / 32768)

    assert verdict(turn_clips["complete"]) > 0.5
    assert verdict(turn_clips["filler"]) < 0.5


def test_a_complete_question_ends_within_the_short_silence(model, turn_model, turn_clips):
    speech = turn_clips["complete"]
    audio = np.concatenate([silence(0.5), speech, silence(2.0)])
    speech_end = int(0.5 * RATE) + len(speech)
    with model.open_stream(RATE, SETTINGS, turn_model=turn_model) as stream:
        (at, ended), = of_kind(feed(stream, audio), SpeechEventKind.ENDED)
    assert ended.reason is EndReason.COMPLETE and ended.turn_probability > 0.5
    # Decided within the turn silence (200 ms) plus Silero's own fade-out, well before silence alone (400 ms) would.
    assert (at - speech_end) * 1000 / RATE < 350
    assert ended.decision_ms is not None and ended.decision_ms < 1000
    with model.open_stream(RATE, VadSettings(semantic=False), turn_model=turn_model) as stream:
        (silence_at, _), = of_kind(feed(stream, audio), SpeechEventKind.ENDED)
    assert silence_at > at


def test_a_filler_ended_pause_is_held_open_and_the_rest_continues_the_same_utterance(model, turn_model, turn_clips):
    first, rest = turn_clips["filler"], turn_clips["rest"]
    audio = np.concatenate([silence(0.5), first, silence(1.0), rest, silence(2.0)])
    rest_start = int(0.5 * RATE) + len(first) + RATE
    with model.open_stream(RATE, SETTINGS, turn_model=turn_model) as stream:
        events = feed(stream, audio)
    held = of_kind(events, SpeechEventKind.HELD)
    assert held and all(e.turn_probability < 0.5 for _, e in held)
    (at, ended), = of_kind(events, SpeechEventKind.ENDED)
    assert at > rest_start + len(rest), "the utterance was cut off before its continuation"
    assert ended.start_sample < int(0.6 * RATE) and ended.end_sample > rest_start + len(rest) - 0.2 * RATE
    # Silence alone cuts the same audio in two.
    with model.open_stream(RATE, VadSettings(semantic=False), turn_model=turn_model) as stream:
        assert len(of_kind(feed(stream, audio), SpeechEventKind.ENDED)) == 2


def test_a_held_utterance_ends_after_the_long_silence(model, turn_model, turn_clips):
    first = turn_clips["filler"]
    audio = np.concatenate([silence(0.5), first, silence(2.5)])
    speech_end = int(0.5 * RATE) + len(first)
    settings = VadSettings(max_turn_silence_ms=1200)
    with model.open_stream(RATE, settings, turn_model=turn_model) as stream:
        (at, ended), = of_kind(feed(stream, audio), SpeechEventKind.ENDED)
    assert ended.reason is EndReason.TIMEOUT
    assert 1.2 * RATE <= at - speech_end <= 1.5 * RATE


def test_the_clients_end_of_speech_asks_the_model(model, turn_model, turn_clips):
    """A client that can keep streaming sends its end of speech after a short redemption: complete ends the turn at
    once, incomplete holds it (and asks again hold it again without a second inference)."""
    for clip, complete in (("complete", True), ("filler", False)):
        with model.open_stream(RATE, SETTINGS, turn_model=turn_model) as stream:
            feed(stream, np.concatenate([silence(0.5), turn_clips[clip], silence(0.1)]))
            assert stream.ask_verdict() == [] and stream.verdict_due
            (event,) = stream.decide()
            assert event.kind is (SpeechEventKind.ENDED if complete else SpeechEventKind.HELD)
            if not complete:
                (again,) = stream.ask_verdict()
                assert again.kind is SpeechEventKind.HELD and not stream.verdict_due


def _step_all(endpointer: Endpointer, probs: list[float], window: int = 512, levels: list[float] | None = None,
              first: int = 0) -> list[tuple[Edge, int, int]]:
    edges = []
    for i, prob in enumerate(probs, start=first):
        level = None if levels is None else levels[i - first]
        if edge := endpointer.step(i * window, prob, level):
            edges.append((edge[0], edge[1], (i + 1) * window))
    return edges


def test_the_barge_in_gate_ignores_echo_like_speech_but_not_a_clear_voice():
    windows_ms = 512 / 16
    endpointer = Endpointer(VadSettings(speech_pad_ms=0), RATE, 512)
    endpointer.set_gate(True)
    # Echo: a second of speech-like windows under the barge-in threshold would start a turn without the gate.
    echo = _step_all(endpointer, [0.6] * 30 + [0.05] * 20)
    assert [edge for edge, *_ in echo] == [Edge.SUPPRESSED]
    # A real voice at the raised threshold starts a turn after about the gate's 160 ms.
    endpointer.reset()
    endpointer.set_gate(True)
    (started,) = _step_all(endpointer, [0.05] * 5 + [0.95] * 20)
    assert started[0] is Edge.STARTED and started[1] == 5 * 512
    assert (started[2] - started[1]) / 16 <= 160 + windows_ms
    # Without the gate, the echo starts a turn.
    assert _step_all(Endpointer(VadSettings(), RATE, 512), [0.6] * 30)[0][0] is Edge.STARTED


def test_while_an_answer_plays_confident_speech_far_below_the_users_level_is_its_echo():
    """The user speaks at -26 dBFS with nothing playing; during the answer, speech Silero is sure of but 20 dB below
    them (the echo a canceller or the browser left) starts no turn, and the user at their level does."""
    endpointer = Endpointer(VadSettings(speech_pad_ms=0, semantic=False, barge_in_level_db=6), RATE, 512)
    said = _step_all(endpointer, [0.95] * 30 + [0.05] * 20, levels=[-26.0] * 30 + [-70.0] * 20)
    assert [edge for edge, *_ in said] == [Edge.STARTED, Edge.ENDED]
    endpointer.set_gate(True, 50 * 512)
    echo = _step_all(endpointer, [0.95] * 30 + [0.05] * 20, levels=[-46.0] * 30 + [-70.0] * 20, first=50)
    assert [edge for edge, *_ in echo] == [Edge.SUPPRESSED]
    (started,) = _step_all(endpointer, [0.95] * 20, levels=[-29.0] * 20, first=100)
    assert started[0] is Edge.STARTED and started[1] == 100 * 512


def test_without_the_users_level_or_with_the_level_test_off_the_probability_alone_gates():
    for settings, heard in ((VadSettings(speech_pad_ms=0, barge_in_level_db=6), False),
                            (VadSettings(speech_pad_ms=0, barge_in_level_db=0), True)):
        endpointer = Endpointer(settings, RATE, 512)
        if heard:
            _step_all(endpointer, [0.95] * 30 + [0.05] * 20, levels=[-26.0] * 30 + [-70.0] * 20)
        endpointer.set_gate(True, 50 * 512)
        (started,) = _step_all(endpointer, [0.95] * 20, levels=[-46.0] * 20, first=50)
        assert started[0] is Edge.STARTED
