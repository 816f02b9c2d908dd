"""The turn pipeline against fake peers: order of events, media reaching the llm, barge-in, busy, failures."""

from __future__ import annotations

import asyncio
import io

import grpc
import numpy as np
from PIL import Image

from services.common.audio import read_wav
from services.gateway.protocol import HEADER, FrameKind, pack_frame
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
    stack.llm.after_done_s = 1.5
    client = await connect()
    await client.send(type="text", text="Hi!")
    started = await client.wait_for("audio.start")
    done = await client.wait_for("turn.done")
    assert done["text"] == "Hello there"
    # audio began while the llm call was still open after its `done`, not 1.5 s later when it closed
    assert done["timings"]["first_audio_ms"] < done["timings"]["total_ms"] - 1000, (started, done["timings"])


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
    stack.tts.chunk_delay_s = 0.02
    client = await connect()
    await client.send(type="text", text="Tell me a story.")
    start = await client.wait_for("audio.start")
    await asyncio.sleep(0.3)
    t_interrupt = asyncio.get_running_loop().time()
    await client.send(type="interrupt", turn_id=start["turn_id"], played_samples=2048 * 10)
    done = await client.wait_for("turn.done")
    await asyncio.sleep(0.3)
    late = [t for t, _ in client.frames if t > t_interrupt + 0.1]
    assert not late, f"{len(late)} audio frames arrived more than 100 ms after the interrupt"
    assert done["interrupted"] and done["finish_reason"] == "interrupted"
    assert await eventually(lambda: stack.tts.cancelled, 2.0, "the cancel to reach the tts service") == 1
    assert done["heard_text"] and done["heard_text"] != done["text"]
    assert "Hello" in done["heard_text"] and "How" not in done["heard_text"]
    await client.send(type="text", text="Go on.")
    await client.wait_for("turn.done", count=2)
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


async def test_llm_that_never_answers_times_out_within_the_request_timeout(stack, connect) -> None:
    stack.llm.first_delay_s = 30
    client = await connect()
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    await client.send(type="text", text="Hi")
    err = await client.wait_for("error", timeout=5)
    assert err["code"] == "timeout"
    assert loop.time() - t0 < stack.settings.gateway.request_timeout_ms / 1000 + 0.5
    await asyncio.sleep(0.2)
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
    err = await client.wait_for("error", timeout=5)
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
    err = await client.wait_for("error", timeout=5)
    assert err["code"] == "stalled_input"


async def test_audio_held_behind_a_lost_frame_reaches_the_vad_once_the_jitter_buffer_gives_up(stack, connect) -> None:
    client = await connect()
    await client.send_audio(silence(0.04))
    client.seq += 1  # one frame lost on the way; the loud frames after it wait for it, then go on without it
    await client.send_audio(speech(0.3))
    t0 = asyncio.get_running_loop().time()
    await client.wait_for("speech.started", timeout=5)
    assert asyncio.get_running_loop().time() - t0 >= stack.settings.gateway.jitter_ms / 1000 - 0.05


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


async def test_speech_over_the_answer_stops_it_without_an_interrupt_message(stack, connect) -> None:
    stack.tts.chunks_per_sentence = 40
    stack.tts.chunk_delay_s = 0.02
    client = await connect()
    await client.send(type="text", text="Tell me a story.")
    await client.wait_for("audio.start")
    await client.send_audio(speech(0.3))  # the server VAD hears the user: barge-in
    started = await client.wait_for("speech.started")
    loop = asyncio.get_running_loop()
    heard_at = loop.time()
    done = await client.wait_for("turn.done")
    await asyncio.sleep(0.3)
    assert started and done["interrupted"] and done["finish_reason"] == "interrupted"
    assert not [t for t, _ in client.frames if t > heard_at + 0.1]
    assert await eventually(lambda: stack.tts.cancelled, 2.0, "the cancel to reach the tts service") == 1


async def test_while_a_turn_thinks_the_microphone_reaches_the_vad_in_fewer_messages(stack, connect) -> None:
    """Before the first audio, 1 s of microphone goes to the vad in SOTTO_GATEWAY_VAD_BATCH_MS (160 ms) pieces,
    not 31 windows; none of it is lost, and speech in that time still starts an utterance."""
    stack.llm.first_delay_s = 3.0
    client = await connect()
    await client.send_audio(np.concatenate([speech(0.5), silence(0.6)]))
    await client.wait_for("turn.started")
    await asyncio.sleep(0.5)  # the vad has taken what was sent before the turn began
    before = len(stack.vad.chunk_samples)
    await client.send_audio(silence(1.0))
    await asyncio.sleep(0.5)
    thinking = stack.vad.chunk_samples[before:]
    assert len(thinking) <= 7 and all(n >= 5 * 512 for n in thinking), thinking
    assert sum(thinking) >= 16000 - 5 * 512, "audio held back beyond one batch"
    await client.send_audio(speech(0.5))
    await client.wait_for("speech.started", count=2, timeout=5)


async def test_once_the_answer_plays_the_vad_gets_every_window_again(stack, connect) -> None:
    """Speech over a playing answer must be heard at once (barge-in), so no batching then."""
    stack.tts.chunk_delay_s = 0.5
    client = await connect()
    await client.send(type="text", text="Talk to me")
    await client.wait_for("audio.start")
    before = len(stack.vad.chunk_samples)
    await client.send_audio(silence(1.0))
    await asyncio.sleep(0.3)
    assert not [e for e in client.events if e["type"] == "turn.done"], "the answer ended before the check"
    assert len(stack.vad.chunk_samples[before:]) >= 25


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
    await client.send_audio(speech(0.5))
    await asyncio.sleep(0.3)
    assert len([e for e in client.events if e["type"] == "error"]) == 1, "one error per outage, not per frame"
    await client.send(type="text", text="Typed still works")
    assert (await client.wait_for("turn.done"))["finish_reason"] == "stop"
