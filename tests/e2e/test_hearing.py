"""A spoken conversation with a model that takes text only, on the real stack and the offline kit: SmolLM2-135M
(LiteRT-LM), Kokoro (kokoro-onnx), Silero and Whisper tiny.en. No fakes.

The stack logs conversation content (SOTTO_LOG_CONTENT) so that what the llm service received can be checked.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator

import pytest

from services.gateway.client import GatewayClient
from services.llm.loading import OFFLINE_MODEL
from tools.stack import RealStack, model_dir, start_stack, stop_stack

SMOLLM2 = model_dir() / "offline" / OFFLINE_MODEL
QUESTION = "What is the capital of France?"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def words(text: str) -> list[str]:
    return re.sub(r"[^\w' ]+", " ", text.lower()).split()


@pytest.fixture(scope="module")
def cascade_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    if not SMOLLM2.exists():
        pytest.skip(f"{SMOLLM2} is missing: `make models-offline` builds the offline SmolLM2")
    stack = start_stack(tmp_path_factory.mktemp("cascade"), SOTTO_LLM_MODEL=str(SMOLLM2), SOTTO_LOG_CONTENT="true",
                        SOTTO_LLM_MAX_NEW_TOKENS="24")
    yield stack
    stop_stack(stack)


def llm_requests(stack: RealStack) -> dict[str, dict]:
    return {e["turn_id"]: e for e in stack.log_events("llm") if e["event"] == "generate_request"}


async def test_a_spoken_question_is_heard_answered_and_remembered_after_a_barge_in(cascade_stack, utterance):
    async with GatewayClient(cascade_stack.ws_url) as client:
        ready = await client.connect()
        assert ready["model"]["audio_input"] is False  # SmolLM2: spoken turns go as their words

        spoken = await client.spoken_turn(utterance(QUESTION), timeout=180)
        transcript = next(e for e in spoken.events if e["type"] == "transcript")
        assert words(transcript["text"]) == words(QUESTION)
        types = spoken.types
        assert types.index("turn.started") < types.index("transcript") < types.index("text.delta"), types
        assert spoken.done["finish_reason"] in ("stop", "length") and len(spoken.audio) >= 2048 * 2
        first = llm_requests(cascade_stack)[spoken.done["turn_id"]]
        assert first["audio_bytes"] == 0 and words(first["text"]) == words(QUESTION)  # the words are the message
        assert spoken.done["timings"]["asr_ms"] >= 0

        # A reply cut at its first audio: the llm service cannot reuse its conversation after it...
        await client.send(type="text", text="Tell me a long story about it.")
        started = await client.expect("audio.start", timeout=180)
        await client.send(type="interrupt", turn_id=started["turn_id"], played_samples=0)
        interrupted = await client.collect_turn(time.monotonic(), timeout=120)
        assert interrupted.done["interrupted"] is True

        # ...so the next turn's conversation is rebuilt from the history, which holds the spoken words.
        after = await client.text_turn("Thank you.", timeout=180)
        assert after.done["finish_reason"] in ("stop", "length")
    request = llm_requests(cascade_stack)[after.done["turn_id"]]
    assert words(QUESTION) == words(request["history"].split(" | ")[0])
    generated = [e for e in cascade_stack.log_events("llm")
                 if e["event"] == "generated" and e.get("turn_id") == after.done["turn_id"]]
    assert generated and generated[-1]["reused"] is False
