"""The semantic end of turn and the barge-in gate through the gateway, against a scripted vad: a held turn is told
to the client, whose continuation is the same utterance; old clients are not held; the vad hears when an answer
plays."""

from __future__ import annotations

import numpy as np

from services.common.audio import read_wav
from tests.gateway.conftest import silence, speech
from tests.helpers import eventually

TS0 = 1_000_000.0


async def test_a_held_turn_is_told_and_its_continuation_is_the_same_utterance(stack, connect) -> None:
    stack.vad.holds = 1
    client = await connect(start=False)
    await client.send(type="session.start", protocol=1, sample_rate=16000, client_vad=True, turn_hold=True)
    ready = await client.wait_for("session.ready")
    assert ready["turn"]["semantic"] is True and ready["turn"]["max_silence_ms"] == 1500
    await client.send_audio(speech(0.6), ts0=TS0)
    await client.send(type="audio.end")
    hold = await client.wait_for("turn.hold")
    assert hold["max_silence_ms"] == 1500 and "turn.started" not in client.types()
    await client.send_audio(np.concatenate([speech(0.5), silence(0.4)]), ts0=TS0 + 600)
    await client.wait_for("turn.done")
    assert stack.vad.ends == [True]
    assert client.types().count("speech.ended") == 1 and client.types().count("turn.started") == 1
    # both parts (1.1 s of speech), one utterance
    assert read_wav(stack.llm.requests[0].user.audio_wav).duration_s >= 1.05


async def test_a_client_that_does_not_say_turn_hold_is_never_held(stack, connect) -> None:
    stack.vad.holds = 1
    client = await connect(start=False)
    await client.send(type="session.start", protocol=1, sample_rate=16000, client_vad=True)
    await client.wait_for("session.ready")
    await client.send_audio(speech(0.6), ts0=TS0)
    await client.send(type="audio.end")
    await eventually(lambda: stack.vad.ends, 5.0, "the end of speech to reach the vad")
    assert stack.vad.ends == [False] and stack.vad.holds == 1
    await client.flush()
    assert "turn.hold" not in client.types()


async def test_the_vad_hears_while_an_answer_plays_and_when_it_is_cut(stack, connect) -> None:
    stack.tts.stall_after_chunks = 1  # the answer goes on playing until it is interrupted
    client = await connect()
    await client.send_audio(silence(0.2), ts0=TS0)
    await client.send(type="text", text="Talk to me")
    start = await client.wait_for("audio.start")
    await client.send_audio(silence(0.3), ts0=TS0 + 200)
    await eventually(lambda: stack.vad.playing == [True], 5.0, "the vad to be told the answer plays")
    await client.send(type="interrupt", turn_id=start["turn_id"], played_samples=100)
    await client.wait_for("turn.done")
    await client.send_audio(silence(0.3), ts0=TS0 + 500)
    await eventually(lambda: stack.vad.playing == [True, False], 5.0, "the vad to be told the answer stopped")
