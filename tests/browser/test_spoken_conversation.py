"""A spoken conversation in the real page, as a person has it with the offline kit: the real stack at `make up`'s
settings (SmolLM2-135M, which takes text only, Whisper tiny.en, Piper), the camera on, and the cued microphone.

Four utterances, each once the answer to the one before has been played out: three questions, the second a
greeting and a sentence pause before the question ("Hi there. … What is on the table in front of me?"),
then "What did I just ask you?". Each question must be shown as said (by word overlap: the recogniser's spelling
may differ), answered aloud and not interrupted, the greeting and its question must get one answer, the follow-up's
request to the llm must carry the earlier questions' words, the page must say once that the model cannot see (and
send no camera frame), and no error may be shown.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from playwright.async_api import TimeoutError as PlaywrightTimeout

from tests.browser import media_fixtures, page_driver
from tools.speech import speak
from tools.stack import RealStack, model_dir, start_stack, stop_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

MIC_RATE = 48000
PAUSE_S = 0.6  # the sentence pause after the greeting: longer than the turn model needs to call "Hi there." done
# Questions that Whisper tiny.en hears right in espeak-ng's voice (the point is the conversation, not the recogniser)
QUESTIONS = (("What is the capital of France?",), ("Hi there.", "What is on the table in front of me?"),
             ("Wait, what colour is the cup?",), ("What did I just ask you?",))
KEY_WORDS = ("france", "table", "cup")  # what the follow-up's history must carry, one per earlier question
SMOLLM2 = model_dir() / "offline" / "smollm2-135m-instruct-p64.litertlm"
ANSWER_WAIT_S = 180  # per question, on a loaded 2-core machine: recognition, the model, synthesis and playback


@dataclass
class Spoken:
    events: list[dict]
    transcript: list[str]
    camera_note: str
    frames_sent: dict[str, int]
    alerts: list[str]
    stack: RealStack

    def received(self, kind: str) -> list[dict]:
        return [e for e in self.events if e["dir"] == "in" and e["type"] == kind]

    def answered_turns(self) -> list[dict]:
        withdrawn = {e["turn_id"] for e in self.received("turn.resumed")}
        return [e for e in self.received("turn.done") if e["turn_id"] not in withdrawn]


async def converse(base_url: str, camera: Path, utterances: list[np.ndarray], artifacts: Path) -> dict:
    log = page_driver.BrowserLog()
    async with page_driver.started_page(page_driver.chromium_args(camera), base_url, log,
                                        page_driver.CUED_MIC) as page:
        await page.wait_for_function(page_driver._LISTENING_ON_CUE, timeout=60_000)
        for n, pcm in enumerate(utterances, start=1):
            await page_driver.say(page, pcm, MIC_RATE)
            try:
                # a withdrawn turn's turn.done comes before its turn.resumed, while the user still speaks: the
                # next question waits for answers the server kept, the page listening and the user silent
                await page_driver.wait_for_answers(page, n, timeout_s=ANSWER_WAIT_S)
            except PlaywrightTimeout:  # say where the page stands, not only that it waited
                state = await page_driver.debug(page, "state"), await page_driver.debug(page, "vad")
                events = [{k: v for k, v in e.items() if k != "text" or e["type"] != "text.delta"}
                          for e in await page_driver.debug(page, "events") if e.get("type") != "playback"]
                raise AssertionError(f"question {n} not answered; page {state}; events {events[-40:]}") from None
        await page.screenshot(path=str(artifacts / "spoken-conversation.png"), full_page=True)
        return {"events": await page_driver.debug(page, "events"),
                "frames_sent": await page_driver.debug(page, "framesSent"),
                "transcript": await page.locator("#transcript li").all_inner_texts(),
                "camera_note": await page.locator("#camera-status").inner_text(),
                "alerts": await page.locator("#alerts p.error").all_inner_texts(),
                "console_errors": log.console_errors}


@pytest.fixture(scope="module")
def spoken(vendor_dir: Path, tmp_path_factory: pytest.TempPathFactory, artifacts: Path) -> Iterator[Spoken]:
    if not SMOLLM2.exists():
        pytest.fail(f"{SMOLLM2} is missing: `make models-offline` builds the offline SmolLM2")
    folder = tmp_path_factory.mktemp("spoken-media")
    camera = media_fixtures.camera_y4m(folder / "camera.y4m")
    pause = np.zeros(int(PAUSE_S * MIC_RATE), dtype=np.int16)
    utterances = []
    for parts in QUESTIONS:
        pieces = [speak(text, "en-us", MIC_RATE, folder) for text in parts]
        utterances.append(np.concatenate([p for piece in pieces for p in (piece, pause)][:-1]))
    # make up's settings: only the ports, the run folder and the model files differ; the log keeps the words so the
    # follow-up's history can be read
    stack = start_stack(tmp_path_factory.mktemp("spoken-stack"), SOTTO_LLM_MODEL=str(SMOLLM2),
                        SOTTO_LLM_THREADS="0", SOTTO_LOG_CONTENT="true")
    try:
        got = asyncio.run(asyncio.wait_for(converse(stack.http_url + "/", camera, utterances, artifacts), 800))
        assert got.pop("console_errors") == []
        yield Spoken(stack=stack, **got)
    finally:
        stop_stack(stack)


def _words(text: str) -> set[str]:
    """The words said, with the recogniser's American spelling of the one British word asked ("colour")."""
    return set(re.findall(r"[a-z']+", text.lower().replace("colour", "color")))


def test_every_question_is_answered_aloud_and_not_interrupted(spoken: Spoken) -> None:
    answered = spoken.answered_turns()
    assert len(answered) == len(QUESTIONS), [(e["turn_id"], e["text"]) for e in answered]
    assert all(not e["interrupted"] and e["finish_reason"] in ("stop", "length") for e in answered), answered
    with_audio = {e["turn_id"] for e in spoken.received("audio.start")}
    assert all(e["turn_id"] in with_audio for e in answered), "an answer was not spoken"
    assert [e for e in spoken.events if e["dir"] == "out" and e["type"] == "interrupt"
            and e["turn_id"] in {a["turn_id"] for a in answered}] == []


def test_each_question_is_shown_as_said_and_the_greeting_and_its_question_are_one_turn(spoken: Spoken) -> None:
    answered = {e["turn_id"] for e in spoken.answered_turns()}
    heard = [e["text"] for e in spoken.received("transcript") if e["turn_id"] in answered]
    assert len(heard) == len(QUESTIONS), heard
    for said, shown in zip(QUESTIONS, heard):
        expected = _words(" ".join(said))
        overlap = len(expected & _words(shown)) / len(expected)
        assert overlap >= 0.6, (said, shown)
    assert {"there", "table"} <= _words(heard[1]), heard[1]  # the greeting and the question: one answer
    shown = " ".join(spoken.transcript).lower()
    assert all(word in shown for word in KEY_WORDS), spoken.transcript


def test_the_follow_up_carries_the_earlier_questions(spoken: Spoken) -> None:
    last = spoken.answered_turns()[-1]["turn_id"]
    requests = [e for e in spoken.stack.log_events("llm")
                if e.get("turn_id") == last and e["event"] == "generate_request"]
    assert requests, f"no generate_request for {last}"
    history = requests[-1]["history"].lower()
    assert all(word in history for word in KEY_WORDS), history
    assert requests[-1]["images"] == 0


def test_the_page_says_once_that_the_model_cannot_see_and_shows_no_error(spoken: Spoken) -> None:
    assert "cannot see" in spoken.camera_note and spoken.frames_sent["jpeg"] == 0, spoken.camera_note
    assert [e["message"] for e in spoken.received("error") + spoken.received("busy")] == []
    assert spoken.alerts == [], spoken.alerts  # the camera's note is a note, not an alert
