"""Faults on the real stack: a model service killed or hung in the middle of a turn, and the gateway restarted.

What must hold: the client of the turn gets an `error` event within the request deadline, nothing waits forever,
the runner restarts what died, the next turn succeeds, and another session open meanwhile sees nothing but
`health` (and `error`) events and stays usable.
"""

from __future__ import annotations

import asyncio
import shutil
import signal
import time

import pytest

from services.gateway.client import GatewayClient
from tests.reliability.conftest import ANSWER_WAIT_MS, REQUEST_TIMEOUT_MS, kill, pids, restarts, wait_restarted
from tools.stack import RealStack

DEADLINE_S = REQUEST_TIMEOUT_MS / 1000  # the vad's: a stream not accepted, stalled input
ANSWER_WAIT_S = ANSWER_WAIT_MS / 1000  # the llm's and tts's: a turn's first text, then its first audio
SLACK_S = 2.0          # event-loop and loopback latency on a small shared CPU
POLL_DOWN_S = 2.0      # the gateway's health poll: one 1 s interval plus its 1 s check timeout
TURN_TIMEOUT_S = 120   # a healthy turn on the offline models, generously
MEASURED: dict[str, float] = {}


class Observer:
    """A bystander session: records everything the gateway sends it while another session suffers a fault."""

    def __init__(self, client: GatewayClient) -> None:
        self.client = client
        self.seen: list[dict | bytes] = []
        self.closed = False
        self._task = asyncio.create_task(self._pump())

    async def _pump(self) -> None:
        while (item := await self.client.events.get()) is not None:
            self.seen.append(item)
        self.closed = True

    async def back_to_serving(self, service: str, since: float, timeout: float = 120) -> float:
        """Seconds from `since` until this session is told `service` is SERVING again after going down."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            health = [e["status"] for e in self.seen if isinstance(e, dict) and e["type"] == "health"
                      and e["service"] == service]
            if "SERVING" in health[1:] or (health and health[0] != "SERVING" and health[-1] == "SERVING"):
                return time.monotonic() - since
            await asyncio.sleep(0.05)
        raise AssertionError(f"{service} never came back: health events {self.seen}")

    async def assert_only_health_seen(self) -> None:
        """Only health/error events arrived, the socket is open, and ping still gets pong."""
        n = len(self.seen)
        await self.client.send(type="ping")
        for _ in range(200):
            if any(isinstance(e, dict) and e["type"] == "pong" for e in self.seen[n:]):
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the other session did not answer ping")
        assert not self.closed, "the gateway closed the other session"
        others = [e for e in self.seen if not isinstance(e, dict) or e["type"] not in ("health", "error", "pong")]
        assert not others, f"the other session saw more than health/error events: {others[:5]}"
        self.stop()

    def stop(self) -> None:
        self._task.cancel()


async def expect_turn_error(client: GatewayClient, sent_at: float, limit_s: float) -> tuple[dict, float]:
    """The turn's `error` event (and then its `turn.done`) within `limit_s` of sending it."""
    error = await client.expect("error", timeout=limit_s + 5)
    waited = time.monotonic() - sent_at
    assert waited < limit_s, f"the error came after {waited:.1f} s (limit {limit_s:.1f} s): {error}"
    done = await client.expect("turn.done", timeout=10)
    assert done["finish_reason"] == "error" and done["turn_id"] == error["turn_id"]
    return error, waited


async def next_turn_works(client: GatewayClient) -> None:
    record = await client.text_turn("Are you back?", timeout=TURN_TIMEOUT_S)
    errors = [e for e in record.events if e["type"] == "error"]
    assert record.done["finish_reason"] in ("stop", "length", "degraded"), errors
    assert record.audio, "the turn after the recovery had no audio"


async def heard_again(client: GatewayClient, speech: bytes) -> None:
    """After SIGCONT the vad is SERVING again and the same session's speech makes a turn."""
    await client.expect("health", timeout=10)
    record = await client.spoken_turn(speech, timeout=TURN_TIMEOUT_S)
    assert record.done["finish_reason"] in ("stop", "length", "degraded"), record.events


@pytest.mark.parametrize("service", ["llm", "tts"])
async def test_sigkill_mid_turn_errors_restarts_and_recovers(stack: RealStack, service: str) -> None:
    # SIGSTOP first so the SIGKILL lands while the service holds the turn's request (the tiny llm would
    # otherwise finish at once), then kill: the gRPC connection is reset under the gateway's feet.
    async with GatewayClient(stack.ws_url) as client, GatewayClient(stack.ws_url) as bystander:
        observer = Observer(bystander)
        victim = pids(stack)[service]
        before = restarts(stack, service)
        kill(victim, signal.SIGSTOP)
        sent_at = time.monotonic()
        await client.send(type="text", text="Tell me about the weather today.")
        await client.expect("turn.started", timeout=10)
        if service == "tts":
            await client.expect("text.delta", timeout=10)  # the llm answered; tts holds the sentence
        killed_at = time.monotonic()
        kill(victim, signal.SIGKILL)
        error, waited = await expect_turn_error(client, sent_at, ANSWER_WAIT_S + SLACK_S)
        assert error["code"] in ("unavailable", "timeout"), error
        MEASURED[f"{service}_error_s"] = waited
        MEASURED[f"{service}_restart_s"] = await observer.back_to_serving(service, killed_at)
        assert restarts(stack, service) == before + 1
        await next_turn_works(client)
        await observer.assert_only_health_seen()
    print(f"\n{service}: error after {waited:.2f} s, healthy again after {MEASURED[f'{service}_restart_s']:.1f} s")


async def test_sigkill_vad_mid_utterance(stack: RealStack, utterance) -> None:
    speech = utterance("Hello there, can you hear me clearly now?")
    async with GatewayClient(stack.ws_url) as client, GatewayClient(stack.ws_url) as bystander:
        observer = Observer(bystander)
        victim = pids(stack)["vad"]
        await client.send_audio(speech[: len(speech) // 4 * 2])  # the first half, whole samples
        await client.expect("speech.started", timeout=10)
        sent_at = killed_at = time.monotonic()
        kill(victim, signal.SIGKILL)
        error = await client.expect("error", timeout=DEADLINE_S + SLACK_S)
        waited = time.monotonic() - sent_at
        assert error["code"] == "unavailable" and "vad" in error["message"], error
        MEASURED["vad_error_s"] = waited
        # the vad restarts in about a second, which the gateway's 1 s health poll can miss: ask the runner
        MEASURED["vad_restart_s"] = (time.monotonic() - killed_at) + await asyncio.to_thread(
            wait_restarted, stack, "vad", victim)
        record = await client.spoken_turn(speech, timeout=TURN_TIMEOUT_S)  # the vad stream reopens by itself
        errors = [e for e in record.events if e["type"] == "error"]
        assert record.done["finish_reason"] in ("stop", "length", "degraded"), errors
        await observer.assert_only_health_seen()
    print(f"\nvad: error after {waited:.2f} s, healthy again after {MEASURED['vad_restart_s']:.1f} s")


@pytest.mark.parametrize("service", ["llm", "tts"])
async def test_sigstop_hang_hits_the_deadline_then_sigcont_recovers(stack: RealStack, service: str) -> None:
    async with GatewayClient(stack.ws_url) as client, GatewayClient(stack.ws_url) as bystander:
        observer = Observer(bystander)
        victim = pids(stack)[service]
        kill(victim, signal.SIGSTOP)
        try:
            sent_at = time.monotonic()
            await client.send(type="text", text="Is anybody listening?")
            error, waited = await expect_turn_error(client, sent_at, ANSWER_WAIT_S + SLACK_S)
            assert error["code"] == "timeout" and service in error["message"], error
            assert waited >= ANSWER_WAIT_S - 0.5, f"the deadline fired early ({waited:.2f} s)"
        finally:
            kill(victim, signal.SIGCONT)
        assert pids(stack)[service] == victim, "a hang is not a crash: the runner must not restart it"
        await next_turn_works(client)
        await observer.assert_only_health_seen()
    print(f"\n{service} hung: error after {waited:.2f} s")



async def test_sigstop_vad_mid_utterance_stalls_out_and_is_reported_as_down(stack: RealStack, utterance) -> None:
    """The vad stream has no per-message deadline (silence produces no events, so a hang looks like silence).
    What bounds a hang instead: the gateway's health poll tells every session the vad is DOWN, and an utterance
    left open is dropped with `stalled_input` one request timeout after its audio stops. Typed turns go on."""
    speech = utterance("Hello there, can you hear me clearly now?")
    async with GatewayClient(stack.ws_url) as client:
        observer = Observer(client)
        victim = pids(stack)["vad"]
        await client.send_audio(speech[: len(speech) // 4 * 2])
        deadline = time.monotonic() + 10
        while not any(isinstance(e, dict) and e["type"] == "speech.started" for e in observer.seen):
            assert time.monotonic() < deadline, "no speech.started"
            await asyncio.sleep(0.05)
        stopped_at = time.monotonic()
        kill(victim, signal.SIGSTOP)
        try:
            await client.send(type="audio.end")  # the user stopped talking; the hung vad will never say so
            deadline = time.monotonic() + DEADLINE_S + SLACK_S + 1
            while not any(isinstance(e, dict) and e["type"] == "error" for e in observer.seen):
                assert time.monotonic() < deadline, f"the open utterance was never dropped: {observer.seen}"
                await asyncio.sleep(0.05)
            stalled_s = time.monotonic() - stopped_at
            errors = [e for e in observer.seen if isinstance(e, dict) and e["type"] == "error"]
            assert errors[0]["code"] == "stalled_input", errors
            down = [e for e in observer.seen if isinstance(e, dict) and e.get("service") == "vad"
                    and e.get("status") == "DOWN"]
            assert down, f"no health DOWN for the hung vad: {observer.seen}"
            observer.stop()
            await next_turn_works(client)  # typed turns do not need the vad
        finally:
            kill(victim, signal.SIGCONT)
        await heard_again(client, speech)
    MEASURED["vad_hang_stalled_s"] = stalled_s
    print(f"\nvad hung mid-utterance: stalled_input after {stalled_s:.1f} s")


async def test_speech_that_starts_while_the_vad_is_hung_gets_one_clear_error(stack: RealStack, utterance) -> None:
    """A hung vad keeps its stream open and answers nothing, which looks like silence. On the health poll's DOWN
    the session replaces its silent stream; the replacement, never answered, is given up one request timeout
    later with `unavailable`, once. After SIGCONT the same session is heard again."""
    speech = utterance("Hello there, can you hear me clearly now?")
    quiet = bytes(2 * 16000 // 2)
    async with GatewayClient(stack.ws_url) as client:
        observer = Observer(client)
        victim = pids(stack)["vad"]
        await client.send_audio(quiet, realtime=True)  # the session's vad stream is open and heard
        stopped_at = time.monotonic()
        kill(victim, signal.SIGSTOP)
        try:
            for _ in range(3):
                await client.send_audio(speech, realtime=True)
                if any(isinstance(e, dict) and e["type"] == "error" for e in observer.seen):
                    break
            deadline = stopped_at + POLL_DOWN_S + DEADLINE_S + SLACK_S
            while not any(isinstance(e, dict) and e["type"] == "error" for e in observer.seen):
                assert time.monotonic() < deadline, f"speech to a hung vad was never reported: {observer.seen}"
                await asyncio.sleep(0.05)
            told_s = time.monotonic() - stopped_at
            errors = [e for e in observer.seen if isinstance(e, dict) and e["type"] == "error"]
            assert len(errors) == 1 and errors[0]["code"] == "unavailable", errors
            assert "speech is not heard" in errors[0]["message"], errors
            assert not any(isinstance(e, dict) and e["type"] == "speech.started" for e in observer.seen)
            observer.stop()
        finally:
            kill(victim, signal.SIGCONT)
        await heard_again(client, speech)
    MEASURED["vad_hang_speech_told_s"] = told_s
    print(f"\nspeech to a hung vad: unavailable after {told_s:.1f} s")


async def test_gateway_killed_the_page_reconnects_by_itself(stack: RealStack) -> None:
    """The real page in headless Chromium (no microphone: typed turns) loses its gateway to SIGKILL; the runner
    restarts the gateway on the same port and the page opens a new session by itself, then answers a turn."""
    from playwright.async_api import async_playwright

    from tests.browser import page_driver

    if not shutil.which(page_driver.CHROMIUM):
        pytest.fail(f"{page_driver.CHROMIUM} is missing: apt-get install -y chromium")
    async with async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=page_driver.CHROMIUM, headless=True,
                                           args=page_driver.NO_MIC_ARGS["denied"])
        try:
            page = await browser.new_page()
            texts: list[str] = []
            await page.expose_function("recordConnection", lambda text: texts.append(text))
            await page.goto(stack.http_url + "/")
            await page.evaluate("""new MutationObserver(() => window.recordConnection(
                document.getElementById('connection').textContent)).observe(
                document.getElementById('connection'), {childList: true, characterData: true, subtree: true})""")
            await page.get_by_role("button", name="Start").click()
            await page_driver.wait_for_events(page, "in", "session.ready", 1, timeout_s=30)
            await page.get_by_label("Type a message").fill("Before the restart")
            await page.get_by_label("Type a message").press("Enter")
            await page_driver.wait_for_events(page, "in", "turn.done", 1, timeout_s=TURN_TIMEOUT_S)

            victim = pids(stack)["gateway"]
            killed_at = time.monotonic()
            kill(victim, signal.SIGKILL)
            await page_driver.wait_for_events(page, "in", "session.ready", 2, timeout_s=60)
            reconnect_s = time.monotonic() - killed_at
            MEASURED["gateway_reconnect_s"] = reconnect_s
            assert pids(stack)["gateway"] != victim and restarts(stack, "gateway") == 1
            assert any(t.startswith("Connection lost — reconnecting in") for t in texts), texts
            await page.wait_for_function("() => !document.getElementById('text-input').disabled")
            await page.get_by_label("Type a message").fill("After the restart")
            await page.get_by_label("Type a message").press("Enter")
            await page_driver.wait_for_events(page, "in", "turn.done", 2, timeout_s=TURN_TIMEOUT_S)
            done = [e for e in await page_driver.debug(page, "events") if e["type"] == "turn.done"]
            assert done[-1]["finish_reason"] in ("stop", "length", "degraded"), done[-1]
        finally:
            await browser.close()
    print(f"\ngateway SIGKILLed: the page had a new session after {reconnect_s:.1f} s")
