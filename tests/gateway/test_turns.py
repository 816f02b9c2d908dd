"""The turn pipeline against fake peers: order of events, media reaching the llm, barge-in, busy, failures."""

from __future__ import annotations

import asyncio
import io

import grpc
import numpy as np
import pytest
from PIL import Image

from services.common.audio import read_wav
from services.gateway.wires.protocol import HEADER, FrameKind, pack_frame
from sotto.v1 import vad_pb2_grpc
from tests.gateway.conftest import silence, speech
from tests.gateway.fakes import FakeVad, start_fake
from tests.helpers import eventually


def jpeg(color: tuple[int, int, int], size: tuple[int, int] = (64, 48)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, "JPEG")
    return buf.getvalue()


async def test_typed_turn_streams_text_then_audio_in_order(stack, connect) -> None:
    stack.llm.first_delay_s = 0.005  # the fake reports 1.0 ms as its engine's time: it must take at least that
    client = await connect()
    await client.send(type="text", text="Hi!")
    done = await client.wait_for("turn.done")
    types = [t for t in client.types() if t not in ("health",)]
    assert types[:3] == ["session.ready", "turn.started", "text.delta"]
    assert types.index("audio.start") < types.index("audio.done") < types.index("turn.done")
    assert done["text"] == "Hello there. How are you?" and done["finish_reason"] == "stop"
    timings = done["timings"]
    assert timings["ttfa_ms"] > 0 and timings["llm_queue_ms"] == 0.5
    # the llm's own first-token time is passed on beside the gateway's, which also holds the hops
    assert timings["llm_engine_first_token_ms"] == 1.0 < stack.llm.first_delay_s * 1000 <= timings["first_token_ms"]
    kinds = {HEADER.unpack_from(f)[0] for _, f in client.frames}
    assert kinds == {FrameKind.AUDIO_OUT} and len(client.frames) == 4
    assert stack.llm.requests[0].user.text == "Hi!"


async def test_the_last_sentence_is_spoken_once_the_reply_is_complete_not_when_the_call_closes(stack, connect) -> None:
    stack.llm.deltas = ["Hello", " there"]  # no final punctuation: the sentence ends with the reply
    stack.llm.open_after_done = asyncio.Event()
    client = await connect()
    await client.send(type="text", text="Hi!")
    await client.wait_for("audio.start")  # while the llm call is still open after its `done`
    stack.llm.open_after_done.set()
    done = await client.wait_for("turn.done")
    assert done["text"] == "Hello there"


async def test_spoken_turn_sends_the_utterance_and_keyframes(stack, connect) -> None:
    client = await connect()
    ts0 = 5_000_000.0
    for i, color in enumerate([(200, 0, 0), (200, 0, 0), (0, 0, 200)]):  # two identical, one different
        await client.ws.send_bytes(pack_frame(FrameKind.JPEG, i, ts0 + 100 + i * 500, jpeg(color)))
    await client.send_audio(np.concatenate([silence(0.3), speech(1.2), silence(0.5)]), ts0=ts0)
    await client.wait_for("turn.done")
    types = client.types()
    assert types.index("speech.started") < types.index("speech.ended") < types.index("turn.started")
    request = stack.llm.requests[0]
    wav = read_wav(request.user.audio_wav)
    assert wav.sample_rate == 16000 and 1.2 <= wav.duration_s <= 1.6  # the speech plus pre-roll
    assert len(request.user.images) == 2  # near-identical frames dropped, never every frame


async def test_history_is_kept_across_turns(stack, connect) -> None:
    client = await connect()
    await client.send(type="text", text="First.")
    await client.wait_for("turn.done")
    await client.send(type="text", text="Second.")
    await client.wait_for("turn.done", count=2)
    history = stack.llm.requests[1].history
    assert [h.text for h in history] == ["First.", "Hello there. How are you?"]


async def test_barge_in_stops_audio_cancels_calls_and_keeps_only_what_was_heard(stack, connect) -> None:
    stack.tts.chunks_per_sentence = 40
    stack.tts.stall_after_chunks = 30  # inside the first sentence, so what was heard is known exactly
    client = await connect()
    await client.send(type="text", text="Tell me a story.")
    start = await client.wait_for("audio.start")
    await eventually(lambda: len(client.frames) == 30, 10.0, "the audio before the stall")
    await client.send(type="interrupt", turn_id=start["turn_id"], played_samples=2048 * 20)
    done = await client.wait_for("turn.done")
    assert done["interrupted"] and done["finish_reason"] == "interrupted"
    assert await eventually(lambda: stack.tts.cancelled, 2.0, "the cancel to reach the tts service") == 1
    await client.flush()
    assert client.audio_after("turn.done") == 0, "audio of the cut turn was sent after it ended"
    assert done["heard_text"] and done["heard_text"] != done["text"]
    assert "Hello" in done["heard_text"] and "How" not in done["heard_text"]
    stack.tts.stall_after_chunks = None
    await client.send(type="text", text="Go on.")
    assert (await client.wait_for("turn.done", count=2))["finish_reason"] == "stop"
    assert stack.llm.requests[1].history[-1].text == done["heard_text"]
    assert stack.llm.requests[1].history[-1].interrupted


async def test_busy_llm_gives_busy_and_the_session_goes_on(stack, connect) -> None:
    stack.llm.fail_with = grpc.StatusCode.RESOURCE_EXHAUSTED
    client = await connect()
    await client.send(type="text", text="Hi")
    busy = await client.wait_for("busy")
    assert "busy" in busy["message"]
    stack.llm.fail_with = None
    await client.send(type="text", text="Hi again")
    done = await client.wait_for("turn.done", count=2)
    assert done["finish_reason"] == "stop"


async def test_llm_failure_is_an_error_event(stack, connect) -> None:
    stack.llm.fail_with = grpc.StatusCode.UNAVAILABLE
    client = await connect()
    await client.send(type="text", text="Hi")
    err = await client.wait_for("error")
    assert err["code"] == "unavailable" and err["turn_id"]


@pytest.mark.parametrize("stack", [{"answer_wait_ms": 1500}], indirect=True)
async def test_llm_that_never_answers_times_out_within_the_answer_wait(stack, connect) -> None:
    stack.llm.first_delay_s = 30
    client = await connect()
    await client.send(type="text", text="Hi")
    err = await client.wait_for("error")
    # the answer wait fired (the message names it), not the turn's far longer deadline
    timeout_ms = stack.settings.gateway.answer_wait_ms
    assert err["code"] == "timeout" and f"llm service did not answer within {timeout_ms} ms" in err["message"], err
    # the call was cancelled, not abandoned
    assert await eventually(lambda: stack.llm.cancelled, 2.0, "the cancel to reach the llm service") == 1


async def test_a_tts_stream_broken_under_a_write_is_reported_as_unavailable(stack, connect) -> None:
    # grpc.aio hides the real status of a stream whose peer died under a write behind this INTERNAL (grpc#36066);
    # the user must hear "unavailable", as for any service that went away, and a genuine INTERNAL stays internal.
    for details, expected in (("Internal error from Core", "unavailable"), ("engine exploded", "internal")):
        stack.tts.fail_with = (grpc.StatusCode.INTERNAL, details)
        client = await connect()
        await client.send(type="text", text="Hi!")
        err = await client.wait_for("error")
        assert err["code"] == expected, err
        await client.wait_for("turn.done")
        await client.close()


async def test_stalled_utterance_is_dropped_with_an_error(stack, connect) -> None:
    client = await connect()
    await client.send_audio(speech(0.5))
    await client.wait_for("speech.started")
    err = await client.wait_for("error")
    assert err["code"] == "stalled_input"
    await client.send(type="ping")
    await client.wait_for("pong")


async def test_an_utterance_whose_start_is_reported_after_its_audio_stopped_is_still_dropped(stack, connect) -> None:
    # The session's stall watchdog parks while there is nothing to watch; a speech start reported when no more
    # audio is coming must wake it, or the half utterance would stay open for ever.
    stack.vad.start_delay_s = 0.4
    client = await connect()
    await client.send_audio(speech(0.5))
    await client.wait_for("speech.started")
    err = await client.wait_for("error")
    assert err["code"] == "stalled_input"


async def test_audio_held_behind_a_lost_frame_reaches_the_vad_once_the_jitter_buffer_gives_up(stack, connect) -> None:
    client = await connect()
    await client.send_audio(silence(0.04))
    client.seq += 1  # one frame lost on the way; the loud frames after it wait for it, then go on without it
    sent_at = asyncio.get_running_loop().time()  # before the gateway can have received them: a lower bound
    await client.send_audio(speech(0.3))
    await client.wait_for("speech.started")
    assert asyncio.get_running_loop().time() - sent_at >= stack.settings.gateway.jitter_ms / 1000


async def test_a_late_interrupt_cuts_the_history_to_what_was_heard(stack, connect) -> None:
    client = await connect()
    await client.send(type="text", text="Hi")
    done = await client.wait_for("turn.done")
    assert not done["interrupted"]
    await client.send(type="interrupt", turn_id=done["turn_id"], played_samples=2048 * 2)  # heard sentence one
    await client.send(type="text", text="Sorry, go on.")
    await client.wait_for("turn.done", count=2)
    last = stack.llm.requests[1].history[-1]
    assert last.text == "Hello there." and last.interrupted


async def test_audio_out_sequence_numbers_count_up(stack, connect) -> None:
    client = await connect()
    await client.send(type="text", text="Hi")
    await client.wait_for("turn.done")
    seqs = [HEADER.unpack_from(f)[3] for _, f in client.frames]
    assert seqs == list(range(len(seqs)))


# SOTTO_GATEWAY_BACKCHANNEL=false: any speech cuts at once (tests/gateway/test_backchannel_session.py: on)
@pytest.mark.parametrize("stack", [{"backchannel": False}], indirect=True)
async def test_speech_over_the_answer_stops_it_without_an_interrupt_message(stack, connect) -> None:
    stack.tts.chunks_per_sentence = 40
    stack.tts.chunk_delay_s = 0.02
    client = await connect()
    await client.send(type="text", text="Tell me a story.")
    await client.wait_for("audio.start")
    await client.send_audio(speech(0.3))  # the server VAD hears the user: barge-in
    await client.wait_for("speech.started")
    done = await client.wait_for("turn.done")
    assert done["interrupted"] and done["finish_reason"] == "interrupted"
    assert await eventually(lambda: stack.tts.cancelled, 2.0, "the cancel to reach the tts service") == 1
    await client.flush()
    assert client.audio_after("turn.done") == 0, "audio of the cut turn was sent after it ended"


async def test_while_a_turn_thinks_the_microphone_reaches_the_vad_in_fewer_messages(stack, connect) -> None:
    """Before the first audio, 1 s of microphone goes to the vad in SOTTO_GATEWAY_VAD_BATCH_MS pieces (5 windows
    at the default), not 31 windows; none of it is lost, and speech in that time still starts an utterance."""
    stack.llm.first_delay_s = 30.0  # the turn thinks for the whole test
    batch = 5 * 512
    client = await connect()
    spoken = np.concatenate([speech(0.5), silence(0.6)])
    await client.send_audio(spoken)
    await client.wait_for("turn.started")
    await client.send_audio(silence(1.0))  # all of it sent while the turn thinks
    total = len(spoken) + 16000
    await eventually(lambda: sum(stack.vad.chunk_samples) >= total - batch, 10.0,
                     "the vad to take all but at most one batch of the audio")
    assert stack.vad.streams == 1
    ends = np.cumsum(stack.vad.chunk_samples)
    thinking = [n for n, end in zip(stack.vad.chunk_samples, ends) if end > len(spoken)]
    assert len(thinking) <= 7 and all(n >= batch for n in thinking), thinking
    await client.send_audio(speech(0.5))
    await client.wait_for("speech.started", count=2, timeout=5)


async def test_once_the_answer_plays_the_vad_gets_every_window_again(stack, connect) -> None:
    """Speech over a playing answer must be heard at once (barge-in), so no batching then."""
    stack.tts.stall_after_chunks = 1  # the answer goes on playing for the whole test
    client = await connect()
    await client.send(type="text", text="Talk to me")
    await client.wait_for("audio.start")
    before = len(stack.vad.chunk_samples)
    await client.send_audio(silence(1.0))
    await eventually(lambda: sum(stack.vad.chunk_samples[before:]) >= 16000 - 512, 10.0, "the vad to take the audio")
    assert len(stack.vad.chunk_samples[before:]) >= 25  # 31 windows: one message per window, give or take a frame


async def test_speech_right_after_a_vad_restart_is_heard(stack, connect) -> None:
    """The vad is gone when the user starts talking and back a moment later: the utterance waits for it (the
    channel reconnecting) instead of vanishing into streams that fail at once."""
    client = await connect()
    await client.send_audio(silence(0.1))
    address = stack.settings.gateway.vad_addr
    await stack.vad_server.stop(0)
    await client.send_audio(np.concatenate([speech(0.5), silence(0.6)]))
    await asyncio.sleep(0.5)
    restarted, _ = await start_fake(FakeVad(), vad_pb2_grpc.add_VadServiceServicer_to_server, "sotto.v1.VadService",
                                    address)
    try:
        done = await client.wait_for("turn.done", timeout=10)
        assert done["finish_reason"] == "stop"
        assert [e for e in client.events if e["type"] == "speech.started"]
    finally:
        await restarted.stop(0)


async def test_speech_to_a_vad_that_stays_gone_gets_one_clear_error(stack, connect) -> None:
    """No vad to connect to: the audio waits one request timeout for it, then the user is told."""
    client = await connect()
    await client.send_audio(silence(0.1))
    await stack.vad_server.stop(0)
    await client.send_audio(np.concatenate([speech(1.0), silence(1.5)]))
    err = await client.wait_for("error", timeout=10)
    assert err["code"] == "unavailable" and "not reachable for 2 s" in err["message"], err
    await client.send(type="text", text="Typed still works")
    assert (await client.wait_for("turn.done"))["finish_reason"] == "stop"


async def test_speech_while_the_vad_service_is_down_gets_one_clear_error(stack, connect) -> None:
    stack.vad.fail_with = grpc.StatusCode.UNAVAILABLE
    client = await connect()
    await client.send_audio(np.concatenate([speech(0.5), silence(0.5)]))
    err = await client.wait_for("error")
    assert err["code"] == "unavailable" and "speech is not heard" in err["message"], err
    streams = stack.vad.streams
    await client.send_audio(speech(0.5))
    await eventually(lambda: stack.vad.streams > streams, 10.0, "the audio to try the vad again")
    await client.send(type="text", text="Typed still works")
    assert (await client.wait_for("turn.done"))["finish_reason"] == "stop"
    await client.flush()
    assert len([e for e in client.events if e["type"] == "error"]) == 1, "one error per outage, not per frame"
