"""The Piper engine on the installed English voice: speech at 24 kHz, chunks, sentence streaming, cancel, bad input."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from services.tts.engine import SAMPLE_RATE, CancelEvent, InvalidInput
from services.tts.piper import split_runs, to_rate
from services.tts.sentence_engine import CHUNK_SAMPLES
from services.tts.text import split_sentences
from tests.tts.speech import plausible_duration

VOICE = "en_US-joe-medium"


def test_a_sentence_is_speech_of_plausible_length(piper_engine, vad):
    text = "The quick brown fox jumps over the lazy dog near the quiet river bank."
    chunks = list(piper_engine.synthesize(text))
    report = vad.report(b"".join(c.pcm for c in chunks), piper_engine.sample_rate)
    assert report.speech_fraction >= 0.7, report
    assert plausible_duration(text, report.duration_s), report


def test_audio_comes_at_the_rate_the_page_expects_in_2048_sample_chunks(piper_engine):
    text = "First sentence is here. The second one is a bit longer. Third!"
    chunks = list(piper_engine.synthesize(text, VOICE))
    assert piper_engine.sample_rate == SAMPLE_RATE == 24000
    by_sentence: dict[int, list] = {}
    for chunk in chunks:
        by_sentence.setdefault(chunk.sentence_index, []).append(chunk)
    assert sorted(by_sentence) == [0, 1, 2]
    offset = 0
    for index, sentence_chunks in sorted(by_sentence.items()):
        assert all(c.samples == CHUNK_SAMPLES for c in sentence_chunks[:-1])
        assert 0 < sentence_chunks[-1].samples <= CHUNK_SAMPLES
        assert [c.last_in_sentence for c in sentence_chunks] == [False] * (len(sentence_chunks) - 1) + [True]
        for chunk in sentence_chunks:
            assert chunk.sample_offset == offset
            offset += chunk.samples
        assert text[sentence_chunks[0].text_start:sentence_chunks[0].text_end] == [
            "First sentence is here.", "The second one is a bit longer.", "Third!"][index]


def test_resampling_keeps_pitch_and_duration():
    """The voice's 22,050 Hz becomes 24 kHz: a 440 Hz tone stays 440 Hz and one second stays one second."""
    tone = np.sin(2 * np.pi * 440 * np.arange(22050) / 22050).astype(np.float32)
    out = to_rate(tone, 22050, 24000)
    assert len(out) == 24000
    spectrum = np.abs(np.fft.rfft(out * np.hanning(len(out))))
    assert np.argmax(spectrum) * 24000 / len(out) == pytest.approx(440, abs=1)


def test_a_sentence_is_spoken_before_the_next_one_exists(piper_engine):
    """Sentences from a source still being written are voiced one by one: the first sentence's audio is out
    before the engine asks for the second."""
    sentences = split_sentences("Hello there. How are you today?")
    seen: list = []
    chunks_when_second_asked: list[int] = []

    def arriving():
        yield sentences[0]
        chunks_when_second_asked.append(len(seen))
        yield sentences[1]

    for chunk in piper_engine.synthesize_sentences(arriving()):
        seen.append(chunk)
    assert chunks_when_second_asked[0] > 0
    assert seen[chunks_when_second_asked[0] - 1].last_in_sentence and seen[0].sentence_index == 0
    assert seen[-1].sentence_index == 1


def test_cancel_mid_run_aborts_the_model_run(piper_engine, piper_runs, monkeypatch):
    """A cancel set while the model runs aborts that run: no audio, and no waiting for the sentence to render."""
    text = ("This is a rather long sentence that keeps going without any pause at all, so that the model "
            "has a great deal of work to do in one single run of the network before any audio exists.")
    monkeypatch.setattr(piper_engine, "first_max_chars", 0)  # one long run, no short first clause before it
    monkeypatch.setattr(piper_engine, "first_unit_words", 0)
    cancel = CancelEvent()
    canceller = threading.Thread(target=lambda: piper_runs.started.wait(60) and cancel.set())
    canceller.start()
    chunks = list(piper_engine.synthesize(text, cancel=cancel))
    canceller.join()
    assert chunks == []
    assert piper_runs.outcomes == ["aborted"]


def test_cancel_between_chunks_yields_no_more(piper_engine):
    cancel = CancelEvent()
    stream = piper_engine.synthesize("One sentence here. And another sentence after it.", cancel=cancel)
    first = next(stream)
    cancel.set()
    assert list(stream) == []
    assert first.samples == CHUNK_SAMPLES
    assert next(piper_engine.synthesize("Ready.")).samples > 0  # the engine is free again at once


def test_long_sentences_are_cut_into_runs_at_word_boundaries(piper_engine, monkeypatch):
    phonemes = list("ðə kwˈɪk bɹˈaʊn fˈɑːks dʒˈʌmps ˈoʊvɚ ðə lˈeɪzi dˈɑːɡ")
    runs = split_runs(phonemes, 16)
    assert all(len(run) <= 16 for run in runs)
    assert " ".join("".join(run) for run in runs) == "".join(phonemes)  # only spaces between runs are dropped
    assert split_runs(list("abcdefgh"), 3) == [list("abc"), list("def"), list("gh")]  # a word longer than a run
    text = "The quick brown fox jumps over the lazy dog near the quiet river bank and far away."
    whole = sum(c.samples for c in piper_engine.synthesize(text))
    monkeypatch.setattr(piper_engine, "max_phonemes", 24)
    cut = sum(c.samples for c in piper_engine.synthesize(text))
    assert 0.7 * whole < cut < 1.6 * whole  # every word still spoken (VITS varies durations run to run)


def test_voices_and_their_language(piper_engine):
    assert piper_engine.voices() == [VOICE]
    assert piper_engine.default_voice == VOICE and piper_engine.voice_language(VOICE) == "en-us"


@pytest.mark.parametrize("kwargs, message", [
    (dict(text="Hi.", voice="af_heart"), "available voices: en_US-joe-medium"),
    (dict(text="   "), "text is empty; send at least one word"),
    (dict(text="x" * 4001), "the limit is 4000"),
    (dict(text="Hi.", speed=3.0), "use 0.5 to 2.0"),
    (dict(text="Hi.", lang="ja"), "speaks en-us only; ask for language en-us or none"),
    (dict(text="🎉 **"), "nothing to speak"),
])
def test_bad_input_is_refused_with_what_is_accepted(piper_engine, kwargs, message):
    with pytest.raises(InvalidInput, match=message):
        piper_engine.synthesize(**kwargs)


def test_a_language_spelled_either_way_is_the_voices_own(piper_engine):
    assert piper_engine.check(None, 1.0, "en_US") == (VOICE, "en-us")


def _silence_between(chunks, first: int) -> float:
    """Seconds of silence from the last loud sample of unit `first` to the first loud sample after it."""
    def pcm(index):
        return np.frombuffer(b"".join(c.pcm for c in chunks if c.sentence_index == index), np.int16)
    before, after = pcm(first), pcm(first + 1)
    loud_before, loud_after = np.flatnonzero(np.abs(before) > 328), np.flatnonzero(np.abs(after) > 328)
    return (len(before) - 1 - loud_before[-1] + loud_after[0]) / SAMPLE_RATE


def test_a_phrase_cut_after_its_first_words_is_spoken_on_without_a_pause(piper_engine):
    """The first unit ends between two words of one phrase: the listener hears a breath there, not the pause
    that follows a sentence."""
    cut = list(piper_engine.synthesize("The capital of France is a small city on a river."))
    sentences = list(piper_engine.synthesize("The capital of France. It is a small city on a river."))
    assert [c.sentence_text for c in cut if c.last_in_sentence][0] == "The capital of France"
    seam, pause = _silence_between(cut, 0), _silence_between(sentences, 0)
    assert seam <= 0.12 < 0.25 <= pause, (seam, pause)
