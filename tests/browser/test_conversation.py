"""The page in headless Chromium, fake mic (espeak-ng) and camera (Y4M), against the fake gateway (or any gateway).

Scripted timeline (page_driver.FAKE): the user asks a question; while the 6 s answer plays, they talk over it;
that utterance gets a short answer; then they type a message. The first group of tests checks what the page shows
and reports about itself, valid against any server; the second checks the wire as the fake gateway recorded it.
"""

from __future__ import annotations

import io
import itertools
import json
import time
from urllib.parse import urlsplit

import numpy as np
from PIL import Image

from tests.browser import fake_gateway, page_checks, page_driver
from tests.browser.conftest import Conversation

FIRST_REPLY_SAMPLES = int(page_driver.REPLY_SECONDS[0] * fake_gateway.RATE_OUT)
SECOND_REPLY_SAMPLES = int(page_driver.REPLY_SECONDS[1] * fake_gateway.RATE_OUT)


def _sent(conversation: Conversation, kind: str) -> list[dict]:
    return [e for e in conversation.run.events if e["dir"] == "out" and e["type"] == kind]


# --- the page, as it reports itself ------------------------------------------------------------------------------

def test_page_loads_everything_from_its_own_server_without_errors(conversation: Conversation) -> None:
    log = conversation.run.log
    assert log.console_errors == []
    assert log.failed == []
    origins = {f"{urlsplit(url).scheme}://{urlsplit(url).netloc}" for url in log.requests}
    assert len(origins) == 2, origins  # http:// and ws:// of the same host
    assert all(urlsplit(url).hostname == "127.0.0.1" for url in log.requests), log.requests
    assert any(url.endswith("/vendor/ort-wasm-simd-threaded.wasm") for url in log.requests)
    assert any(url.endswith("/vendor/silero_vad_v5.onnx") for url in log.requests)


def test_in_page_vad_sends_audio_and_camera_frames(conversation: Conversation) -> None:
    sent = conversation.run.frames_sent
    assert sent["audio"] > 0 and sent["jpeg"] > 0, sent
    assert len(_sent(conversation, "audio.end")) == 2


def test_played_samples_rise_while_the_answer_plays(conversation: Conversation) -> None:
    played = conversation.run.played_while_speaking
    assert all(b > a for a, b in itertools.pairwise(played)), played


def test_barge_in_stops_playback_and_says_how_much_was_heard(conversation: Conversation) -> None:
    interrupts = _sent(conversation, "interrupt")
    assert len(interrupts) == 1, interrupts
    assert interrupts[0]["played_samples"] > 0
    turn_id = interrupts[0]["turn_id"]
    after = conversation.run.events[conversation.run.events.index(interrupts[0]) + 1:]
    assert not [e for e in after if e["type"] == "playback" and e.get("turn_id") == turn_id], "played on"
    page_checks.assert_first_answer_marked_cut(conversation.run)


def test_transcript_shows_spoken_typed_and_assistant_turns(conversation: Conversation) -> None:
    page_checks.assert_transcript_shows_the_conversation(conversation.run)


def test_screenshot_mid_answer_is_not_blank(conversation: Conversation) -> None:
    page_checks.assert_not_blank(conversation.run.speaking_screenshot)


def test_state_follows_the_conversation(conversation: Conversation) -> None:
    events = conversation.run.events
    json.dumps(events)  # the debug view is plain data
    states = [e["state"] for e in events if e.get("type") == "state"]
    assert states[0] == "listening" and states[-1] == "listening"
    assert {"thinking", "speaking"} <= set(states)  # a fast server may answer before the page's VAD ends speech


# --- the wire, as the fake gateway recorded it -------------------------------------------------------------------

def test_state_goes_listening_thinking_speaking(conversation: Conversation) -> None:
    conversation.recorder  # noqa: B018 (the fake answers only after audio.end, so the order is fixed)
    states = [e["state"] for e in conversation.run.events if e.get("type") == "state"]
    assert states[:4] == ["listening", "thinking", "speaking", "listening"]


def test_session_starts_with_session_start(conversation: Conversation) -> None:
    first = conversation.recorder.messages[0]
    assert first == {"type": "session.start", "protocol": 1, "sample_rate": 16000, "client_vad": True,
                     "turn_hold": True, "camera": True}


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
    for utterance, (start_s, text) in enumerate(page_driver.FAKE.speech):
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


def test_playback_progress_and_interrupt_on_the_wire(conversation: Conversation) -> None:
    messages = conversation.recorder.messages
    (interrupt,) = conversation.recorder.of_type("interrupt")
    assert interrupt["turn_id"] == "t0" and 0 < interrupt["played_samples"] < FIRST_REPLY_SAMPLES
    first = [m["played_samples"] for m in messages[:messages.index(interrupt)]
             if m["type"] == "playback" and m["turn_id"] == "t0"]
    assert first and first == sorted(first) and first[-1] <= interrupt["played_samples"]
    second = [m["played_samples"] for m in conversation.recorder.of_type("playback") if m["turn_id"] == "t1"]
    assert second == sorted(second) and second[-1] == SECOND_REPLY_SAMPLES  # the final report: all of it


def test_scripted_answers_and_timings_are_shown(conversation: Conversation) -> None:
    (interrupt,) = conversation.recorder.of_type("interrupt")  # skips without the fake, whose answers these are
    per_sentence = FIRST_REPLY_SAMPLES / len(fake_gateway.SENTENCES)
    heard = [s for i, s in enumerate(fake_gateway.SENTENCES) if i * per_sentence < interrupt["played_samples"]]
    transcript = conversation.run.transcript
    assert 0 < len(heard) < len(fake_gateway.SENTENCES)
    # the heard sentences, then the rest (struck through), then the mark
    assert transcript[1].startswith("Sotto:" + "".join(fake_gateway.SENTENCES).strip() + "(interrupted)")
    assert conversation.run.unheard_first_answer == "".join(fake_gateway.SENTENCES[len(heard):])
    assert transcript[3].startswith("Sotto:" + "".join(fake_gateway.SENTENCES))
    assert "time to first audio 162 ms — endpoint 12 ms" in transcript[5]
