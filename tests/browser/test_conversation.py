"""The page in headless Chromium, fake mic (espeak-ng) and camera (Y4M), against the fake gateway.

Scripted timeline (page_driver.SPEECH): the user asks a question; while the 6 s answer plays, they talk over it;
that utterance gets a short answer; then they type a message.
"""

from __future__ import annotations

import io
import json
import time
from urllib.parse import urlsplit

import numpy as np
from PIL import Image, ImageStat

from tests.browser import fake_gateway, page_driver
from tests.browser.conftest import Conversation

FIRST_REPLY_SAMPLES = int(page_driver.REPLY_SECONDS[0] * fake_gateway.RATE_OUT)
SECOND_REPLY_SAMPLES = int(page_driver.REPLY_SECONDS[1] * fake_gateway.RATE_OUT)


def _out(conversation: Conversation, kind: str) -> list[dict]:
    return conversation.recorder.of_type(kind)


def test_page_loads_everything_from_its_own_server_without_errors(conversation: Conversation) -> None:
    log = conversation.run.log
    assert log.console_errors == []
    assert log.failed == []
    origins = {f"{urlsplit(url).scheme}://{urlsplit(url).netloc}" for url in log.requests}
    assert len(origins) == 2, origins  # http:// and ws:// of the same host
    assert all(urlsplit(url).hostname == "127.0.0.1" for url in log.requests), log.requests
    assert any(url.endswith("/vendor/ort-wasm-simd-threaded.wasm") for url in log.requests)
    assert any(url.endswith("/vendor/silero_vad_v5.onnx") for url in log.requests)


def test_session_starts_with_session_start(conversation: Conversation) -> None:
    first = conversation.recorder.messages[0]
    assert first == {"type": "session.start", "protocol": 1, "sample_rate": 16000, "client_vad": True,
                     "camera": True}


def test_audio_frames_have_valid_headers_and_carry_speech(conversation: Conversation) -> None:
    frames = conversation.recorder.frames_of(fake_gateway.KIND_AUDIO_IN)
    assert frames, "the in-page VAD never sent audio"
    assert [f.seq for f in frames] == list(range(len(frames)))
    assert all(f.flags == 0 and f.reserved == 0 for f in frames)
    assert all(0 < len(f.payload) <= 65536 and len(f.payload) % 2 == 0 for f in frames)
    stamps = [f.timestamp_ms for f in frames]
    assert stamps == sorted(stamps)
    assert abs(stamps[-1] - time.time() * 1000) < 120_000  # Date.now() milliseconds, not a relative clock
    pcm = np.frombuffer(b"".join(f.payload for f in frames), dtype="<i2").astype(np.float32) / 32768
    assert np.sqrt(np.mean(pcm**2)) > 0.01, "the audio sent is silent"


def test_audio_is_sent_only_around_speech_with_preroll(conversation: Conversation) -> None:
    frames = conversation.recorder.frames_of(fake_gateway.KIND_AUDIO_IN)
    assert conversation.recorder.audio_ends == 2
    assert len(_out(conversation, "audio.end")) == 2
    for utterance, (start_s, text) in enumerate(page_driver.SPEECH):
        segment = [f for f in frames if f.utterance == utterance]
        spoken_s = conversation.media.utterance_ends_s[text] - start_s
        sent_s = sum(len(f.payload) for f in segment) / 2 / 16000
        # all of the speech, plus ~0.3 s of pre-roll and the 0.4 s of silence that ends it; not the pauses between
        assert spoken_s * 0.95 < sent_s < spoken_s + 1.2, f"utterance {utterance}: {sent_s} s sent for {spoken_s} s"
        levels = [np.abs(np.frombuffer(f.payload, dtype="<i2")).max() for f in segment]
        first_loud = next(i for i, level in enumerate(levels) if level > 0.2 * max(levels))
        lead_ms = segment[first_loud].timestamp_ms - segment[0].timestamp_ms
        assert lead_ms >= 200, f"utterance {utterance}: only {lead_ms:.0f} ms of pre-roll"


def test_jpeg_frames_decode_and_fit_640(conversation: Conversation) -> None:
    jpegs = conversation.recorder.frames_of(fake_gateway.KIND_JPEG)
    assert jpegs, "no camera frame was sent"
    assert [f.seq for f in jpegs] == list(range(len(jpegs)))
    for frame in jpegs:
        image = Image.open(io.BytesIO(frame.payload))
        image.load()
        assert image.format == "JPEG"
        assert max(image.size) <= 640, image.size  # the 1280x720 camera, as the page's constraints and canvas scale it
    for utterance in (0, 1):
        count = sum(1 for f in jpegs if f.utterance == utterance)
        assert 1 <= count <= 2 * 3.5 + 1, count  # one at speech start, then at most ~2 per second


def test_played_samples_rise_while_the_answer_plays(conversation: Conversation) -> None:
    played = conversation.run.played_while_speaking
    assert all(b > a for a, b in zip(played, played[1:], strict=False)), played
    reports = [m for m in _out(conversation, "playback") if m["turn_id"] == "t0"]
    assert reports and all(0 <= m["played_samples"] <= FIRST_REPLY_SAMPLES for m in reports)


def test_barge_in_stops_playback_and_reports_what_was_heard(conversation: Conversation) -> None:
    interrupts = _out(conversation, "interrupt")
    assert len(interrupts) == 1, interrupts
    interrupt = interrupts[0]
    assert interrupt["turn_id"] == "t0"
    assert 0 < interrupt["played_samples"] < FIRST_REPLY_SAMPLES
    later = conversation.recorder.messages[conversation.recorder.messages.index(interrupt) + 1:]
    assert not [m for m in later if m.get("turn_id") == "t0" and m["type"] == "playback"], "played on after interrupt"
    assert "(interrupted)" in conversation.run.transcript[1]


def test_completed_answer_reports_its_end(conversation: Conversation) -> None:
    reports = [m["played_samples"] for m in _out(conversation, "playback") if m["turn_id"] == "t1"]
    assert reports == sorted(reports)
    assert reports[-1] == SECOND_REPLY_SAMPLES


def test_transcript_shows_spoken_typed_and_assistant_turns(conversation: Conversation) -> None:
    transcript = conversation.run.transcript
    assert len(transcript) == 6, transcript
    assert transcript[0].startswith("You:🎤 spoken (") and transcript[2].startswith("You:🎤 spoken (")
    assert transcript[4] == "You:Hello from the keyboard"
    for answer in (transcript[1], transcript[3], transcript[5]):
        assert answer.startswith("Sotto:The table holds a red cup.")
    assert "time to first audio 162 ms" in transcript[5]
    assert conversation.run.latency_text.startswith("Last turn: time to first audio 162 ms")
    assert conversation.run.state_after == "listening"


def test_screenshot_mid_answer_is_not_blank(conversation: Conversation) -> None:
    image = Image.open(conversation.run.speaking_screenshot).convert("RGB")
    assert max(ImageStat.Stat(image).var) > 100, "the screenshot is (nearly) uniform"


def test_debug_events_are_plain_json(conversation: Conversation) -> None:
    events = conversation.run.events
    json.dumps(events)
    states = [e["state"] for e in events if e.get("type") == "state"]
    assert states[:3] == ["listening", "thinking", "speaking"]
