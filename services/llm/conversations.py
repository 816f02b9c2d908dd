"""One LiteRT-LM conversation per session, reused while it holds exactly what the caller's history says.

A conversation's KV cache already holds every earlier turn, so reusing it saves the prefill of the
whole history. It is only safe when the caller's history is the conversation's own: the same system
prompt and sampler, and the turns it was fed plus the reply it produced. Anything else (a cancel, a
truncated or degraded reply, an edited history, an unknown or evicted session) means the conversation
is rebuilt from the history the caller sent. The cache is a bounded LRU; evicted conversations are
closed.

A spoken turn is the exception to "the text it was fed": its audio is in the KV cache, while the caller's
history holds the words recognised from it, which the model never saw as text. Such a turn carries the SHA-256
of its audio, and is matched by that digest (the caller's copy of it) instead of by text; a rebuild, which has
only text, then uses the recognised words.
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
from typing import Any, Callable

_LOGGER = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class Turn:
    role: str  # "user" or "assistant"
    text: str
    audio_sha256: bytes = b""  # a user turn whose audio the model heard: the digest of that audio

    def same_as(self, held: Turn) -> bool:
        """Whether this turn of a caller's history is `held`, a turn a conversation was fed."""
        if held.audio_sha256:
            return self.role == held.role and self.audio_sha256 == held.audio_sha256
        return self == held


def audio_digest(clips: tuple[bytes, ...]) -> bytes:
    """What identifies a turn's audio (the SHA-256 of its one WAV; of their concatenation if several)."""
    return hashlib.sha256(b"".join(clips)).digest() if clips else b""


def same_turns(given: tuple[Turn, ...], held: tuple[Turn, ...]) -> bool:
    return len(given) == len(held) and all(g.same_as(h) for g, h in zip(given, held))


def content(turn: Turn) -> str:
    """What a rebuilt conversation says for a history turn. One whose content was media only (a spoken question)
    gets a stand-in: the history is text, and the audio lived only in the discarded conversation's KV cache."""
    if turn.text:
        return turn.text
    return "(spoken; the audio is no longer available)" if turn.role == "user" else "(no reply)"


@dataclasses.dataclass
class Held:
    """A live conversation and what it holds."""

    conversation: Any
    key: tuple  # system prompt and sampler settings the conversation was created with
    turns: tuple[Turn, ...]


class ConversationCache:
    """LRU map of session id -> Held conversation. Not thread-safe: the engine holds its lock."""

    def __init__(self, max_sessions: int, close: Callable[[Any], None]):
        if max_sessions < 1:
            raise ValueError(f"max_sessions must be at least 1, got {max_sessions}")
        self._max = max_sessions
        self._close = close
        self._held: collections.OrderedDict[str, Held] = collections.OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def take(self, session_id: str | None, key: tuple, turns: tuple[Turn, ...]) -> Any | None:
        """Remove and return the session's conversation if it matches `key` and `turns` exactly;
        otherwise close whatever the session held and return None (the caller rebuilds)."""
        if not session_id:
            return None
        held = self._held.pop(session_id, None)
        if held is None:
            return None
        if held.key == key and same_turns(turns, held.turns):
            return held.conversation
        self._close(held.conversation)
        return None

    def put(self, session_id: str | None, conversation: Any, key: tuple, turns: tuple[Turn, ...]) -> None:
        """Keep `conversation` for the session (most recently used); close it if there is no session."""
        if not session_id:
            self._close(conversation)
            return
        old = self._held.pop(session_id, None)
        if old is not None and old.conversation is not conversation:
            self._close(old.conversation)
        self._held[session_id] = Held(conversation, key, turns)
        while len(self._held) > self._max:
            _, evicted = self._held.popitem(last=False)
            self._close(evicted.conversation)

    def clear(self) -> None:
        while self._held:
            _, held = self._held.popitem()
            self._close(held.conversation)


def close_quietly(conversation: Any) -> None:
    """Close a LiteRT-LM conversation; a failure is logged, never raised over the outcome being reported."""
    try:
        conversation.close()
    except Exception:  # noqa: BLE001 - closing must never mask the real outcome
        _LOGGER.exception("closing a conversation failed")
