"""VAD engine behaviour a user notices: turns found where speech is, nothing else a turn."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from services.vad.engine import (
    MODEL_SHA256,
    SileroVad,
    SpeechEvent,
    SpeechEventKind,
    VadSettings,
    default_model_path,
)

from .speech import Scene, compose, white_noise

TOLERANCE_MS = 100
GAPS_S = [1.0, 1.0, 1.2, 1.0]  # before each utterance, and after the last


def run(model: SileroVad, audio: np.ndarray, rate: int = 16000, chunk_ms: float = 20,
        settings: VadSettings | None = None, start_ms: float = 0.0) -> list[SpeechEvent]:
    """Feed ``audio`` like a microphone would: fixed-size chunks, each with its capture time."""
    chunk = max(1, int(rate * chunk_ms / 1000))
    with model.open_stream(rate, settings) as stream:
        events = []
        for offset in range(0, len(audio), chunk):
            events += stream.push(audio[offset : offset + chunk], capture_ms=start_ms + offset * 1000 / rate)
        return events + stream.flush()


def segments_ms(events: list[SpeechEvent]) -> list[tuple[float, float]]:
    return [(e.start_ms, e.end_ms) for e in events if e.kind is SpeechEventKind.ENDED]


def assert_matches_truth(found: list[tuple[float, float]], scene: Scene, start_tol: float, end_tol: float) -> None:
    truth = scene.truth_ms()
    assert len(found) == len(truth), f"found {found}, expected segments near {truth}"
    for (start, end), (true_start, true_end) in zip(found, truth):
        assert abs(start - true_start) <= start_tol, f"start {start:.0f} ms vs truth {true_start:.0f} ms"
        assert abs(end - true_end) <= end_tol, f"end {end:.0f} ms vs truth {true_end:.0f} ms"


# Detection accuracy is measured without padding (speech_pad_ms=0): the pad is a widening
# the caller asks for, checked on its own below.
UNPADDED = VadSettings(speech_pad_ms=0)


@pytest.mark.parametrize("noise_dbfs", [None, -60, -50], ids=["clean", "noise-60dBFS", "noise-50dBFS"])
@pytest.mark.parametrize("shift_ms", [0, 11, 23], ids=lambda s: f"shift{s}ms")
def test_every_utterance_found_within_100ms(model, utterances_16k, noise_dbfs, shift_ms):
    gaps = [GAPS_S[0] + shift_ms / 1000, *GAPS_S[1:]]  # shift speech against the window grid
    scene = compose(utterances_16k, gaps, 16000, noise_dbfs, seed=shift_ms)
    found = segments_ms(run(model, scene.audio, settings=UNPADDED))
    assert_matches_truth(found, scene, TOLERANCE_MS, TOLERANCE_MS)


def test_loud_noise_still_finds_every_turn(model, utterances_16k):
    """At about 15 dB SNR every turn is still found once; Silero's probability decays more
    slowly after speech in noise, so ends come up to ~200 ms late."""
    scene = compose(utterances_16k, GAPS_S, 16000, noise_dbfs=-35)
    found = segments_ms(run(model, scene.audio, settings=UNPADDED))
    assert_matches_truth(found, scene, TOLERANCE_MS, 250)


def test_8khz_audio_is_endpointed_too(model, utterances_8k):
    scene = compose(utterances_8k, GAPS_S, 8000)
    found = segments_ms(run(model, scene.audio, rate=8000, settings=UNPADDED))
    assert_matches_truth(found, scene, TOLERANCE_MS, 150)


def test_speech_pad_widens_each_segment_on_both_sides(model, utterances_16k):
    scene = compose(utterances_16k, GAPS_S, 16000)
    plain = segments_ms(run(model, scene.audio, settings=UNPADDED))
    padded = segments_ms(run(model, scene.audio, settings=VadSettings(speech_pad_ms=30)))
    assert padded == [(start - 30, end + 30) for start, end in plain]


def test_a_short_blip_is_not_a_turn(model, utterances_16k):
    blip = utterances_16k[1][: int(0.2 * 16000)]
    assert run(model, compose([blip], [1.0, 1.0], 16000).audio) == []
    # The same voice held longer than min speech (300 ms) does start a turn.
    longer = utterances_16k[1][: int(0.6 * 16000)]
    assert len(segments_ms(run(model, compose([longer], [1.0, 1.0], 16000).audio))) == 1


def test_speech_start_reports_the_true_start_once_min_speech_has_passed(model, utterances_16k):
    scene = compose(utterances_16k[:1], [1.0, 1.0], 16000)
    with model.open_stream(16000, UNPADDED) as stream:
        pushed = 0
        while not (events := stream.push(scene.audio[pushed : pushed + 320])):
            pushed += 320
    true_start = scene.truth[0][0]
    assert events[0].kind is SpeechEventKind.STARTED
    assert pushed + 320 - true_start >= 0.3 * 16000  # announced only after 300 ms of speech
    assert abs(events[0].start_sample - true_start) <= 0.1 * 16000  # but dated where speech began


def test_two_seconds_of_white_noise_start_nothing(model):
    for dbfs in (-40, -25, -15):
        noise = white_noise(2 * 16000, dbfs, seed=dbfs % 7)
        assert run(model, noise) == [], f"white noise at {dbfs} dBFS started a turn"


def test_chunk_size_does_not_change_segments(model, utterances_16k):
    scene = compose(utterances_16k, GAPS_S, 16000, noise_dbfs=-50)
    by_20ms = run(model, scene.audio, chunk_ms=20)
    assert by_20ms == run(model, scene.audio, chunk_ms=1000)
    assert by_20ms == run(model, scene.audio, chunk_ms=7.3)  # odd sizes re-frame the same way
    assert len(segments_ms(by_20ms)) == 3


def test_bytes_and_int16_arrays_give_the_same_events(model, utterances_16k):
    scene = compose(utterances_16k[:1], [0.5, 0.8], 16000)
    with model.open_stream() as stream:
        from_bytes = stream.push(scene.audio.tobytes()) + stream.flush()
    assert from_bytes == run(model, scene.audio, chunk_ms=10_000) != []


def test_short_end_of_turn_silence_splits_turns_the_default_keeps(model, utterances_16k):
    scene = compose(utterances_16k[1:], [0.5, 0.3, 0.5], 16000)  # a 300 ms pause between
    assert len(segments_ms(run(model, scene.audio))) == 1  # default 400 ms: one turn
    quick = VadSettings(min_silence_ms=150, speech_pad_ms=30)
    assert len(segments_ms(run(model, scene.audio, settings=quick))) == 2


def test_end_of_turn_is_announced_min_silence_after_speech(model, utterances_16k):
    scene = compose(utterances_16k[:1], [0.5, 2.0], 16000)
    true_end = scene.truth[0][1]
    for min_silence_ms in (150, 400, 800):
        settings = VadSettings(min_silence_ms=min_silence_ms)
        with model.open_stream(16000, settings) as stream:
            pushed = 0
            while not any(e.kind is SpeechEventKind.ENDED for e in stream.push(scene.audio[pushed : pushed + 320])):
                pushed += 320
        latency_ms = (pushed + 320 - true_end) / 16
        assert min_silence_ms <= latency_ms <= min_silence_ms + 150, (min_silence_ms, latency_ms)


def test_timestamps_follow_each_chunks_capture_time(model, utterances_16k):
    """A capture gap (dropped packets) before the speech shifts its timestamps, not its samples."""
    scene = compose(utterances_16k[:1], [1.0, 1.0], 16000)
    lead, rest = scene.audio[:8000], scene.audio[8000:]
    with model.open_stream(16000, UNPADDED) as stream:
        events = stream.push(lead, capture_ms=50_000) + stream.push(rest, capture_ms=50_000 + 500 + 700)
        events += stream.flush()
    (segment,) = [e for e in events if e.kind is SpeechEventKind.ENDED]
    true_start, true_end = scene.truth[0]
    expected_start_ms = 50_000 + 1200 + (true_start - 8000) / 16
    assert abs(segment.start_ms - expected_start_ms) <= TOLERANCE_MS
    assert segment.end_ms - segment.start_ms == pytest.approx((segment.end_sample - segment.start_sample) / 16)
    assert abs(segment.end_sample - true_end) <= 0.1 * 16000


def test_flush_ends_a_turn_cut_off_mid_speech(model, utterances_16k):
    audio = np.concatenate([np.zeros(8000, np.int16), utterances_16k[0][: 16000]])
    with model.open_stream() as stream:
        events = stream.push(audio, capture_ms=0)
        assert [e.kind for e in events] == [SpeechEventKind.STARTED]
        assert stream.in_speech
        (ended,) = stream.flush()
    assert ended.kind is SpeechEventKind.ENDED and ended.end_sample == len(audio)
    assert ended.start_sample == events[0].start_sample
    assert not stream.in_speech


def test_batched_streams_give_the_same_events_as_one_by_one(model, utterances_16k):
    scenes = [compose(utterances_16k[i:], GAPS_S[i:], 16000, noise_dbfs=-50, seed=i) for i in range(3)]
    streams = [model.open_stream() for _ in scenes]
    batched: list[list[SpeechEvent]] = [[] for _ in scenes]
    longest = max(len(s.audio) for s in scenes)
    for offset in range(0, longest, 640):
        chunks = [(stream, scene.audio[offset : offset + 640], offset / 16) for stream, scene in zip(streams, scenes)]
        for i, events in enumerate(model.push_batch(chunks)):
            batched[i] += events
    for i, stream in enumerate(streams):
        batched[i] += stream.flush()
        stream.close()
    for scene, events in zip(scenes, batched):
        assert events == run(model, scene.audio, chunk_ms=40)
        assert len(segments_ms(events)) == len(scene.truth)


def test_odd_byte_count_is_rejected(model):
    with model.open_stream() as stream, pytest.raises(ValueError, match="even number of bytes"):
        stream.push(b"\x00" * 641)


@pytest.mark.parametrize("rate", [44100, 48000, 22050, 0])
def test_unsupported_sample_rate_names_the_accepted_ones(model, rate):
    with pytest.raises(ValueError, match=r"\(16000, 8000\)"):
        model.open_stream(rate)


def test_non_pcm16_arrays_are_rejected(model):
    with model.open_stream() as stream:
        with pytest.raises(ValueError, match="int16"):
            stream.push(np.zeros(512, dtype=np.float32))
        with pytest.raises(ValueError, match="int16"):
            stream.push(np.zeros((2, 512), dtype=np.int16))


@pytest.mark.parametrize(
    ("field", "value"),
    [("threshold", 1.2), ("threshold", 0.0), ("neg_threshold", 0.8), ("min_speech_ms", -1),
     ("min_silence_ms", 50), ("min_silence_ms", 60_000), ("speech_pad_ms", 300)],
)
def test_out_of_range_settings_say_the_valid_range(field, value):
    with pytest.raises(ValueError, match=rf"{field} must be in \[.*\], got {value}"):
        VadSettings(**{field: value})


def test_a_closed_stream_frees_its_state_and_refuses_audio(model):
    stream = model.open_stream()
    stream.push(np.zeros(1000, np.int16))
    stream.close()
    assert stream._state is None and stream._buffer is None
    with pytest.raises(RuntimeError, match="closed"):
        stream.push(np.zeros(512, np.int16))


def test_the_model_file_is_the_pinned_silero_release():
    assert hashlib.sha256(default_model_path().read_bytes()).hexdigest() == MODEL_SHA256


def test_probabilities_on_request_follow_the_speech(model, utterances_16k):
    scene = compose(utterances_16k[:1], [1.0, 1.0], 16000)
    with model.open_stream(emit_probabilities=True) as stream:
        events = stream.push(scene.audio)
    probs = [e for e in events if e.kind is SpeechEventKind.PROBABILITY]
    assert len(probs) == len(scene.audio) // 512
    assert [e.start_sample for e in probs] == list(range(0, len(probs) * 512, 512))
    true_start, true_end = scene.truth[0]
    inside = [e.probability for e in probs if true_start + 3200 <= e.start_sample and e.end_sample <= true_end - 3200]
    outside = [e.probability for e in probs if e.end_sample < true_start or e.start_sample > true_end + 3200]
    assert np.median(inside) > 0.9 and max(outside) < 0.2
    # Edges are still reported, in order with the probabilities.
    edges = [e.kind for e in events if e.kind is not SpeechEventKind.PROBABILITY]
    assert edges == [SpeechEventKind.STARTED, SpeechEventKind.ENDED]
