"""Log lines are JSON and carry the session and turn ids, also across a gRPC hop."""

from __future__ import annotations

import io
import json
import logging

from services.common import logs


def test_log_line_is_json_with_ids() -> None:
    stream = io.StringIO()
    logs.setup("vad")
    logging.getLogger().handlers[0].setStream(stream)
    with logs.bound(session_id="s1", turn_id="t1"):
        logging.getLogger("x").info("turn_done", extra={"ttfa_ms": 812.5})
    line = json.loads(stream.getvalue().strip())
    assert line["service"] == "vad" and line["event"] == "turn_done"
    assert (line["session_id"], line["turn_id"], line["ttfa_ms"]) == ("s1", "t1", 812.5)


def test_ids_round_trip_through_grpc_metadata() -> None:
    with logs.bound(session_id="s9", turn_id="t9"):
        metadata = logs.grpc_metadata()
    logs.bind_from_grpc(metadata)
    assert (logs.SESSION_ID.get(), logs.TURN_ID.get()) == ("s9", "t9")


def test_content_fields_only_where_allowed() -> None:
    assert logs.content(False, text="hello") == {}
    assert logs.content(True, text="hello") == {"text": "hello"}
