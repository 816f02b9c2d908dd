"""`conversation.item.*` on `/v1/realtime`: items a client adds, retrieves and truncates.

A user item's parts join the pending input of the next response (text, images, audio resampled to 16 kHz); an
assistant item the client supplies goes straight into the history; truncating the latest answer is the barge-in
of `/ws`: the session cuts the answer (and its history entry) to what was heard.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from services.gateway.wires.openai_common import OpenAIError, image_from_url, pcm16
from services.gateway.wires.realtime_events import Deferred

if TYPE_CHECKING:
    from services.gateway.wires.realtime import RealtimeSession


class Items:
    def __init__(self, rt: RealtimeSession) -> None:
        self.rt = rt

    async def create(self, event: dict) -> None:
        conversation = self.rt.conversation
        item = event.get("item")
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            raise OpenAIError("'item' must be a message (function calls are not supported)", param="item.type")
        previous = event.get("previous_item_id")
        if previous is not None and previous != next(reversed(conversation.items), None):
            raise OpenAIError("items can only be appended: 'previous_item_id' must be null or the last item's id",
                              param="previous_item_id")
        if item.get("id") in conversation.items:
            raise OpenAIError(f"an item with id {item['id']!r} already exists", param="item.id")
        role = item.get("role")
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise OpenAIError("'item.content' must be a non-empty list", param="item.content")
        if role == "user":
            texts, images, pcm, kept = await asyncio.to_thread(self._user_parts, content)  # images are decoded in it
            self.rt.pending.hold(texts, images, pcm)  # all of the item, or none of it if it does not fit
        elif role == "assistant":
            kept = self._assistant_parts(content)
        else:
            raise OpenAIError(f"'item.role' {role!r} is not accepted; accepted: user, assistant (system text goes in "
                              "session.update instructions)", param="item.role")
        stored = {"type": "message", "role": role, "status": "completed", "content": kept,
                  **({"id": item["id"]} if isinstance(item.get("id"), str) else {})}

        async def added() -> None:
            await self.rt.wire.item_added(stored, conversation.add(stored))
        self.rt.emit(Deferred(added))

    def _user_parts(self, content: list) -> tuple[list[str], list[bytes], bytes, list[dict]]:
        """A user item's texts, images (decoded and bounded) and audio (resampled), and the parts as kept."""
        gw, pending = self.rt.gw, self.rt.pending
        texts, images, pcm, kept = [], [], bytearray(), []
        for i, part in enumerate(content):
            where, kind = f"item.content[{i}]", part.get("type") if isinstance(part, dict) else None
            if kind == "input_text" and isinstance(part.get("text"), str):
                if len(part["text"]) > gw.max_text_chars:
                    raise OpenAIError(f"'{where}.text' is over {gw.max_text_chars} characters "
                                      "(SOTTO_GATEWAY_MAX_TEXT_CHARS)", param=f"{where}.text")
                texts.append(part["text"])
                kept.append({"type": "input_text", "text": part["text"]})
            elif kind == "input_image":
                pending.check_image_room(len(images), f"{where}.image_url")
                images.append(image_from_url(part.get("image_url"), gw.max_jpeg_bytes, gw.max_image_pixels,
                                             f"{where}.image_url")[0])
                kept.append({"type": "input_image", "detail": "auto"})  # the bytes are not kept
            elif kind == "input_audio":
                pcm += self.rt.resampler.whole(pcm16(part.get("audio"), f"{where}.audio"))
                kept.append({"type": "input_audio", "transcript": None})
            else:
                raise OpenAIError(f"'{where}' must be an input_text, input_image or input_audio part", param=where)
        return texts, images, bytes(pcm), kept

    def _assistant_parts(self, content: list) -> list[dict]:
        """An answer the client supplies goes into the history as text, after the user's pending text."""
        texts = []
        for i, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            text = part.get("text") if kind in ("output_text", "text") else part.get("transcript") \
                if kind == "output_audio" else None
            if not isinstance(text, str):
                raise OpenAIError(f"'item.content[{i}]' must be an output_text part (text) or an output_audio part "
                                  "with a transcript", param=f"item.content[{i}]")
            texts.append(text)
        if sum(map(len, texts)) > self.rt.gw.max_prompt_chars:
            raise OpenAIError(f"the answer's text is over {self.rt.gw.max_prompt_chars} characters "
                              "(SOTTO_GATEWAY_MAX_PROMPT_CHARS)", param="item.content", code="context_length_exceeded")
        user = self.rt.pending.take(turn_id="", t_input_end=0.0)
        self.rt.session.history.remember(user.text, " ".join(texts))
        return [{"type": "output_text", "text": " ".join(texts)}]

    async def retrieve(self, event: dict) -> None:
        item = self.rt.conversation.get(event.get("item_id"))
        if item is None:
            raise OpenAIError(f"no item with id {event.get('item_id')!r}", param="item_id", code="item_not_found")
        self.rt.emit({"type": "conversation.item.retrieved", "item": item})

    async def truncate(self, event: dict) -> None:
        rt, session = self.rt, self.rt.session
        item_id, end_ms = event.get("item_id"), event.get("audio_end_ms")
        turn_id = rt.conversation.turn_of.get(item_id)
        if turn_id is None:
            raise OpenAIError(f"no answer with audio has id {item_id!r}", param="item_id", code="item_not_found")
        if isinstance(end_ms, bool) or not isinstance(end_ms, int) or end_ms < 0:
            raise OpenAIError("'audio_end_ms' must be an integer >= 0", param="audio_end_ms")
        if event.get("content_index", 0) != 0:
            raise OpenAIError("'content_index' must be 0 (an answer has one audio part)", param="content_index")
        turn = session.turn
        if turn is None or turn.inp.turn_id != turn_id or turn_id not in rt.wire.audio_sent:
            raise OpenAIError("only the latest answer can be truncated", param="item_id")
        rate, sent = rt.wire.audio_sent[turn_id]
        if end_ms * rate // 1000 > sent:
            raise OpenAIError(f"audio_end_ms {end_ms} is beyond the answer's audio ({sent * 1000 // rate} ms sent)",
                              param="audio_end_ms")
        session.interrupt(turn_id, end_ms * rate // 1000)  # a running answer stops; a finished one is cut
        item = rt.conversation.get(item_id)
        if (heard := session.history.answer_of(turn)) is not None and item is not None:
            item["content"] = [{"type": "output_audio", "transcript": heard}]
            item["status"] = "incomplete"
        rt.emit({"type": "conversation.item.truncated", "item_id": item_id, "content_index": 0,
                 "audio_end_ms": end_ms})
