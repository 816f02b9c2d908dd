"""Drives the page in Debian's headless Chromium (Python playwright, no downloaded browser) through a scripted
conversation, and records what the browser did: console, requests, screenshots, the page's debug state.

The fake microphone plays one WAV from the moment capture opens, so the timeline of the conversation is fixed by
the fixture (see SPEECH): the first question, then, while the answer plays, the user talks over it.
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from playwright.async_api import ConsoleMessage, Page, Request, Response, async_playwright

CHROMIUM = os.environ.get("SOTTO_CHROMIUM", "/usr/bin/chromium")

@dataclass(frozen=True)
class Timeline:
    """What the fake microphone says when, and how long the driver waits for each step.

    `speech`: (start s, text); leading silence covers page start-up (VAD model and WASM load), and the second
    utterance starts while the first answer is still playing. `patience` multiplies every wait.
    With `cut_while_running`, a first answer already complete on the server when the user cuts in raises
    AnswerEnded too (the fake gateway sends turn.done before its audio has played, by design).
    """

    speech: tuple[tuple[float, str], ...]
    total_s: float
    patience: float = 1.0
    cut_while_running: bool = False  # the cut-in must come while the server still works on the first answer


# Against the fake gateway: answers come at once, the first is 6 s of audio.
FAKE = Timeline(((4.0, "What is on the table in front of me?"), (9.5, "Wait what colour is the cup")), 14.0)
REPLY_SECONDS = [6.0, 1.5]  # first answer long enough to be interrupted, the later ones short
# Against the real stack: time to first audio is seconds and varies with the machine's load, so the first cut-in is
# a guess (about 0.4 s into the answer on an idle 2-core box, where it began 6.8-7.4 s into the file) that later
# attempts correct (with_cut_in).
REAL = Timeline(((4.0, "What is on the table in front of me?"), (7.6, "Wait what colour is the cup")), 12.6,
                patience=3.0, cut_while_running=True)


def with_cut_in(timeline: Timeline, at_s: float) -> Timeline:
    """The same conversation with the second utterance (the cut-in) moved to `at_s` seconds into the file."""
    (first, (old_at, text), *rest) = timeline.speech
    return replace(timeline, speech=(first, (at_s, text), *rest), total_s=timeline.total_s - old_at + at_s)


# The profile is a fresh temporary --user-data-dir made by playwright for each launch.
BASE_ARGS = [
    "--no-sandbox",  # tests run as root in a container
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    # without these Chromium keeps calling home, which floods a closed network
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_args(speech_wav: Path, camera_y4m: Path) -> list[str]:
    return [
        *BASE_ARGS,
        "--use-fake-ui-for-media-stream",  # grant mic and camera without a prompt
        "--use-fake-device-for-media-stream",
        f"--use-file-for-fake-audio-capture={speech_wav}%noloop",
        f"--use-file-for-fake-video-capture={camera_y4m}",
    ]


@dataclass
class BrowserLog:
    console_errors: list[str] = field(default_factory=list)
    requests: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)

    def attach(self, page: Page) -> None:
        page.on("console", self._console)
        page.on("pageerror", lambda err: self.console_errors.append(f"pageerror: {err}"))
        page.on("request", self._request)
        page.on("requestfailed", lambda r: self.failed.append(f"{r.url}: {r.failure}"))
        page.on("response", self._response)
        page.on("websocket", lambda ws: self.requests.append(ws.url))

    def _console(self, msg: ConsoleMessage) -> None:
        if msg.type == "error":
            self.console_errors.append(msg.text)

    def _request(self, request: Request) -> None:
        self.requests.append(request.url)

    def _response(self, response: Response) -> None:
        if response.status >= 400:
            self.failed.append(f"{response.url}: HTTP {response.status}")


@dataclass
class ConversationRun:
    log: BrowserLog
    played_while_speaking: list[int]
    speaking_screenshot: Path
    transcript: list[str]
    latency_text: str
    events: list[dict]
    frames_sent: dict[str, int]
    unheard_first_answer: str
    state_after: str
    seconds: float


async def debug(page: Page, name: str):
    return await page.evaluate(f"window.sottoDebug.{name}")


# Conditions are written as functions: a bare expression would be eval'ed in the page, which its CSP forbids.
async def wait_for_events(page: Page, direction: str, kind: str, count: int, timeout_s: float) -> None:
    await page.wait_for_function(
        "([dir, type, n]) => window.sottoDebug.events.filter(e => e.dir === dir && e.type === type).length >= n",
        arg=[direction, kind, count], timeout=timeout_s * 1000)


class AnswerEnded(Exception):
    """The first answer was over before the second utterance: there was nothing to barge in on.

    `audio_start_s`: when that answer's audio began, in seconds of the fake microphone's file (None: no audio), so
    a caller can place the next attempt's cut-in; `early`: the page cut in before any audio had come."""

    def __init__(self, message: str, audio_start_s: float | None = None, early: bool = False) -> None:
        super().__init__(message)
        self.audio_start_s = audio_start_s
        self.early = early


def audio_start_s(events: list[dict], timeline: Timeline) -> float | None:
    """The first answer's `audio.start` on the microphone file's clock. The page stamps audio with the wall clock
    from the audio clock's origin, so the server's `speech.started` (the first utterance's start on the page's
    capture clock) ties the two: that utterance starts at `timeline.speech[0][0]` seconds into the file."""
    started = next((e for e in events if e["dir"] == "in" and e["type"] == "speech.started"), None)
    audio = next((e for e in events if e["dir"] == "in" and e["type"] == "audio.start"), None)
    if started is None or audio is None:
        return None
    file_origin_ms = started["ts_ms"] - timeline.speech[0][0] * 1000
    return round((audio["t"] - file_origin_ms) / 1000, 2)


# The first answer plays (the worklet's counter rises), or it is over for this attempt: answered without a sound,
# or the user cut in before the page had seen it play (the cut-in came too early).
_PLAYING_OR_OVER = """() => {
  const d = window.sottoDebug;
  if (d.state === "speaking" && d.playedSamples > 4800) return true;
  if (d.events.some(e => e.dir === "out" && e.type === "interrupt")) return true;
  return d.state === "listening" && d.events.some(e => e.dir === "in" && e.type === "turn.done");
}"""

# The page sent `interrupt`, or it went back to listening after speaking without one.
_CUT_IN_OR_OVER = """() => {
  const events = window.sottoDebug.events;
  if (events.some(e => e.dir === "out" && e.type === "interrupt")) return true;
  const states = events.filter(e => e.type === "state").map(e => e.state);
  return states.indexOf("listening", states.indexOf("speaking")) > states.indexOf("speaking")
    && states.includes("speaking");
}"""


def first_answer_over(events: list[dict], timeline: Timeline, state: str) -> AnswerEnded | None:
    """Why there is nothing to barge in on, with where that answer's audio began for the next attempt; None
    while the first answer plays and the user has not cut in."""
    early = any(e["dir"] == "out" and e["type"] == "interrupt" for e in events)
    if state == "speaking" and not early:
        return None
    began = audio_start_s(events, timeline)
    if early:
        what = "the user cut in before the page had played 0.2 s of the first answer"
    elif began is not None:
        what = "the first answer was over before the page had played 0.2 s of it"
    else:
        done = next(e for e in events if e["dir"] == "in" and e["type"] == "turn.done")
        what = f"the first answer had no audio ({len(done['text'])} characters, {done['finish_reason']})"
    return AnswerEnded(what, began, early)


async def run_conversation(base_url: str, speech_wav: Path, camera_y4m: Path, artifacts: Path,
                           timeline: Timeline = FAKE) -> ConversationRun:
    started = time.monotonic()
    wait = timeline.patience
    log = BrowserLog()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True,
                                           args=chromium_args(speech_wav, camera_y4m))
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 800})
            log.attach(page)
            await page.goto(base_url)
            await page.get_by_role("button", name="Start").click()

            # The first answer plays: the worklet's played-sample counter rises.
            await page.wait_for_function(_PLAYING_OR_OVER, timeout=30_000 * wait)
            over = first_answer_over(await debug(page, "events"), timeline, await debug(page, "state"))
            if over is not None:
                raise over
            played = [await debug(page, "playedSamples")]
            for _ in range(3):
                await asyncio.sleep(0.3)
                played.append(await debug(page, "playedSamples"))
            screenshot = artifacts / "speaking.png"
            await page.screenshot(path=str(screenshot), full_page=True)

            # The second utterance barges in, and its own answer completes.
            await page.wait_for_function(_CUT_IN_OR_OVER, timeout=20_000 * wait)
            so_far = await debug(page, "events")
            cut = next((i for i, e in enumerate(so_far) if e["dir"] == "out" and e["type"] == "interrupt"), None)
            done = [e for e in so_far[:cut] if e["type"] == "turn.done"] if cut is not None else \
                [e for e in so_far if e["type"] == "turn.done"]
            what = (f"{time.monotonic() - started:.1f} s in; first answer: "
                    + (f"{len(done[0]['text'])} characters, {done[0]['finish_reason']}" if done else "unfinished"))
            began = audio_start_s(so_far, timeline)
            what += f"; its audio began {began} s into the microphone file, the cut-in at {timeline.speech[1][0]} s"
            if cut is None:
                raise AnswerEnded(f"the first answer had finished playing before the user cut in ({what})", began)
            if timeline.cut_while_running and done:
                raise AnswerEnded("the first answer was complete on the server before the user cut in: "
                                  f"nothing was left for the server to cancel ({what})", began)
            await wait_for_events(page, "in", "turn.done", 2, timeout_s=30 * wait)
            # turn.done may come before the answer has played (the real gateway does that): let it finish
            await page.wait_for_function("() => window.sottoDebug.state === 'listening'", timeout=20_000 * wait)

            # A typed turn.
            await page.get_by_label("Type a message").fill("Hello from the keyboard")
            await page.get_by_label("Type a message").press("Enter")
            await wait_for_events(page, "in", "turn.done", 3, timeout_s=20 * wait)
            await page.wait_for_function("() => window.sottoDebug.state === 'listening'", timeout=20_000 * wait)

            transcript = await page.locator("#transcript li").all_inner_texts()
            latency = await page.locator("#latency").inner_text()
            events = await debug(page, "events")
            state = await debug(page, "state")
            frames_sent = await debug(page, "framesSent")
            unheard = await page.locator("#transcript li.assistant").first.locator(".unheard").all_inner_texts()
            await page.screenshot(path=str(artifacts / "after.png"), full_page=True)
        finally:
            await browser.close()
    return ConversationRun(log, played, screenshot, transcript, latency, events, frames_sent, "".join(unheard),
                           state, time.monotonic() - started)


@dataclass
class TextOnlyRun:
    log: BrowserLog
    alerts: str
    camera_status: str
    transcript: list[str]
    connection_texts: list[str]
    health: str
    interrupts: list[dict]


# Without --use-fake-ui-for-media-stream headless Chromium denies the permission prompt; with it but without fake
# devices, this (device-less) machine has no microphone or camera to give.
NO_MIC_ARGS = {
    "denied": [*BASE_ARGS, "--use-fake-device-for-media-stream"],
    "missing": [*BASE_ARGS, "--use-fake-ui-for-media-stream"],
}


async def run_text_only(base_url: str, mode: str, failures: list[str], drop_text: str,
                        long_text: str) -> TextOnlyRun:
    """Start without a usable microphone, type a turn, then texts the server answers with failures, then one that
    makes it drop the socket; the page reconnects; then pick another voice; then stop a long answer with Escape."""
    log = BrowserLog()
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=NO_MIC_ARGS[mode])
        try:
            page = await browser.new_page()
            log.attach(page)
            connection_texts: list[str] = []
            await page.expose_function("recordConnection", lambda text: connection_texts.append(text))
            await page.goto(base_url)
            await page.evaluate("""new MutationObserver(() => window.recordConnection(
                document.getElementById('connection').textContent)).observe(
                document.getElementById('connection'), {childList: true, characterData: true, subtree: true})""")
            await page.get_by_role("button", name="Start").click()
            await page.wait_for_function("() => window.sottoDebug.events.some(e => e.type === 'session.ready')")
            await page.get_by_label("Type a message").fill("Typed without a microphone")
            await page.get_by_role("button", name="Send").click()
            await wait_for_events(page, "in", "turn.done", 1, timeout_s=20)
            for failure in failures:
                await page.get_by_label("Type a message").fill(failure)
                await page.get_by_label("Type a message").press("Enter")
            await wait_for_events(page, "in", "error", 1, timeout_s=10)
            await page.wait_for_function("() => window.sottoDebug.state === 'listening'")
            alerts = await page.locator("#alerts").inner_text()
            await page.get_by_label("Type a message").fill(drop_text)
            await page.get_by_label("Type a message").press("Enter")
            await wait_for_events(page, "in", "session.ready", 2, timeout_s=20)
            await page.wait_for_function("() => !document.getElementById('text-input').disabled")
            # A new voice is sent in session.start: the page opens a new session with it.
            await page.get_by_label("Voice").select_option("jm_kumo")
            await wait_for_events(page, "in", "session.ready", 3, timeout_s=20)
            await page.wait_for_function("() => !document.getElementById('text-input').disabled")
            # An answer whose turn.done comes before it has all played; Escape stops it.
            await page.get_by_label("Type a message").fill(long_text)
            await page.get_by_label("Type a message").press("Enter")
            await wait_for_events(page, "in", "turn.done", 2, timeout_s=20)
            await page.wait_for_function("() => window.sottoDebug.state === 'speaking'")
            await page.keyboard.press("Escape")
            await wait_for_events(page, "out", "interrupt", 1, timeout_s=5)
            await page.wait_for_function("() => window.sottoDebug.state === 'listening'")
            return TextOnlyRun(
                log=log,
                alerts=alerts,
                camera_status=await page.locator("#camera-status").inner_text(),
                transcript=await page.locator("#transcript li").all_inner_texts(),
                connection_texts=connection_texts,
                health=await page.locator("#health").inner_text(),
                interrupts=[e for e in await debug(page, "events") if e["type"] == "interrupt"],
            )
        finally:
            await browser.close()
