"""The asr service over real gRPC with the real offline Whisper: the words come back, bad audio is refused."""

from __future__ import annotations

import re

import grpc
import pytest

from services.asr.client import stream_utterance
from services.asr.streaming import UtteranceRecognizer
from services.common.audio import wav_bytes
from sotto.v1 import asr_pb2
from tests.helpers import eventually

pytestmark = pytest.mark.timeout(180)
QUESTION = "What is the capital of France?"


def words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]+", " ", text.lower()).split()


async def test_a_whole_clip_comes_back_as_its_words(asr, spoken):
    stub, _ = asr
    reply = await stub.Transcribe(asr_pb2.TranscribeRequest(wav=wav_bytes(spoken(QUESTION), 16000)), timeout=60)
    assert words(reply.text) == words(QUESTION)
    assert reply.audio_ms > 1500 and reply.recognition_ms > 0


async def test_an_utterance_streamed_as_spoken_gets_its_words(asr, spoken):
    """Paced like a microphone; how many background runs fit in depends on the machine's load, so only what holds
    whatever it is: one final answer, the right words, and stable prefixes that only grow."""
    stub, servicer = asr
    sentence = "I would like to know what the weather will be like in Paris."
    events = [e async for e in stream_utterance(stub, spoken(sentence), realtime=True, partials=True, timeout=60)]
    stable = [e.stable for e in events if e.HasField("stable")]
    assert [e.HasField("final") for e in events] == [False] * len(stable) + [True]
    final = events[-1].final
    assert words(final.text) == words(sentence)
    for earlier, later in zip(stable, stable[1:] + [final.text]):
        assert later.startswith(earlier)  # a stable prefix only grows, and the words begin with it
    await eventually(lambda: servicer.active_streams == 0, 5, "the stream to be freed")


def test_words_two_runs_agree_on_become_stable_and_begin_the_final_words(engine, spoken):
    """No clock: 20 ms chunks, each partial run done at once when due (every 0.7 s of new audio, and at pauses)."""
    sentence = "I would like to know what the weather will be like in Paris."
    utterance = UtteranceRecognizer(engine, language="en", interval_s=0.7)
    pcm, stable = spoken(sentence), []
    for offset in range(0, len(pcm), 640):
        utterance.add(pcm[offset: offset + 640])
        if utterance.partial_due() and utterance.recognise_partial(*utterance.start_partial()):
            stable.append(utterance.stable_text)
    final = utterance.recognise_final()
    assert utterance.partial_runs >= 3 and len(stable) >= 2, stable
    for earlier, later in zip(stable, stable[1:] + [final.text]):
        assert later.startswith(earlier)
    assert words(final.text) == words(sentence) and final.stable_chars >= len(stable[-1])


async def test_audio_after_the_utterance_is_ignored(asr, spoken):
    stub, _ = asr
    pcm = spoken("Good morning.")
    tail = spoken("Turn off the lights.")

    async def requests():
        yield asr_pb2.AsrRequest(settings=asr_pb2.AsrSettings())
        yield asr_pb2.AsrRequest(pcm16=pcm + tail)
        yield asr_pb2.AsrRequest(end=True, utterance_samples=len(pcm) // 2)

    events = [e async for e in stub.StreamTranscribe(requests(), timeout=60)]
    assert words(events[-1].final.text) == ["good", "morning"]


@pytest.mark.parametrize("request_, accepted", [
    (asr_pb2.TranscribeRequest(), "send a WAV file"),
    (asr_pb2.TranscribeRequest(wav=b"RIFF1234WAVEfmt "), "PCM16 WAV at 16000 Hz"),
    (asr_pb2.TranscribeRequest(wav=wav_bytes(b"\0\0" * 8000, 8000)), "convert with `sox"),
    (asr_pb2.TranscribeRequest(pcm16=b"\0\0" * 100, sample_rate=44100), "sample_rate must be 16000"),
    (asr_pb2.TranscribeRequest(pcm16=b"\0\0\0", sample_rate=16000), "even number of bytes"),
    (asr_pb2.TranscribeRequest(pcm16=b"\0\0" * 16000 * 31, sample_rate=16000), "30 s limit (SOTTO_ASR_MAX_AUDIO_S)"),
    (asr_pb2.TranscribeRequest(pcm16=b"\0\0" * 1600, sample_rate=16000, language="fr"), "English-only"),
])
async def test_bad_clips_are_refused_saying_what_is_accepted(asr, request_, accepted):
    stub, _ = asr
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await stub.Transcribe(request_, timeout=30)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert accepted in caught.value.details()


async def _stream(stub, *requests):
    async def gen():
        for request in requests:
            yield request

    return [e async for e in stub.StreamTranscribe(gen(), timeout=30)]


@pytest.mark.parametrize("requests, accepted", [
    ([asr_pb2.AsrRequest(pcm16=b"\0\0")], "first message must carry settings"),
    ([asr_pb2.AsrRequest(settings=asr_pb2.AsrSettings(sample_rate=8000))], "sample_rate must be 16000"),
    ([asr_pb2.AsrRequest(settings=asr_pb2.AsrSettings()), asr_pb2.AsrRequest(end=True)], "no audio before `end`"),
    ([asr_pb2.AsrRequest(settings=asr_pb2.AsrSettings()), asr_pb2.AsrRequest(pcm16=b"\0")], "even number of bytes"),
    ([asr_pb2.AsrRequest(settings=asr_pb2.AsrSettings()), asr_pb2.AsrRequest(pcm16=b"\0\0")],
     "ended before a message with `end`"),
])
async def test_bad_streams_are_refused_saying_what_is_accepted(asr, requests, accepted):
    stub, servicer = asr
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await _stream(stub, *requests)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert accepted in caught.value.details()
    await eventually(lambda: servicer.active_streams == 0, 5, "the refused stream to be freed")


def test_a_hypothesis_made_in_the_pause_after_the_speech_is_the_answer(engine, spoken):
    """No clock: the audio is pushed in 20 ms chunks and each partial run is done at once when due."""
    utterance = UtteranceRecognizer(engine, language="en", interval_s=4.0)
    pcm = spoken(QUESTION)
    for offset in range(0, len(pcm), 640):
        utterance.add(pcm[offset: offset + 640])
        if utterance.partial_due():
            utterance.recognise_partial(*utterance.start_partial())
    assert utterance.partial_runs == 1  # in the pause after the question, not during it
    final = utterance.recognise_final()
    assert final.covered and final.recognition_s == 0 and words(final.text) == words(QUESTION)
