"""Without a usable microphone (permission denied, or no device) the page says so clearly and still works by text;
busy and error events are shown; when the socket drops it reconnects with backoff and opens a new session; a new
voice opens a new session too; Escape stops an answer, even one whose turn.done came before it had all played; the
player reports a gap in an answer's audio (an underrun) with its length."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.browser import fake_gateway, page_driver
from tests.browser.conftest import serve_fake_gateway

EXPECTED = {
    "denied": ("Access to the microphone was denied", "Access to the camera was denied"),
    "missing": ("No microphone was found", "No camera was found"),
}


@pytest.mark.parametrize("mode", ["denied", "missing"])
def test_text_only_session_with_clear_message_and_reconnection(mode: str, vendor_dir: Path) -> None:
    recorder = fake_gateway.Recorder()

    async def run() -> page_driver.TextOnlyRun:
        async with serve_fake_gateway(vendor_dir, recorder, fake_gateway.Script([1.0])) as url:
            return await asyncio.wait_for(
                page_driver.run_text_only(url, mode, ["/test-busy", "/test-error"], fake_gateway.DROP_SOCKET,
                                          fake_gateway.LONG_ANSWER, fake_gateway.STALLED_ANSWER),
                timeout=60)

    result = asyncio.run(run())
    mic_message, camera_message = EXPECTED[mode]
    assert mic_message in result.alerts and "You can still type" in result.alerts
    assert "Busy: 2 requests are already running" in result.alerts
    assert "Error (unavailable): the llm service is down" in result.alerts
    assert camera_message in result.camera_status and "Continuing without the camera" in result.camera_status
    assert result.transcript[0] == "You:Typed without a microphone"
    assert result.transcript[1].startswith("Sotto:The table holds a red cup.")
    assert result.log.console_errors == [] and result.log.failed == []
    assert "llm: serving" in result.health

    # Audio paced ahead of playback plays without a gap a listener would notice; a stalled answer's silence is
    # reported once, about as long as the audio failed to come (0.75 s, less what the player still held).
    assert all(gap < 300 for gap in result.playback_before_stall["gapsMs"]), result.playback_before_stall
    stall_gaps = result.playback_after_stall["gapsMs"][len(result.playback_before_stall["gapsMs"]):]
    assert [gap for gap in stall_gaps if gap >= 300] == [pytest.approx(750, abs=400)], result.playback_after_stall
    assert result.playback_after_stall["underruns"] == len(result.playback_after_stall["gapsMs"])

    starts = recorder.of_type("session.start")
    assert len(starts) == 3, "no reconnection after the socket dropped, or no new session for the new voice"
    assert starts[0] == {"type": "session.start", "protocol": 1, "sample_rate": 16000, "client_vad": False,
                         "turn_hold": False, "camera": False}
    assert "voice" not in starts[1] and starts[2]["voice"] == "jm_kumo"
    assert any(text.startswith("Connection lost — reconnecting in") for text in result.connection_texts)
    assert result.connection_texts[-1] == "Connected — model fake"

    # Escape stopped an answer the server had already closed: the page says how much was heard, and marks it.
    (interrupt,) = result.interrupts
    assert 0 < interrupt["played_samples"] < fake_gateway.LONG_ANSWER_SECONDS * fake_gateway.RATE_OUT
    assert result.transcript[-1].startswith("Sotto:" + "".join(fake_gateway.SENTENCES).strip())
    assert "(stopped before the end)" in result.transcript[-1]
