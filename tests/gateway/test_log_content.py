"""SOTTO_LOG_CONTENT: what the user typed and what the assistant answered reach the gateway's logs only when it is
true; otherwise the turn's log lines carry sizes and timings alone."""

from __future__ import annotations

import logging

import pytest

TYPED = "My secret is swordfish."
ANSWER = "Hello there. How are you?"  # what the fake llm says


def _turn_lines(caplog: pytest.LogCaptureFixture) -> dict[str, logging.LogRecord]:
    return {r.getMessage(): r for r in caplog.records
            if r.name == "services.gateway.conversation.turn" and r.getMessage() in ("turn_started", "turn_done")}


async def _typed_turn(connect, caplog: pytest.LogCaptureFixture) -> dict[str, logging.LogRecord]:
    caplog.set_level(logging.INFO, logger="services.gateway.conversation.turn")
    client = await connect()
    await client.send(type="text", text=TYPED)
    await client.wait_for("turn.done")
    lines = _turn_lines(caplog)
    assert set(lines) == {"turn_started", "turn_done"}
    return lines


@pytest.mark.parametrize("stack", [{"common": {"log_content": False}}], indirect=True)
async def test_content_stays_out_of_the_logs_by_default(stack, connect, caplog) -> None:
    lines = await _typed_turn(connect, caplog)
    assert lines["turn_done"].reply_chars == len(ANSWER)  # sizes are logged...
    for record in lines.values():
        fields = str(vars(record))
        assert TYPED not in fields and "Hello there" not in fields  # ...never the words


@pytest.mark.parametrize("stack", [{"common": {"log_content": True}}], indirect=True)
async def test_content_is_logged_when_allowed(stack, connect, caplog) -> None:
    lines = await _typed_turn(connect, caplog)
    assert lines["turn_started"].text == TYPED
    assert lines["turn_done"].reply == ANSWER and lines["turn_done"].heard_text == ANSWER
