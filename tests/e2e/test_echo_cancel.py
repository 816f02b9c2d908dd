"""The server's echo canceller on the real stack: a /ws client without its own VAD plays the answer (SmolLM2's
words in Piper's English voice) on a loudspeaker its microphone hears, and streams that microphone in real time.

Without the canceller the real vad hears the answer's own voice and the session takes it for the user; with it the
session hears nothing while the answer plays, yet a person who speaks over the answer is heard at once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator

import aiohttp
import pytest

from tests.gateway.conftest import Client
from tests.gateway.test_echo_cancel_session import Loudspeaker
from tools.eval.echo import stack_env
from tools.eval.human_speech import asterisk_clips
from tools.stack import RealStack, start_stack, stop_stack

QUESTION = "Tell me about the sea."
CUT_IN_AFTER_S = 1.5  # after the answer's first audio


@pytest.fixture(scope="module")
def echo_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    """SmolLM2 and Piper's English voice, answers long enough to carry seconds of echo (tools.eval.echo's)."""
    stack = start_stack(tmp_path_factory.mktemp("echo"), **stack_env())
    yield stack
    stop_stack(stack)


@pytest.fixture
async def open_client(echo_stack: RealStack) -> AsyncIterator:
    sessions: list[tuple[aiohttp.ClientSession, Client]] = []

    async def _open(echo_cancel: str) -> Client:
        http = aiohttp.ClientSession()
        client = Client(await http.ws_connect(echo_stack.ws_url))
        sessions.append((http, client))
        await client.send(type="session.start", protocol=1, sample_rate=16000, echo_cancel=echo_cancel)
        ready = await client.wait_for("session.ready", timeout=30)
        assert ready["turn"]["echo_cancel"] is (echo_cancel == "on")
        return client

    yield _open
    for http, client in sessions:
        await client.close()
        await http.close()


async def converse(client: Client, cut_in=None) -> tuple[dict, list[float], float | None]:
    """One typed question whose answer plays into the streaming microphone (and, with `cut_in`, a person speaking
    over it): the turn's end, when each speech start arrived (monotonic), and when the person began."""
    speaker, stop = Loudspeaker(client), asyncio.Event()
    mic = asyncio.create_task(speaker.stream(stop))
    spoke_at = None
    try:
        await asyncio.sleep(0.5)
        await client.send(type="text", text=QUESTION)
        await client.wait_for("audio.start", timeout=60)
        if cut_in is not None:
            spoke_at = time.monotonic() + CUT_IN_AFTER_S
            speaker.speak(cut_in, spoke_at)
        done = await client.wait_for("turn.done", timeout=60)
        # the answer plays on after its last chunk was sent: listen until it has ended, and a little after
        await asyncio.sleep(max(0.0, speaker.ends_at - time.monotonic()) + 1.0)
    finally:
        stop.set()
        await mic
    starts = [at for at, e in zip(client.event_times, client.events) if e["type"] == "speech.started"]
    return done, starts, spoke_at


def heard(client: Client) -> list[float]:
    """When the session heard speech over the answer: it ducks the answer at once (turn.duck), and announces the
    speech (speech.started) once it cuts it (conversation/backchannel.py)."""
    return [at for at, e in zip(client.event_times, client.events) if e["type"] in ("turn.duck", "speech.started")]


async def test_the_answers_echo_is_heard_without_the_canceller_and_not_with_it(open_client) -> None:
    without = await open_client("off")
    await converse(without)
    assert heard(without), "the answer's echo was not heard even without the canceller: this test tests nothing"
    # Its echo became a turn of its own, still being answered: closed, so that the llm and tts serve only the next
    # session (a second answer at once made this one's audio come in fits, which is another test's question).
    await without.close()
    with_it = await open_client("on")
    done, _, _ = await converse(with_it)
    assert heard(with_it) == [] and not done["interrupted"], f"the cancelled echo was heard: {with_it.types()}"


async def test_a_person_speaking_over_the_cancelled_echo_is_heard(open_client) -> None:
    person = next(c.audio for c in asterisk_clips() if c.id == "asterisk/all-circuits-busy-now")
    client = await open_client("on")
    _, _, spoke_at = await converse(client, cut_in=person)
    starts = heard(client)
    assert starts, "the person's cut-in was not heard"
    assert spoke_at is not None and spoke_at < starts[0] < spoke_at + 1.0, (spoke_at, starts)
