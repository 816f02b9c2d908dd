"""The page in headless Chromium against the real stack: real gateway, vad, llm (the tiny multimodal LiteRT-LM
model) and tts (Piper's English voice, the offline choice), with the fake camera of the other browser tests and the
cued microphone.

Conversation (page_driver.REAL): once the page listens, the user asks a question; as soon as the page has played
50 ms of the answer, the user talks over it; then types a message. The tiny model writes random characters and
often ends its turn after a few of them (or writes nothing speakable): when its first answer has no audio, or is
over (played, or complete on the server, leaving nothing to cancel) before the page has heard the cut-in, there is
nothing to barge in on, and the conversation is run again with a new page (at most ATTEMPTS times, each attempt and
its reason printed).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.browser import media_fixtures, page_checks, page_driver
from tools.speech import speak
from tools.stack import RealStack, start_stack, stop_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

# An attempt that ends early costs seconds. Most attempts barge in (the measured rate is in docs/reliability.md);
# were only one in two to, 20 attempts would all fail about once in a million runs.
ATTEMPTS = 20
MAX_NEW_TOKENS = "80"  # up to about 16 s of speech from the tiny model's random characters
MIC_RATE = 48000  # what Chromium's fake microphone delivers


@dataclass
class RealConversation:
    run: page_driver.ConversationRun
    stack: RealStack
    attempts: int

    def sent(self, kind: str) -> list[dict]:
        return [e for e in self.run.events if e["dir"] == "out" and e["type"] == kind]

    def received(self, kind: str) -> list[dict]:
        """What the page received of `kind`, less what belongs to turns the server withdrew (`turn.resumed`: the
        user went on after a pause, as "Wait … what colour is the cup" may, and the next turn has it all)."""
        events = [e for e in self.run.events if e["dir"] == "in"]
        withdrawn = {e["turn_id"] for e in events if e["type"] == "turn.resumed"}
        return [e for e in events if e["type"] == kind and e.get("turn_id") not in withdrawn]

    def gateway_turn(self, turn_id: str) -> dict:
        (done,) = [e for e in self.stack.log_events("gateway")
                   if e.get("turn_id") == turn_id and e["event"] == "turn_done"]
        return done


@pytest.fixture(scope="module")
def real(vendor_dir: Path, tmp_path_factory: pytest.TempPathFactory, artifacts: Path) -> Iterator[RealConversation]:
    folder = tmp_path_factory.mktemp("real-media")
    camera = media_fixtures.camera_y4m(folder / "camera.y4m")
    cues = page_driver.REAL
    speech = {text: (speak(text, "en-us", MIC_RATE, folder), MIC_RATE) for text in (cues.question, cues.cut_in)}
    stack = start_stack(tmp_path_factory.mktemp("real-browser-stack"), SOTTO_LLM_MAX_NEW_TOKENS=MAX_NEW_TOKENS)
    try:
        for attempt in range(1, ATTEMPTS + 1):
            out = artifacts / f"real-stack-{attempt}"
            out.mkdir(exist_ok=True)
            try:
                run = asyncio.run(asyncio.wait_for(page_driver.run_cued_conversation(
                    stack.http_url + "/", camera, out, cues, speech), timeout=300))
            except page_driver.AnswerEnded as exc:
                print(f"attempt {attempt}: {exc}; a new page")
                continue
            print(f"real-stack browser conversation: {run.seconds:.1f} s, attempt {attempt}, screenshots in {out}")
            yield RealConversation(run, stack, attempt)
            return
        pytest.fail(f"in {ATTEMPTS} attempts the first answer was always over before the user cut in")
    finally:
        stop_stack(stack)


def test_page_loads_from_the_gateway_without_errors_or_outside_requests(real: RealConversation) -> None:
    log = real.run.log
    assert log.console_errors == [] and log.failed == []
    assert all(urlsplit(url).hostname == "127.0.0.1" for url in log.requests), log.requests
    assert any(url.endswith("/vendor/silero_vad_v5.onnx") for url in log.requests)


def test_gateway_receives_speech_and_a_camera_frame_and_the_model_gets_both(real: RealConversation) -> None:
    assert real.run.frames_sent["audio"] > 0 and real.run.frames_sent["jpeg"] > 0, real.run.frames_sent
    spoken = [e for e in real.received("turn.started") if e["source"] == "speech"]
    assert len(spoken) == 2, spoken
    first = spoken[0]
    assert first["images"] >= 1, first  # a frame from inside the utterance went with it
    assert first["audio_ms"] > 1500, first  # "What is on the table in front of me?" with its pre-roll
    (request,) = [e for e in real.stack.log_events("llm")
                  if e.get("turn_id") == first["turn_id"] and e["event"] == "generate_request"]
    assert request["images"] >= 1 and request["audio_bytes"] > 16000 * 2, request


def test_the_answer_is_played_by_the_worklet(real: RealConversation) -> None:
    played = real.run.played_while_speaking
    # the counter as the answer started, then once it moved on (or playback stopped, which fails here)
    assert played[-1] > played[0] > 0, played
    assert real.received("audio.start") and real.received("audio.done")


def test_speaking_over_the_answer_stops_playback_and_the_server_cancels_the_turn(real: RealConversation) -> None:
    interrupts = real.sent("interrupt")
    assert interrupts and interrupts[0]["played_samples"] > 0, interrupts
    turn_id = interrupts[0]["turn_id"]
    after = real.run.events[real.run.events.index(interrupts[0]) + 1:]
    assert not [e for e in after if e["type"] == "playback" and e.get("turn_id") == turn_id], "played on"
    server = real.gateway_turn(turn_id)
    if server["outcome"] == "interrupted":  # still answering: the turn was cancelled and recorded what was heard
        heard = server["heard_chars"]
    else:  # a short answer's synthesis had finished while it played: its history entry is cut to what was heard
        assert server["outcome"] == "stop", server
        # the server's cut (turn.cut), then the page's interrupt with the samples it played, which refines it
        cuts = [e for e in real.stack.log_events("gateway")
                if e.get("turn_id") == turn_id and e["event"] == "history_cut"]
        assert cuts, f"no history cut for {turn_id}"
        heard = cuts[-1]["heard_chars"]
    assert heard < server["reply_chars"], server  # only what was heard enters the history
    page_checks.assert_first_answer_marked_cut(real.run)


def test_transcript_shows_the_words_of_both_spoken_turns_the_typed_one_and_the_answers(
        real: RealConversation) -> None:
    # The cued questions are "What is on the table in front of me?" and "Wait what colour is the cup".
    page_checks.assert_transcript_shows_the_conversation(real.run, last_answer_aloud=False,
                                                         spoken_words=("table", "cup"))
    words = real.received("transcript")
    assert len(words) == 2 and all(e["text"] for e in words), words


def test_screenshot_mid_answer_is_not_blank(real: RealConversation) -> None:
    page_checks.assert_not_blank(real.run.speaking_screenshot)
