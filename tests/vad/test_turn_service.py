"""The semantic end of turn over real gRPC: a client's end of speech asks the verdict, a held turn is reported and
its continuation ends it once; an answer playing gates barge-ins, and the metrics count each decision."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import grpc
import numpy as np
import pytest

from services.vad.engine import VadSettings
from services.vad.server import VadServicer
from sotto.v1 import vad_pb2, vad_pb2_grpc
from tests.helpers import metric

from .speech import silence

pytestmark = pytest.mark.timeout(120)
Kind = vad_pb2.VadEvent


@pytest.fixture
async def stub(model, turn_model):
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vad-test")
    servicer = VadServicer(VadSettings(), max_streams=3, executor=executor, model=model, turn_model=turn_model)
    server = grpc.aio.server()
    vad_pb2_grpc.add_VadServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield vad_pb2_grpc.VadServiceStub(channel)
    await server.stop(None)
    executor.shutdown(wait=True)


async def rest_of(call) -> list:
    """The events left once the client is done writing (read, not iterated: the two may not be mixed)."""
    events = []
    while (event := await call.read()) is not grpc.aio.EOF:
        events.append(event)
    return events


async def answer(call) -> tuple[list, object]:
    """The events up to the stream's answer to an end of speech (held or ended, whichever it is), and that answer:
    a verdict other than the one a test expects fails its assertion instead of waiting for the call's deadline."""
    before = []
    while (event := await call.read()) is not grpc.aio.EOF and event.kind not in (Kind.TURN_HELD, Kind.SPEECH_ENDED):
        before.append(event.kind)
    return before, event


def audio(pcm: np.ndarray, sequence: int, **fields) -> vad_pb2.VadRequest:
    return vad_pb2.VadRequest(audio=vad_pb2.AudioChunk(pcm16=pcm.tobytes(), sample_rate=16000, sequence=sequence),
                              **fields)


async def test_a_clients_end_of_speech_is_held_and_the_continuation_ends_it_once(stub, turn_clips):
    """What the page does: send speech plus a short redemption, then audio.end; held, it sends the rest, and keeps
    streaming while the turn stays held. The turn ends once, over both parts: by the model's verdict, or (the model
    judges espeak's continuation differently on different CPUs) at the held turn's silence limit."""
    verdicts_before = {o: metric("sotto_vad_turn_verdicts_total", outcome=o) for o in ("incomplete", "complete",
                                                                                       "timeout")}
    first = np.concatenate([silence(0.3), turn_clips["filler"], silence(0.1)])
    rest = np.concatenate([silence(0.5), turn_clips["rest"], silence(0.1)])
    call = stub.StreamAudio(timeout=30)
    await call.write(vad_pb2.VadRequest(settings=vad_pb2.VadSettings(turn_silence_ms=300)))
    await call.write(audio(first, 0))
    await call.write(vad_pb2.VadRequest(end_of_speech=True, ask_verdict=True))
    kinds, event = await answer(call)
    assert kinds == [Kind.SPEECH_STARTED] and event is not grpc.aio.EOF
    assert event.kind == Kind.TURN_HELD and 0 < event.turn_probability < 0.5, f"the filler was judged {event}"
    await call.write(audio(rest, 1))
    await call.write(vad_pb2.VadRequest(end_of_speech=True, ask_verdict=True))
    kinds, event = await answer(call)
    for sequence in range(2, 5):  # held again: the page streams on, and the held turn's silence limit ends it
        if event is grpc.aio.EOF or event.kind != Kind.TURN_HELD:
            break
        await call.write(audio(silence(VadSettings().max_turn_silence_ms / 1000 + 0.2), sequence))
        kinds, event = await answer(call)
    assert kinds == [] and event is not grpc.aio.EOF and event.kind == Kind.SPEECH_ENDED, f"the turn ended as {event}"
    assert event.end_sample > len(first) + len(rest) - 0.3 * 16000  # one utterance, both parts
    await call.done_writing()
    assert await rest_of(call) == []
    after = {o: metric("sotto_vad_turn_verdicts_total", outcome=o) for o in verdicts_before}
    assert after["incomplete"] > verdicts_before["incomplete"]
    assert after["complete"] + after["timeout"] == verdicts_before["complete"] + verdicts_before["timeout"] + 1
    if event.turn_probability > 0.5:
        assert after["complete"] == verdicts_before["complete"] + 1


async def test_silence_only_clients_and_old_clients_end_on_their_end_of_speech(stub, turn_clips):
    call = stub.StreamAudio(timeout=30)
    await call.write(vad_pb2.VadRequest(settings=vad_pb2.VadSettings()))
    await call.write(audio(np.concatenate([silence(0.3), turn_clips["filler"]]), 0))
    await call.write(vad_pb2.VadRequest(end_of_speech=True))  # no ask_verdict: ended at once, as before
    await call.done_writing()
    assert [e.kind for e in await rest_of(call)] == [Kind.SPEECH_STARTED, Kind.SPEECH_ENDED]


async def test_an_answer_playing_gates_a_quiet_barge_in_and_counts_it(stub, turn_clips):
    """Speech that would start a turn at the normal threshold but never reaches the barge-in threshold is held back
    while the answer plays; the same speech starts a turn once it has stopped."""
    quiet = np.concatenate([silence(0.3), turn_clips["complete"], silence(0.8)])
    suppressed = metric("sotto_vad_barge_ins_suppressed_total")
    call = stub.StreamAudio(timeout=30)
    await call.write(vad_pb2.VadRequest(settings=vad_pb2.VadSettings(barge_in_threshold=0.98,
                                                                      barge_in_min_speech_ms=5000)))
    await call.write(audio(quiet, 0, answer_playing=True))
    await call.write(audio(quiet, 1, answer_playing=False))
    await call.done_writing()
    kinds = [e.kind for e in await rest_of(call)]
    assert kinds == [Kind.SPEECH_STARTED, Kind.SPEECH_ENDED]
    assert metric("sotto_vad_barge_ins_suppressed_total") == suppressed + 1



class FixedTurnModel:
    """A turn model that answers at once with one probability: which verdict ended the turn is then known."""

    def __init__(self, probability: float):
        self.probability, self.calls = probability, 0

    def completeness(self, audio: np.ndarray) -> float:
        self.calls += 1
        return self.probability


@pytest.fixture
async def fixed_stub(model):
    """A service whose turn model says what the test sets (``servicer.turn_model.probability``)."""
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="vad-test")
    servicer = VadServicer(VadSettings(), max_streams=3, executor=executor, model=model,
                           turn_model=FixedTurnModel(0.5))
    server = grpc.aio.server()
    vad_pb2_grpc.add_VadServiceServicer_to_server(servicer, server)
    port = server.add_insecure_port("127.0.0.1:0")
    await server.start()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        yield vad_pb2_grpc.VadServiceStub(channel), servicer.turn_model
    await server.stop(None)
    executor.shutdown(wait=True)


async def test_the_service_judges_a_pause_as_it_begins_and_looks_again_at_an_incomplete_one(fixed_stub, turn_clips):
    """Streamed in 20 ms chunks at the pace of speech, as a microphone would: the pause is judged by a guess taken as
    it began, on the inference thread. A guess of complete ends the turn without a second inference; a guess of
    incomplete is followed by the model's own look at the turn silence, which holds the turn."""
    stub, turn_model = fixed_stub
    for probability, outcome, kind in ((0.93, "complete", Kind.SPEECH_ENDED), (0.07, "incomplete", Kind.TURN_HELD)):
        turn_model.probability, turn_model.calls = probability, 0
        before = {o: metric("sotto_vad_turn_guesses_total", outcome=o) for o in (outcome, "dropped")}
        pcm = np.concatenate([silence(0.3), turn_clips["complete"], silence(0.6)])
        call = stub.StreamAudio(timeout=30)
        await call.write(vad_pb2.VadRequest(settings=vad_pb2.VadSettings()))
        for sequence, offset in enumerate(range(0, len(pcm), 320)):
            await call.write(audio(pcm[offset: offset + 320], sequence))
            await asyncio.sleep(0.02)  # at the pace of speech: the guess runs while the audio goes on
        await call.done_writing()
        events = await rest_of(call)
        verdicts = [e for e in events if e.kind in (Kind.SPEECH_ENDED, Kind.TURN_HELD)]
        assert verdicts and verdicts[0].kind == kind, f"{outcome}: {events}"  # (a held turn ends with the stream)
        assert verdicts[0].turn_probability == pytest.approx(probability)
        guesses = {o: metric("sotto_vad_turn_guesses_total", outcome=o) - before[o] for o in before}
        assert guesses[outcome] >= 1
        # complete: one inference a guess, none at the turn silence; incomplete: one more look for the held pause.
        assert turn_model.calls == guesses[outcome] + guesses["dropped"] + (outcome == "incomplete")
