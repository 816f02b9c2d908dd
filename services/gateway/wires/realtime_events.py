"""The conversation's events as OpenAI Realtime events: the `/v1/realtime` wire's serializer.

`RealtimeWire` is the session's output, so the Realtime endpoint runs the very same session and turn pipeline as
`/ws`: the session's writer task hands it each typed event in order (after dropping the audio of an interrupted
turn), and each becomes its OpenAI counterparts (`TurnStarted` -> `response.created`, ...). Events the Realtime
endpoint makes itself arrive as dicts, already in OpenAI's shape, or as `Deferred`. `Conversation` holds the items
as the client knows them, for retrieve and truncate.
"""

from __future__ import annotations

import base64
import collections
import json
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import soxr
from aiohttp import web

from services.gateway.wires.openai_common import new_id
from services.gateway.conversation import events
from services.gateway.wires.realtime_config import OUTPUT_RATE

# protocol v1 error codes -> OpenAI error types
_ERROR_TYPES = {"timeout": "server_error", "unavailable": "server_error", "internal": "server_error",
                "rate_limited": "rate_limit_error"}


class Deferred:
    """An event the wire makes itself when the writer reaches it: items take their place in the conversation in
    the order the client sees them."""

    def __init__(self, make: Callable[[], Awaitable[None]]) -> None:
        self.make = make


class Conversation:
    """The items of one Realtime conversation, newest last; audio and image bytes are not kept."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.items: OrderedDict[str, dict] = OrderedDict()
        self.turn_of: dict[str, str] = {}  # assistant item id -> the turn that spoke it

    def add(self, item: dict) -> str | None:
        """Append an item (given an id when it has none); returns the id of the item before it."""
        previous = next(reversed(self.items), None)
        item.setdefault("id", new_id("item"))
        item["object"] = "realtime.item"
        self.items[item["id"]] = item
        while len(self.items) > self.keep:
            old, _ = self.items.popitem(last=False)
            self.turn_of.pop(old, None)
        return previous

    def get(self, item_id: str) -> dict | None:
        return self.items.get(item_id)


def user_audio_item(item_id: str) -> dict:
    return {"id": item_id, "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_audio", "transcript": None}]}


@dataclass
class _Response:
    id: str
    item_id: str
    turn_id: str
    rate: int = OUTPUT_RATE
    samples: int = 0                  # audio samples sent, at `rate`
    audio_done: bool = False
    failure: dict | None = None
    resampler: soxr.ResampleStream | None = field(default=None, repr=False)


class RealtimeWire:
    def __init__(self, ws: web.WebSocketResponse, conversation: Conversation,
                 session_object: Callable[[], dict]) -> None:
        self.ws = ws
        self.conversation = conversation
        self.session_object = session_object
        self.on_audio_sent: Callable[[str, int], None] = lambda turn_id, samples: None
        self.cancelled_turns: set[str] = set()  # by response.cancel: status_details.reason client_cancelled
        self.audio_sent: dict[str, tuple[int, int]] = {}  # latest turn id -> (rate, samples sent)
        self._speech_item: str | None = None
        # Committed user audio not yet answered, oldest first; a spoken turn takes the oldest, and the asr's words
        # for that turn become its item's transcript.
        self._unanswered_audio: collections.deque[str] = collections.deque()
        self._audio_item_of: dict[str, str] = {}  # turn id -> its user audio item
        self._response: _Response | None = None
        self._events = 0

    async def close(self, *, code: int = 1000, message: bytes = b"") -> None:
        await self.ws.close(code=code, message=message)

    async def emit(self, event: dict) -> None:
        self._events += 1
        await self.ws.send_str(json.dumps({"event_id": f"event_{self._events}", **event}, ensure_ascii=False))

    async def send(self, item: events.Event | dict | Deferred) -> None:
        if isinstance(item, Deferred):
            await item.make()
        elif isinstance(item, dict):
            await self.emit(item)
        elif (translate := self._translations.get(type(item))) is not None:
            await translate(self, item)

    async def _on_audio_chunk(self, chunk: events.AudioChunk) -> None:
        """Audio of the current response, at 24 kHz, as an output_audio.delta."""
        r = self._response
        if r is None:
            return
        pcm = chunk.pcm16
        r.samples += len(pcm) // 2
        self.audio_sent = {r.turn_id: (r.rate, r.samples)}
        if r.resampler is not None:
            pcm = r.resampler.resample_chunk(np.frombuffer(pcm, dtype="<i2")).astype("<i2").tobytes()
        await self.emit(self._part(r, "response.output_audio.delta", delta=base64.b64encode(pcm).decode()))
        self.on_audio_sent(r.turn_id, r.samples)

    # -- protocol v1 -> OpenAI -------------------------------------------------------------------------------
    async def _on_session_ready(self, _: events.SessionReady) -> None:
        await self.emit({"type": "session.created", "session": self.session_object()})

    async def _on_speech_started(self, event: events.SpeechStarted) -> None:
        self._speech_item = new_id("item")
        await self.emit({"type": "input_audio_buffer.speech_started", "audio_start_ms": int(event.ts_ms),
                         "item_id": self._speech_item})

    async def _on_speech_ended(self, event: events.SpeechEnded) -> None:
        item_id = self._speech_item or new_id("item")
        self._speech_item = None
        await self.emit({"type": "input_audio_buffer.speech_stopped", "audio_end_ms": int(event.ts_ms),
                         "item_id": item_id})
        await self.committed(user_audio_item(item_id))

    async def committed(self, item: dict) -> None:
        """A user's audio became an item: committed, then added and done."""
        previous = self.conversation.add(item)
        self._unanswered_audio.append(item["id"])
        await self.emit({"type": "input_audio_buffer.committed", "item_id": item["id"], "previous_item_id": previous})
        await self.item_added(item, previous)

    async def item_added(self, item: dict, previous: str | None) -> None:
        await self.emit({"type": "conversation.item.added", "item": item, "previous_item_id": previous})
        await self.emit({"type": "conversation.item.done", "item": item, "previous_item_id": previous})

    async def _on_turn_started(self, event: events.TurnStarted) -> None:
        turn_id = event.turn_id
        if event.source == "speech" and self._unanswered_audio:
            self._audio_item_of[turn_id] = self._unanswered_audio.popleft()
        r = self._response = _Response(id=f"resp_{turn_id}", item_id=f"item_{turn_id}", turn_id=turn_id)
        item = {"id": r.item_id, "type": "message", "role": "assistant", "status": "in_progress", "content": []}
        previous = self.conversation.add(item)
        self.conversation.turn_of[r.item_id] = turn_id
        self.audio_sent = {turn_id: (r.rate, 0)}
        await self.emit({"type": "response.created", "response": self._response_object(r, "in_progress", [])})
        await self.emit({"type": "response.output_item.added", "response_id": r.id, "output_index": 0,
                         "item": item})
        await self.emit({"type": "conversation.item.added", "item": item, "previous_item_id": previous})
        await self.emit(self._part(r, "response.content_part.added", part={"type": "audio", "transcript": ""}))

    async def _on_transcript(self, event: events.Transcript) -> None:
        """The asr service's words for a spoken turn: the user audio item's transcript (none when it is down)."""
        item_id = self._audio_item_of.pop(event.turn_id, None)
        if item_id is None or event.text is None:
            return
        if (item := self.conversation.get(item_id)) is not None:
            item["content"][0]["transcript"] = event.text
        await self.emit({"type": "conversation.item.input_audio_transcription.completed", "item_id": item_id,
                         "content_index": 0, "transcript": event.text})

    async def _on_text_delta(self, event: events.TextDelta) -> None:
        if (r := self._response) is not None:
            await self.emit(self._part(r, "response.output_audio_transcript.delta", delta=event.text))

    async def _on_audio_start(self, event: events.AudioStarted) -> None:
        if (r := self._response) is not None and event.sample_rate != OUTPUT_RATE:
            r.rate = event.sample_rate
            r.resampler = soxr.ResampleStream(r.rate, OUTPUT_RATE, 1, dtype="int16")

    async def _on_audio_done(self, _: events.AudioDone) -> None:
        if (r := self._response) is not None:
            await self._audio_done(r)

    async def _audio_done(self, r: _Response) -> None:
        if r.resampler is not None:
            tail = r.resampler.resample_chunk(np.zeros(0, dtype=np.int16), last=True).astype("<i2").tobytes()
            if tail:
                await self.emit(self._part(r, "response.output_audio.delta", delta=base64.b64encode(tail).decode()))
        r.audio_done = True
        await self.emit(self._part(r, "response.output_audio.done"))

    async def _on_busy(self, event: events.Busy) -> None:
        if (r := self._response) is not None:
            r.failure = {"type": "rate_limit_error", "code": "model_busy", "message": event.message}

    async def _on_error(self, event: events.Error) -> None:
        kind = _ERROR_TYPES.get(event.code, "invalid_request_error")
        r = self._response
        if r is not None and event.turn_id == r.turn_id:
            r.failure = {"type": kind, "code": event.code, "message": event.message}
        await self.emit({"type": "error", "error": {"type": kind, "code": event.code, "message": event.message,
                                                    "param": None, "event_id": None}})

    async def _on_turn_done(self, event: events.TurnDone) -> None:
        r = self._response
        if r is None or event.turn_id != r.turn_id:
            return
        self._response = None
        transcript = event.heard_text if event.interrupted else event.text
        if not r.audio_done:
            await self._audio_done(r)
        await self.emit(self._part(r, "response.output_audio_transcript.done", transcript=transcript))
        part = {"type": "audio", "transcript": transcript}
        await self.emit(self._part(r, "response.content_part.done", part=part))
        status, details = self._status(r, event)
        item = self.conversation.get(r.item_id) or {"id": r.item_id, "object": "realtime.item"}
        item.update(type="message", role="assistant", status="completed" if status == "completed" else "incomplete",
                    content=[{"type": "output_audio", "transcript": transcript}])
        await self.emit({"type": "response.output_item.done", "response_id": r.id, "output_index": 0, "item": item})
        await self.emit({"type": "conversation.item.done", "item": item})
        timings = event.timings
        prefill, decode = int(timings.get("llm_prefill_tokens", 0)), int(timings.get("llm_decode_tokens", 0))
        response = self._response_object(r, status, [item], details)
        response["usage"] = {"total_tokens": prefill + decode, "input_tokens": prefill, "output_tokens": decode}
        await self.emit({"type": "response.done", "response": response})

    async def _on_turn_cut(self, event: events.TurnCut) -> None:
        """Speech over a finished answer still playing: it is truncated where the user was, as if the client had
        sent conversation.item.truncate; the client stops playing it there."""
        item_id = next((i for i, t in self.conversation.turn_of.items() if t == event.turn_id), None)
        item = self.conversation.get(item_id) if item_id is not None else None
        if item is None:
            return
        item.update(status="incomplete", content=[{"type": "output_audio", "transcript": event.heard_text}])
        await self.emit({"type": "conversation.item.truncated", "item_id": item_id, "content_index": 0,
                         "audio_end_ms": event.played_samples * 1000 // max(1, event.sample_rate)})

    def _status(self, r: _Response, event: events.TurnDone) -> tuple[str, dict | None]:
        finish = event.finish_reason
        if r.failure is not None or finish in ("busy", "error"):
            return "failed", {"type": "failed", "error": r.failure}
        if event.interrupted:
            reason = "client_cancelled" if r.turn_id in self.cancelled_turns else "turn_detected"
            self.cancelled_turns.discard(r.turn_id)
            return "cancelled", {"type": "cancelled", "reason": reason}
        if finish in ("length", "degraded"):
            return "incomplete", {"type": "incomplete", "reason": "max_output_tokens"}
        return "completed", None

    def _response_object(self, r: _Response, status: str, output: list[dict],
                         details: dict | None = None) -> dict[str, Any]:
        session = self.session_object()
        return {"id": r.id, "object": "realtime.response", "status": status, "status_details": details,
                "output": output, "conversation_id": None, "output_modalities": ["audio"],
                "max_output_tokens": session["max_output_tokens"], "metadata": None, "usage": None,
                "audio": {"output": session["audio"]["output"]}}

    @staticmethod
    def _part(r: _Response, kind: str, **fields: Any) -> dict[str, Any]:
        return {"type": kind, "response_id": r.id, "item_id": r.item_id, "output_index": 0, "content_index": 0,
                **fields}

    # Each conversation event's translation (`Health` and `Pong` have none, nor `TurnResumed`: its response ends
    # cancelled, `turn_detected`, and the next response answers both parts).
    _translations: dict[type, Callable[[RealtimeWire, Any], Awaitable[None]]] = {
        events.SessionReady: _on_session_ready, events.SpeechStarted: _on_speech_started,
        events.SpeechEnded: _on_speech_ended, events.TurnStarted: _on_turn_started, events.Transcript: _on_transcript,
        events.TextDelta: _on_text_delta, events.AudioStarted: _on_audio_start, events.AudioChunk: _on_audio_chunk,
        events.AudioDone: _on_audio_done, events.Busy: _on_busy, events.Error: _on_error,
        events.TurnDone: _on_turn_done, events.TurnCut: _on_turn_cut}
