"""The page lowers an answer the server ducks (turn.duck) without stopping it, brings it back on turn.unduck, and
stops it when the server cuts it (an interrupted turn.done): speech over an answer, conversation/backchannel.py."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path

from playwright.async_api import Page, async_playwright

from tests.browser import fake_gateway, page_driver
from tests.browser.conftest import serve_fake_gateway

DUCKED = 10 ** (-15 / 20)


@dataclass
class Sample:
    t: float       # seconds since the first event of its phase
    gain: float
    played: int


async def _watch(page: Page, until: str, count: int, after_s: float) -> list[Sample]:
    """The player's gain and played samples every 50 ms, until the `count`-th `until` event came, and `after_s` more."""
    samples: list[Sample] = []
    loop = asyncio.get_running_loop()
    t0, end = loop.time(), None
    while end is None or loop.time() < end:
        gain, played, seen = await page.evaluate(f"""() => [window.sottoDebug.gain, window.sottoDebug.playedSamples,
            window.sottoDebug.events.filter(e => e.dir === 'in' && e.type === '{until}').length]""")
        samples.append(Sample(loop.time() - t0, gain, played))
        if end is None and seen >= count:
            end = loop.time() + after_s
        await asyncio.sleep(0.05)
    return samples


async def _type(page: Page, text: str) -> None:
    await page.get_by_label("Type a message").fill(text)
    await page.get_by_label("Type a message").press("Enter")


def test_the_page_ducks_an_answer_then_brings_it_back_or_stops_it_on_the_servers_word(vendor_dir: Path) -> None:
    recorder = fake_gateway.Recorder()

    async def run() -> tuple[list[Sample], list[Sample], list[dict]]:
        async with serve_fake_gateway(vendor_dir, recorder, fake_gateway.Script([1.0], backchannel=True)) as url:
            async with async_playwright() as pw:
                browser = await pw.chromium.launch(executable_path=page_driver.CHROMIUM, headless=True,
                                                   args=page_driver.NO_MIC_ARGS["denied"])
                try:
                    page = await browser.new_page()
                    await page.goto(url)
                    await page.get_by_role("button", name="Start").click()
                    await page.wait_for_function("() => window.sottoDebug.events.some(e => e.type === 'session.ready')")
                    await _type(page, fake_gateway.DUCKED_ANSWER)
                    await page_driver.wait_for_events(page, "in", "turn.duck", 1, timeout_s=20)
                    resumed = await _watch(page, "turn.unduck", 1, after_s=0.6)
                    await page.wait_for_function("() => window.sottoDebug.state === 'listening'", timeout=20_000)
                    await _type(page, fake_gateway.DUCKED_CUT)
                    await page_driver.wait_for_events(page, "in", "turn.duck", 2, timeout_s=20)
                    cut = await _watch(page, "turn.done", 2, after_s=0.6)
                    return resumed, cut, await page_driver.debug(page, "events")
                finally:
                    await browser.close()

    resumed, cut, events = asyncio.run(asyncio.wait_for(run(), timeout=90))
    # Ducked at once (ramped within a few tens of ms), and the answer plays on meanwhile
    low = [s for s in resumed if s.t < fake_gateway.DUCK_HELD_S - 0.1]
    assert all(s.gain < DUCKED * 1.2 for s in low[4:]), [round(s.gain, 3) for s in low]
    assert low[-1].played > low[0].played + 0.5 * fake_gateway.RATE_OUT, "the answer paused while ducked"
    # turn.unduck: full volume again, still playing where it was; and it played out whole, never interrupted
    assert resumed[-1].gain > 0.95 and resumed[-1].played > low[-1].played
    assert not [e for e in events if e["dir"] == "out" and e["type"] == "interrupt"
                and e["turn_id"] == "t0"], "the page stopped an answer the server only ducked"
    # The cut: the page stops its buffered audio and says how much was heard
    (interrupt,) = [e for e in events if e["dir"] == "out" and e["type"] == "interrupt"]
    assert interrupt["turn_id"] == "t1" and interrupt["played_samples"] > 0
    assert cut[-1].played == cut[-4].played, "the page played on after the server cut the answer"
