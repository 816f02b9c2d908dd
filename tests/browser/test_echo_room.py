"""The real page with its microphone in a simulated room (tools/eval/echo.py --room, on the real stack): the answer
reaches the microphone through the room from the loudspeaker, 20 dB below the person, and the person is human
speech a metre away.

The person greets Sotto (the page learns their level), cuts into one answer, which must stop, then says "oh",
"right", "right" over the next three answers, which must each play on.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from tools.eval import echo, echo_room
from tools.stack import start_stack, stop_stack

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ECHO_DB = -20.0


@pytest.fixture(scope="module")
def room_run(vendor_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    setting = echo_room.Room()
    room = echo.PageRoom(setting.impulse(setting.speaker), setting.noise_dbfs)
    speech, backchannels = echo.room_speech(setting, cut_ins=1, backchannels=3)
    user_db = float(np.mean([echo.active_dbfs(s, r) for s, r in speech]))
    stack = start_stack(tmp_path_factory.mktemp("echo-room-stack"), **echo.stack_env())

    async def converse() -> dict:
        gain_db = {ECHO_DB: user_db + ECHO_DB - await echo.answer_level(stack) - room.gain_db}
        return await echo.run_mode(stack, [], 0, 1, ECHO_DB, speech, gain_db, room, backchannels)

    try:
        yield asyncio.run(asyncio.wait_for(converse(), timeout=600))
    finally:
        stop_stack(stack)


def test_a_person_cutting_in_stops_the_answer(room_run: dict) -> None:
    (run,) = room_run["cut_in"]["runs"]
    assert run["said"], "the answer was over before the person cut in"
    assert not run["interrupted_itself"], run
    assert run["interrupted"] and run["cut_in_to_stop_ms"] is not None, run


def test_backchannels_over_the_answer_do_not_stop_it(room_run: dict) -> None:
    runs = room_run["backchannel"]["runs"]
    assert len(runs) == 3 and all(r["said"] for r in runs), runs  # each was said while its answer played
    assert [r["interrupted"] for r in runs] == [False] * 3, runs
