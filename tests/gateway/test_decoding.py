"""Every client message goes through one decoding and validation step: JSON a hostile client can shape (lone
surrogates, deep nesting, huge integer literals) and messages with missing fields get a clear `bad_message`, and
the session stays usable; `protocol` errors close the socket, as docs/protocol.md says.
"""

from __future__ import annotations

import pytest

from services.gateway.wires.protocol import FrameKind, pack_frame
from tests.helpers import eventually


async def _still_usable(client) -> None:
    n = client.types().count("pong")
    await client.send(type="ping")
    await client.wait_for("pong", count=n + 1)


DEEP = '{"type": "ping", "a": ' + "[" * 30000 + "]" * 30000 + "}"  # 60 KB: under the message size limit
HUGE_INT = '{"type": "playback", "turn_id": "", "played_samples": ' + "9" * 5000 + "}"


@pytest.mark.parametrize("raw, says", [
    (r'{"type": "\ud800"}', "surrogate"),
    (r'{"type": "text", "text": "\ud800 What is two plus two?"}', "surrogate"),
    (r'{"type": "text", "text": "\udfff"}', "surrogate"),
    (r'{"type": "ping", "extra": {"\ud83d": 1}}', "surrogate"),  # a key, in a field nobody reads
    (DEEP, "depth"),
    (HUGE_INT, "not valid JSON"),
    ('{"type": "ping", "a": NaN}', "not valid JSON"),
    ('{"type": "interrupt"}', "'turn_id'"),
    ('{"type": "interrupt", "turn_id": "t1"}', "'played_samples'"),
    ('{"type": "playback", "played_samples": 5}', "'turn_id'"),
    ('{"type": "playback", "turn_id": 7, "played_samples": 5}', "'turn_id' must be a string, got an integer"),
    ('{"type": "text"}', "'text'"),
], ids=["surrogate type", "surrogate text", "low surrogate text", "surrogate key", "deep nesting",
        "huge integer", "NaN", "interrupt without fields", "interrupt without played_samples",
        "playback without turn_id", "playback with a numeric turn_id", "text without text"])
async def test_hostile_or_incomplete_messages_get_bad_message_and_the_session_goes_on(stack, connect, raw,
                                                                                      says) -> None:
    client = await connect()
    await client.ws.send_str(raw)
    err = await client.wait_for("error")
    assert err["code"] == "bad_message" and says in err["message"], err
    await _still_usable(client)
    assert "turn.started" not in client.types()
    await client.send(type="text", text="What is two plus two?")  # and turns still run
    assert (await client.wait_for("turn.done"))["finish_reason"] == "stop"


@pytest.mark.parametrize("field", ["voice", "language"])
async def test_a_session_start_with_a_lone_surrogate_is_refused_and_a_good_one_then_works(stack, connect,
                                                                                        field) -> None:
    client = await connect(start=False)
    await client.ws.send_str('{"type": "session.start", "protocol": 1, "sample_rate": 16000, "%s": "\\ud800"}'
                             % field)
    err = await client.wait_for("error")
    assert err["code"] == "bad_message" and "surrogate" in err["message"], err
    assert "session.ready" not in client.types()
    await client.send(type="session.start", protocol=1, sample_rate=16000)
    await client.wait_for("session.ready")
    await _still_usable(client)


async def test_media_before_session_start_is_a_protocol_error_that_closes_the_socket(stack, connect) -> None:
    client = await connect(start=False)
    await client.ws.send_bytes(pack_frame(FrameKind.AUDIO_IN, 0, 0.0, bytes(640)))
    err = await client.wait_for("error")
    assert err["code"] == "protocol" and "session.start" in err["message"], err
    await eventually(lambda: client.ws.closed, 10, "the gateway to close the socket")
