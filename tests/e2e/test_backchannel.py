"""Backchannels on the real stack (vad, asr, llm, tts services): a /ws client without its own VAD plays the answer
(SmolLM2's words in Piper's voice) on a loudspeaker its microphone hears, the server's echo canceller on, and a
person speaks over it. A human one-word backchannel ("oh", "right": tools/eval/backchannels.py) lowers the answer
and the answer goes on to its end; a human sentence stops it (conversation/backchannel.py)."""

from __future__ import annotations

import pytest

from tests.e2e.test_echo_cancel import converse, echo_stack, open_client  # noqa: F401 (fixtures)
from tools.eval.backchannels import backchannels
from tools.eval.human_speech import asterisk_clips

pytestmark = pytest.mark.timeout(300)


@pytest.mark.parametrize("name", ["oh", "right (ascii125)"])
async def test_a_human_backchannel_over_the_answer_does_not_stop_it(open_client, name: str) -> None:  # noqa: F811
    sound = next(s for s in backchannels() if s.name == name)
    client = await open_client("on")
    done, starts, _ = await converse(client, cut_in=sound.audio)
    verdict = await client.wait_for("turn.unduck", timeout=30)  # the backchannel was heard, and let go
    types = client.types()
    assert "turn.duck" in types and verdict["turn_id"] == done["turn_id"], types
    assert not done["interrupted"] and "turn.cut" not in types, f"the backchannel stopped the answer: {types}"
    assert starts == [] and types.count("turn.started") == 1, f"the backchannel became a turn: {types}"
    assert "error" not in types


async def test_a_human_cut_in_over_the_answer_stops_it(open_client) -> None:  # noqa: F811
    person = next(c.audio for c in asterisk_clips() if c.id == "asterisk/all-circuits-busy-now")
    client = await open_client("on")
    done, starts, spoke_at = await converse(client, cut_in=person)
    types = client.types()
    assert starts and spoke_at is not None, f"the cut-in was not taken as speech: {types}"
    assert done["interrupted"] or "turn.cut" in types, f"the cut-in did not stop the answer: {types}"
    assert types.index("turn.duck") < types.index("speech.started")  # lowered first, then stopped
