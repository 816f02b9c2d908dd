"""Drives the page in Debian's headless Chromium (Python playwright, no downloaded browser) through a scripted
conversation, and records what the browser did: console, requests, screenshots, the page's debug state.

Two microphones: against the fake gateway, Chromium's fake device plays one WAV from the moment capture opens, so
the conversation's timeline is fixed by the fixture (FAKE): the first question, then, while the answer plays, the
user talks over it. Against the real stack, whose answers begin after a time that varies with the machine's load, a
cued microphone (CUED_MIC) speaks each utterance when the driver says it (REAL): the cut-in as soon as the answer
is heard.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from playwright.async_api import ConsoleMessage, Page, Request, Response, async_playwright

from tools.browser import BASE_ARGS, CHROMIUM


@dataclass(frozen=True)
class Timeline:
    """What the fake microphone's file says when. Leading silence covers page start-up (VAD model and WASM load),
    and the second utterance starts while the first answer is still playing."""

    speech: tuple[tuple[float, str], ...]
    total_s: float


# Against the fake gateway: answers come at once, the first is 6 s of audio.
FAKE = Timeline(((4.0, "What is on the table in front of me?"), (9.5, "Wait what colour is the cup")), 14.0)
REPLY_SECONDS = [6.0, 1.5]  # first answer long enough to be interrupted, the later ones short


@dataclass(frozen=True)
class Cues:
    """A conversation on the cued microphone: the question once the page listens, the cut-in as soon as the page
    has played `cut_in_after_samples` of the answer (the cut-in must come while the server still works on that
    answer, so that there is something to cancel). `patience` multiplies every wait."""

    question: str
    cut_in: str
    cut_in_after_samples: int = 1200  # 50 ms at the page's 24 kHz playback: the sooner, the likelier still running
    patience: float = 3.0


REAL = Cues("What is on the table in front of me?", "Wait what colour is the cup")


def chromium_args(camera_y4m: Path, speech_wav: Path | None = None) -> list[str]:
    """Fake devices granted without a prompt; the microphone plays `speech_wav` once, or (None) its own tone, which
    the cued microphone replaces."""
    return [
        *BASE_ARGS,
        "--use-fake-ui-for-media-stream",
        "--use-fake-device-for-media-stream",
        *([f"--use-file-for-fake-audio-capture={speech_wav}%noloop"] if speech_wav else []),
        f"--use-file-for-fake-video-capture={camera_y4m}",
    ]


# Runs before the page's scripts (playwright's init script, outside the page's CSP). The page's microphone becomes
# a MediaStreamAudioDestinationNode: silence, and the utterances the driver passes to sottoTestMic.say(). The fake
# device's own track (a tone) is stopped. Everything downstream (the page's AudioContext, vad-web, the frames on
# the socket) is the page's own code, as with a real microphone.
CUED_MIC = """(() => {
  const devices = navigator.mediaDevices;
  const getUserMedia = devices.getUserMedia.bind(devices);
  devices.getUserMedia = async (constraints) => {
    const stream = await getUserMedia(constraints);
    if (!constraints || !constraints.audio) return stream;
    stream.getAudioTracks().forEach((track) => track.stop());
    const context = new AudioContext();
    await context.resume();
    const mic = context.createMediaStreamDestination();
    window.sottoTestMic = {
      say(pcm16, rate) {
        const buffer = context.createBuffer(1, pcm16.length, rate);
        buffer.copyToChannel(Float32Array.from(pcm16, (v) => v / 32768), 0);
        const source = context.createBufferSource();
        source.buffer = buffer;
        source.connect(mic);
        source.start();
      },
    };
    return new MediaStream([...mic.stream.getAudioTracks(), ...stream.getVideoTracks()]);
  };
})();"""


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


# `n` answers are over and the page listens again: turns the server withdrew (`turn.resumed`: the user went on, and
# the next turn answers the whole utterance) do not count, and the user is not speaking (a withdrawn turn's
# `turn.done` comes while they still are, before its `turn.resumed`).
_ANSWERED_AND_LISTENING = """([n]) => {
  const d = window.sottoDebug;
  const events = d.events.filter(e => e.dir === "in");
  const withdrawn = new Set(events.filter(e => e.type === "turn.resumed").map(e => e.turn_id));
  const answered = events.filter(e => e.type === "turn.done" && !withdrawn.has(e.turn_id)).length;
  return answered >= n && d.state === "listening" && (d.vad === "quiet" || d.vad === "ending");
}"""


async def wait_for_answers(page: Page, count: int, timeout_s: float) -> None:
    await page.wait_for_function(_ANSWERED_AND_LISTENING, arg=[count], timeout=timeout_s * 1000)


class AnswerEnded(Exception):
    """The first answer left nothing to barge in on: it had no audio, or it was over (played, or complete on the
    server) before the user's cut-in was heard."""


# The first answer plays (the worklet's counter rises), or it is over for this attempt: answered without a sound,
# or the user cut in before the page had seen it play (the file's cut-in came too early).
_PLAYING_OR_OVER = """([samples]) => {
  const d = window.sottoDebug;
  if (d.state === "speaking" && d.playedSamples > samples) return true;
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

_PLAYED_MORE_OR_STOPPED = """([samples]) => {
  const d = window.sottoDebug;
  return d.playedSamples > samples || d.state !== "speaking"
    || d.events.some(e => e.dir === "out" && e.type === "interrupt");
}"""
_LISTENING_ON_CUE = """() => window.sottoTestMic !== undefined && window.sottoDebug.state === "listening"
  && window.sottoDebug.events.some(e => e.dir === "in" && e.type === "session.ready")"""


def first_answer_summary(events: list[dict]) -> str:
    """How long the first answer was and why it ended, for AnswerEnded's message."""
    done = next((e for e in events if e["dir"] == "in" and e["type"] == "turn.done"), None)
    return "unfinished" if done is None else f"{len(done['text'])} characters, {done['finish_reason']}"


async def wait_until_first_answer_plays(page: Page, samples: int, wait: float) -> list[int]:
    """Returns the played-sample counter as the answer starts playing; AnswerEnded if it will not."""
    await page.wait_for_function(_PLAYING_OR_OVER, arg=[samples], timeout=30_000 * wait)
    events = await debug(page, "events")
    if any(e["dir"] == "out" and e["type"] == "interrupt" for e in events):
        raise AnswerEnded("the user cut in before the page had played the first answer")
    if await debug(page, "state") != "speaking":
        heard = any(e["dir"] == "in" and e["type"] == "audio.start" for e in events)
        raise AnswerEnded(f"the first answer ({first_answer_summary(events)}) "
                          + ("was over before the page had played any of it" if heard else "had no audio"))
    return [await debug(page, "playedSamples")]


async def played_more(page: Page, played: list[int], wait: float) -> None:
    """Appends the played-sample counter once it has moved past its last value, or once playback stopped (which
    the caller's assertion on the counter then shows): the page's progress, not the time a busy machine took."""
    await page.wait_for_function(_PLAYED_MORE_OR_STOPPED, arg=[played[-1]], timeout=10_000 * wait)
    played.append(await debug(page, "playedSamples"))


async def barge_in_and_finish(page: Page, started: float, wait: float, must_be_running: bool) -> None:
    """Waits for the page's `interrupt`; then for the cut-in's own answer. AnswerEnded when the first answer was
    over first, or (`must_be_running`) already complete on the server, leaving nothing to cancel."""
    await page.wait_for_function(_CUT_IN_OR_OVER, timeout=20_000 * wait)
    so_far = await debug(page, "events")
    cut = next((i for i, e in enumerate(so_far) if e["dir"] == "out" and e["type"] == "interrupt"), None)
    what = f"{time.monotonic() - started:.1f} s in; first answer: {first_answer_summary(so_far[:cut])}"
    if cut is None:
        raise AnswerEnded(f"the first answer had finished playing before the user cut in ({what})")
    # A turn.done that says interrupted is the server's own cut (speech over the answer: it ducks, then cuts, and the
    # page stops on that word), so the answer was still running.
    if must_be_running and any(e["type"] == "turn.done" and not e.get("interrupted") for e in so_far[:cut]):
        raise AnswerEnded("the first answer was complete on the server before the user cut in: "
                          f"nothing was left for the server to cancel ({what})")
    interrupt = so_far[cut]
    if any(e["type"] == "turn.done" and e.get("turn_id") == interrupt["turn_id"] for e in so_far[:cut]) and \
            interrupt["played_samples"] >= (await debug(page, "receivedSamples")).get(interrupt["turn_id"], 0):
        raise AnswerEnded(f"the first answer had been played whole as the user cut in: nothing to cut ({what})")
    # turn.done may come before the answer has played (the real gateway does that): let it finish
    await wait_for_answers(page, 2, timeout_s=50 * wait)


async def type_a_turn_and_collect(page: Page, log: BrowserLog, played: list[int], screenshot: Path,
                                  artifacts: Path, started: float, wait: float) -> ConversationRun:
    await page.get_by_label("Type a message").fill("Hello from the keyboard")
    await page.get_by_label("Type a message").press("Enter")
    await wait_for_answers(page, 3, timeout_s=40 * wait)
    unheard = await page.locator("#transcript li.assistant").first.locator(".unheard").all_inner_texts()
    run = ConversationRun(
        log=log,
        played_while_speaking=played,
        speaking_screenshot=screenshot,
        transcript=await page.locator("#transcript li").all_inner_texts(),
        latency_text=await page.locator("#latency").inner_text(),
        events=await debug(page, "events"),
        frames_sent=await debug(page, "framesSent"),
        unheard_first_answer="".join(unheard),
        state_after=await debug(page, "state"),
        seconds=time.monotonic() - started,
    )
    await page.screenshot(path=str(artifacts / "after.png"), full_page=True)
    return run


@contextlib.asynccontextmanager
async def started_page(args: list[str], base_url: str, log: BrowserLog,
                       init_script: str | None = None) -> AsyncIterator[Page]:
    """The page loaded in a new headless Chromium and started (the Start button clicked); the browser closes after."""
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=args)
        try:
            page = await browser.new_page(viewport={"width": 1100, "height": 800})
            if init_script:
                await page.add_init_script(init_script)
            log.attach(page)
            await page.goto(base_url)
            await page.get_by_role("button", name="Start").click()
            yield page
        finally:
            await browser.close()


async def run_conversation(base_url: str, speech_wav: Path, camera_y4m: Path, artifacts: Path) -> ConversationRun:
    """The fixed-file conversation (the fake gateway's): `speech_wav` says FAKE's utterances at their times."""
    started = time.monotonic()
    log = BrowserLog()
    async with started_page(chromium_args(camera_y4m, speech_wav), base_url, log) as page:
        played = await wait_until_first_answer_plays(page, 4800, 1.0)
        for _ in range(3):
            await played_more(page, played, 1.0)
        screenshot = artifacts / "speaking.png"
        await page.screenshot(path=str(screenshot), full_page=True)
        await barge_in_and_finish(page, started, 1.0, must_be_running=False)
        return await type_a_turn_and_collect(page, log, played, screenshot, artifacts, started, 1.0)


async def say(page: Page, pcm16: np.ndarray, rate: int) -> None:
    """Starts an utterance on the cued microphone and returns at once: the page hears it in real time."""
    await page.evaluate("([pcm16, rate]) => { window.sottoTestMic.say(pcm16, rate); }", [pcm16.tolist(), rate])


async def run_cued_conversation(base_url: str, camera_y4m: Path, artifacts: Path, cues: Cues,
                                speech: dict[str, tuple[np.ndarray, int]]) -> ConversationRun:
    """The real stack's conversation: the question once the page listens; the cut-in as soon as the answer is
    heard; then the typed turn. `speech[text]` is each utterance's PCM16 and rate."""
    started = time.monotonic()
    wait = cues.patience
    log = BrowserLog()
    async with started_page(chromium_args(camera_y4m), base_url, log, CUED_MIC) as page:
        await page.wait_for_function(_LISTENING_ON_CUE, timeout=30_000 * wait)
        await say(page, *speech[cues.question])
        played = await wait_until_first_answer_plays(page, cues.cut_in_after_samples, wait)
        await say(page, *speech[cues.cut_in])
        # the page keeps playing until its VAD has heard 300 ms of the cut-in
        await played_more(page, played, wait)
        screenshot = artifacts / "speaking.png"
        await page.screenshot(path=str(screenshot), full_page=True)
        await barge_in_and_finish(page, started, wait, must_be_running=True)
        return await type_a_turn_and_collect(page, log, played, screenshot, artifacts, started, wait)


@dataclass
class TextOnlyRun:
    log: BrowserLog
    alerts: str
    camera_status: str
    transcript: list[str]
    connection_texts: list[str]
    health: str
    interrupts: list[dict]
    playback_before_stall: dict  # the player's gap report (sottoDebug.playback) after a turn paced as TTS is
    playback_after_stall: dict   # ... and after a turn whose audio stopped coming for a while mid-answer


# Without --use-fake-ui-for-media-stream headless Chromium denies the permission prompt; with it but without fake
# devices, this (device-less) machine has no microphone or camera to give.
NO_MIC_ARGS = {
    "denied": [*BASE_ARGS, "--use-fake-device-for-media-stream"],
    "missing": [*BASE_ARGS, "--use-fake-ui-for-media-stream"],
}


async def run_text_only(base_url: str, mode: str, failures: list[str], drop_text: str,
                        long_text: str, stalled_text: str) -> TextOnlyRun:
    """Start without a usable microphone, type a turn, then one whose audio stalls mid-way, then texts the server
    answers with failures, then one that makes it drop the socket; the page reconnects; then pick another voice; then
    stop a long answer with Escape."""
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
            playback_before_stall = await debug(page, "playback")
            await page.get_by_label("Type a message").fill(stalled_text)
            await page.get_by_label("Type a message").press("Enter")
            await wait_for_events(page, "in", "turn.done", 2, timeout_s=20)
            playback_after_stall = await debug(page, "playback")
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
            await wait_for_events(page, "in", "turn.done", 3, timeout_s=20)
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
                playback_before_stall=playback_before_stall,
                playback_after_stall=playback_after_stall,
            )
        finally:
            await browser.close()
