"""A session's conversation history: what the model is given as context on each turn, and what an interrupt cuts.

It keeps what the user actually heard: an answer cut by a barge-in is recorded (or later cut back, when the
barge-in comes after the answer was fully synthesised) as the words played, marked `interrupted`.
"""

from __future__ import annotations

import logging

from services.gateway import metrics
from sotto.v1 import common_pb2

_LOGGER = logging.getLogger(__name__)


class History:
    def __init__(self, max_turns: int) -> None:
        self.max_turns = max_turns  # SOTTO_GATEWAY_MAX_HISTORY_TURNS: pairs sent to the model (0: none)
        self.entries: list[common_pb2.Turn] = []
        self._owner: object | None = None  # the turn whose answer is the last entry

    def window(self) -> list[common_pb2.Turn]:
        """The entries the next turn is asked with, oldest first."""
        return list(self.entries[-2 * self.max_turns:]) if self.max_turns else []

    def record(self, turn: object, *, user_text: str, audio_sha256: bytes, answer: str, interrupted: bool) -> None:
        """A finished turn: the user's words (and their audio's digest, which the llm service matches to the
        conversation holding the audio) and the answer as heard."""
        self.entries.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_USER, text=user_text, audio_sha256=audio_sha256))
        self.entries.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_ASSISTANT, text=answer,
                                            interrupted=interrupted))
        self._owner = turn

    def remember(self, user_text: str, answer: str) -> None:
        """An exchange the client supplies (an assistant item on /v1/realtime): no turn owns it, so a late
        interrupt of the previous answer cannot overwrite it."""
        self.entries.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_USER, text=user_text))
        self.entries.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_ASSISTANT, text=answer))
        self._owner = None

    def cut(self, turn: object, heard: str, played_samples: int, trigger: str = "client_after_done") -> bool:
        """An interrupt after `turn` ended: its answer keeps only what was heard; False if it is not the last."""
        if self._owner is not turn:
            return False
        metrics.INTERRUPTIONS.labels(trigger).inc()
        self.entries[-1].text = heard
        self.entries[-1].interrupted = True
        # Named by its turn: the cut comes from the session, outside the turn's own log context.
        turn_id = getattr(getattr(turn, "inp", None), "turn_id", None)
        _LOGGER.info("history_cut", extra={"turn_id": turn_id, "played_samples": played_samples,
                                           "heard_chars": len(heard), "trigger": trigger})
        return True

    def withdraw(self, turn: object) -> None:
        """`turn`'s exchange is taken back (its utterance went on, and the joined turn answers all of it), if it is
        the last one recorded."""
        if self._owner is turn and turn is not None:
            del self.entries[-2:]
            self._owner = None

    def answer_of(self, turn: object) -> str | None:
        """The answer `turn` left in the history (as heard), or None when it is not the last entry."""
        return self.entries[-1].text if self._owner is turn and self.entries else None
