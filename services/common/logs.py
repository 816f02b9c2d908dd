"""JSON-lines logging with the session and turn ids that follow a turn across services.

The ids live in context variables: the gateway binds them when a turn starts, sends them as gRPC metadata,
and each service binds them again at the top of its handler (`bind_from_grpc`). Every log record then carries
them without threading them through every call.
"""

from __future__ import annotations

import contextvars
import json
import logging
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

SESSION_ID: contextvars.ContextVar[str] = contextvars.ContextVar("session_id", default="")
TURN_ID: contextvars.ContextVar[str] = contextvars.ContextVar("turn_id", default="")

SESSION_METADATA_KEY = "x-sotto-session-id"
TURN_METADATA_KEY = "x-sotto-turn-id"

_SERVICE = "sotto"
_RESERVED = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ts, level, service, session_id, turn_id, event, then any extra fields."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "ts": round(record.created, 3),
            "level": record.levelname,
            "service": _SERVICE,
            "logger": record.name,
            "session_id": getattr(record, "session_id", None) or SESSION_ID.get(),
            "turn_id": getattr(record, "turn_id", None) or TURN_ID.get(),
            "event": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _RESERVED and key not in line:
                line[key] = value
        if record.exc_info:
            line["exc"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str, ensure_ascii=False)


def setup(service: str, level: str = "INFO") -> None:
    """Route all logging to stdout as JSON lines tagged with `service`."""
    global _SERVICE
    _SERVICE = service
    handler = logging.StreamHandler(sys.stdout)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    logging.getLogger("asyncio").setLevel(logging.WARNING)


@contextmanager
def bound(session_id: str = "", turn_id: str = "") -> Iterator[None]:
    """Bind the ids for the duration of a block (one turn, one RPC)."""
    tokens = (SESSION_ID.set(session_id), TURN_ID.set(turn_id))
    try:
        yield
    finally:
        SESSION_ID.reset(tokens[0])
        TURN_ID.reset(tokens[1])


def bind_from_grpc(metadata: Sequence[tuple[str, str | bytes]] | None) -> None:
    """Bind the ids sent by the caller; called first in every RPC handler (its own task, so no reset needed)."""
    values = dict(metadata or ())
    SESSION_ID.set(str(values.get(SESSION_METADATA_KEY, "")))
    TURN_ID.set(str(values.get(TURN_METADATA_KEY, "")))


def grpc_metadata() -> tuple[tuple[str, str], ...]:
    """Metadata that carries the current ids to the next service."""
    return ((SESSION_METADATA_KEY, SESSION_ID.get()), (TURN_METADATA_KEY, TURN_ID.get()))


def content(allowed: bool, **fields: str) -> dict[str, str]:
    """What the user and the assistant said, as a log line's extra fields, only where SOTTO_LOG_CONTENT allows it
    (`allowed`); otherwise nothing, and the line carries sizes and timings only. Every log line with conversation
    text goes through here, so the setting is honoured in one place."""
    return dict(fields) if allowed else {}
