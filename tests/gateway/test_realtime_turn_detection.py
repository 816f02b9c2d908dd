"""/v1/realtime's turn_detection mapped onto the session's vad settings (fake peers): what a client leaves unset
comes from the gateway's settings, as on /ws; server_vad is silence alone, semantic_vad the end-of-turn model."""

from __future__ import annotations

import pytest

from services.gateway.links.vad import turn_taking
from tests.gateway.conftest import Stack
from tests.gateway.test_openai_realtime import append, realtime, tone_24k
from tests.helpers import eventually

pytestmark = pytest.mark.timeout(60)


async def stream_settings(stack: Stack, events, update: dict | None = None):
    """The settings of the vad stream that the next speech opens, after an optional turn_detection update."""
    if update is not None:
        await events.conn.session.update(session={"type": "realtime", "audio": {"input": {"turn_detection": update}}})
        await events.wait_for("session.updated")
    streams = len(stack.vad.settings)
    await append(events.conn, tone_24k(0.3))
    return await eventually(lambda: stack.vad.settings[streams] if len(stack.vad.settings) > streams else None,
                            5.0, "a vad stream")


async def test_a_default_session_takes_turns_as_ws_does(stack: Stack) -> None:
    """The gateway's end-of-turn model, hold limits and barge-in gate, not the vad process's own defaults."""
    async with realtime(stack) as events:
        created = events.all[0]
        sent = await stream_settings(stack, events)
    assert sent == turn_taking(stack.settings.vad)
    assert not sent.silence_only and sent.turn_silence_ms and sent.max_turn_silence_ms and sent.barge_in_threshold
    detection = created.session.audio.input.turn_detection
    assert detection.type == "semantic_vad" and detection.eagerness == "auto"


async def test_server_vad_is_silence_alone_and_keeps_the_gateways_other_settings(stack: Stack) -> None:
    gateway = turn_taking(stack.settings.vad)
    async with realtime(stack) as events:
        sent = await stream_settings(stack, events, {"type": "server_vad", "threshold": 0.6,
                                                     "silence_duration_ms": 700})
        shown = (await events.wait_for("session.updated")).session.audio.input.turn_detection
    assert sent.silence_only and sent.min_silence_ms == 700 and sent.threshold == pytest.approx(0.6)
    assert sent.min_speech_ms == gateway.min_speech_ms and sent.speech_pad_ms == gateway.speech_pad_ms
    assert sent.barge_in_threshold == gateway.barge_in_threshold
    assert sent.barge_in_min_speech_ms == gateway.barge_in_min_speech_ms
    assert shown.type == "server_vad" and shown.silence_duration_ms == 700


async def test_server_vad_without_fields_takes_the_gateways_threshold_and_silence(stack: Stack) -> None:
    async with realtime(stack) as events:
        sent = await stream_settings(stack, events, {"type": "server_vad"})
    assert sent.silence_only and sent.min_silence_ms == stack.settings.vad.min_silence_ms
    assert sent.threshold == pytest.approx(stack.settings.vad.threshold)


@pytest.mark.parametrize(("eagerness", "factor"), [("high", 0.5), ("low", 2.0), ("medium", 1.0)])
async def test_semantic_vad_eagerness_scales_how_long_a_held_turn_may_stay_silent(stack: Stack, eagerness: str,
                                                                                 factor: float) -> None:
    gateway = turn_taking(stack.settings.vad)
    async with realtime(stack) as events:
        await stream_settings(stack, events, {"type": "server_vad"})  # away from the default first
        sent = await stream_settings(stack, events, {"type": "semantic_vad", "eagerness": eagerness})
    assert not sent.silence_only and sent.turn_silence_ms == gateway.turn_silence_ms
    assert sent.max_turn_silence_ms == round(gateway.max_turn_silence_ms * factor)
    assert sent.threshold == pytest.approx(gateway.threshold) and sent.barge_in_threshold == gateway.barge_in_threshold
