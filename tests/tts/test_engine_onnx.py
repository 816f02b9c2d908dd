"""The ONNX engine on the offline kit's real model: speech, chunks, spans, cancel, bad input."""

from __future__ import annotations

import threading

import pytest

from services.tts.engine import SAMPLE_RATE, CancelEvent, InvalidInput
from services.tts.kokoro_base import CHUNK_SAMPLES
from services.tts.text import SentenceSplitter
from tests.tts.speech import plausible_duration

VOICE = "jf_alpha"  # no English voice exists offline: English text, Japanese voice, lang en-us


def test_a_sentence_is_speech_of_plausible_length(onnx_engine, vad):
    text = "The quick brown fox jumps over the lazy dog near the quiet river bank."
    chunks = list(onnx_engine.synthesize(text, VOICE, lang="en-us"))
    report = vad.report(b"".join(c.pcm for c in chunks), SAMPLE_RATE)
    assert report.speech_fraction >= 0.7, report
    assert plausible_duration(text, report.duration_s), report


def test_chunks_are_2048_samples_except_each_sentences_last(onnx_engine):
    text = "First sentence is here. The second one is a bit longer. Third!"
    chunks = list(onnx_engine.synthesize(text, VOICE))
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
        span = text[sentence_chunks[0].text_start:sentence_chunks[0].text_end]
        assert span == ["First sentence is here.", "The second one is a bit longer.",
                        "Third!"][index]


def test_sentences_are_spoken_as_they_stream_in(onnx_engine):
    """Sentences from a blocking source (text still arriving) are voiced one by one."""
    splitter = SentenceSplitter()

    def sentences():
        for piece in ["Hello there", ". How", " are you", " today?", " Fine"]:
            yield from splitter.push(piece)
        yield from splitter.close()

    seen = [(c.sentence_index, c.text_start, c.text_end) for c in onnx_engine.synthesize_sentences(
        sentences(), VOICE) if c.last_in_sentence]
    assert seen == [(0, 0, 12), (1, 13, 31), (2, 32, 36)]


def test_cancel_mid_run_stops_within_a_chunk(onnx_engine, onnx_runs, monkeypatch):
    """A cancel set while the model runs aborts that run: no audio, and no waiting for the sentence to render."""
    text = ("This is a rather long sentence that keeps going without any pause at all, so that the model "
            "has a great deal of work to do in one single run of the network before any audio exists.")
    monkeypatch.setattr(onnx_engine, "first_max_chars", 0)  # one long run, no short first clause before it
    monkeypatch.setattr(onnx_engine, "first_unit_words", 0)
    cancel = CancelEvent()
    canceller = threading.Thread(target=lambda: onnx_runs.started.wait(60) and cancel.set())
    canceller.start()
    chunks = list(onnx_engine.synthesize(text, VOICE, cancel=cancel))
    canceller.join()
    assert chunks == []
    assert onnx_runs.outcomes == ["aborted"]


def test_cancel_between_chunks_yields_no_more(onnx_engine):
    cancel = CancelEvent()
    stream = onnx_engine.synthesize("One sentence here. And another sentence after it.", VOICE, cancel=cancel)
    first = next(stream)
    cancel.set()
    assert list(stream) == []
    assert first.samples == CHUNK_SAMPLES
    # the engine is free again at once
    assert next(onnx_engine.synthesize("Ready.", VOICE)).samples > 0


def test_voices(onnx_engine):
    assert onnx_engine.voices() == ["jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(text="Hi.", voice="af_nobody"), "available voices: jf_alpha"),
    (dict(text="   "), "text is empty"),
    (dict(text="x" * 5000), "the limit is 4000"),
    (dict(text="Hi.", speed=3.0), "use 0.5 to 2.0"),
    (dict(text="Hi.", lang="xx"), "use one of en-us, en-gb"),
    (dict(text="🎉 **"), "nothing to speak"),
])
def test_bad_input_is_refused_with_what_is_accepted(onnx_engine, kwargs, message):
    kwargs.setdefault("voice", VOICE)
    with pytest.raises(InvalidInput, match=message):
        onnx_engine.synthesize(**kwargs)


def test_cancel_event_calls_back_on_set_only_inside_the_block():
    calls = []
    cancel = CancelEvent()
    with cancel.calling(lambda: calls.append("inside")):
        cancel.set()
    assert calls == ["inside"]
    with cancel.calling(lambda: calls.append("already set")):
        pass
    assert calls == ["inside", "already set"]
    later = CancelEvent()
    with later.calling(lambda: calls.append("never")):
        pass
    later.set()
    assert calls == ["inside", "already set"]

