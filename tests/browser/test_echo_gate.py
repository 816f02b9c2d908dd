"""The barge-in gate in the real page against real echo: headless Chromium whose microphone hears the page's own
answer (tools/eval/echo_page.py), on the real stack (SmolLM2 answers, Piper speaks them, as in `make eval-echo`).

The user greets Sotto first (the page learns their speech level), then an answer plays with its echo 20 dB below
the user's speech and must play out; then the user cuts into the next answer, which must stop; then says "oh" (a
person's recording) over a third, which must play on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from tools.eval import echo, echo_room
from tools.eval.backchannels import backchannels
from tools.eval.echo_page import Answer, echo_page, set_echo, spoken_turn, typed_answer
from tools.speech import speak
from tools.stack import start_stack, stop_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

ECHO_DB = -20.0


@dataclass
class EchoRun:
    echoed: Answer
    cut: Answer
    backchannel: Answer
    gain_db: float


@pytest.fixture(scope="module")
def echo_run(vendor_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[EchoRun]:
    folder = tmp_path_factory.mktemp("echo-speech")
    greeting, cut_in = (speak(text, voice, echo.MIC_RATE, folder) for text, voice in (echo.GREETING, echo.CUT_INS[0]))
    user_db = min(echo.active_dbfs(greeting, echo.MIC_RATE), echo.active_dbfs(cut_in, echo.MIC_RATE))
    (oh,) = [s.audio for s in backchannels() if s.name == "oh"]
    oh = np.rint(echo_room.at_level(oh, user_db)).astype(np.int16)
    stack = start_stack(tmp_path_factory.mktemp("echo-stack"), **echo.stack_env())

    async def converse() -> EchoRun:
        gain_db = user_db + ECHO_DB - await echo.answer_level(stack)
        async with echo_page(stack.http_url + "/") as page:
            await spoken_turn(page, greeting, echo.MIC_RATE)
            await set_echo(page, gain_db, 35)
            echoed = await typed_answer(page, echo.PROMPTS[0])
            cut = await typed_answer(page, echo.PROMPTS[1], cut_in=(cut_in, echo.MIC_RATE),
                                     cut_in_after_s=echo.CUT_IN_AFTER_S)
            backchannel = await typed_answer(page, echo.PROMPTS[2], cut_in=(oh, echo.RATE_16K),
                                             cut_in_after_s=echo.BACKCHANNEL_AFTER_S)
            return EchoRun(echoed, cut, backchannel, gain_db)

    try:
        yield asyncio.run(asyncio.wait_for(converse(), timeout=400))
    finally:
        stop_stack(stack)


def test_the_answer_plays_out_over_its_own_echo(echo_run: EchoRun) -> None:
    echoed = echo_run.echoed
    assert echoed.played_s > 2.0, echoed  # seconds of echo reached the microphone
    assert not echoed.interrupted, f"the answer's echo ({echo_run.gain_db:+.1f} dB) made it interrupt itself"


def test_the_user_cutting_in_stops_the_answer(echo_run: EchoRun) -> None:
    cut = echo_run.cut
    assert cut.said_at_ms is not None, "the answer was over before the user cut in"
    assert not cut.interrupted_itself, cut
    assert cut.interrupted and cut.cut_in_to_stop_ms is not None, cut  # playback stopped after the user spoke


def test_an_oh_over_the_answer_and_its_echo_does_not_stop_it(echo_run: EchoRun) -> None:
    """A person's "oh" over an answer whose echo the microphone hears ducks it and lets it play on (the backchannel
    rule, services/gateway/conversation/backchannel.py)."""
    said = echo_run.backchannel
    assert said.said_at_ms is not None, "the answer was over before the user said oh"
    assert not said.interrupted, said
    assert said.played_s > echo.BACKCHANNEL_AFTER_S + 1.5, said  # it played on past the "oh"
