"""`/v1/realtime`: OpenAI's Realtime API (GA events) over the same session and turn pipeline as `/ws`.

A `RealtimeSession` is a `Session` whose socket is a `RealtimeWire` (which turns what the session sends into OpenAI
events) and whose input comes from OpenAI client events instead of protocol v1 messages: appended audio is
resampled to 16 kHz and fed to the same intake and vad (server_vad), or held until committed (turn detection
off); items and `response.create` become a turn; `response.cancel` and `conversation.item.truncate` are the
barge-in of `/ws`. Same callers, limits and rate as `/ws`. What is supported, ignored or refused: docs/openai.md.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from aiohttp import WSMsgType, web

from services.common import audio, config, logs
from services.gateway.intake import SAMPLE_RATE_IN
from services.gateway.openai_common import OpenAIError, image_from_url, new_id, pcm16
from services.gateway.protocol import (PROTOCOL_VERSION, Frame, FrameKind, ProtocolError, SessionStart,
                                       decode_json)
from services.gateway.realtime_config import RealtimeConfig, TurnDetection, apply_update, response_overrides
from services.gateway.realtime_input import InputResampler, PendingInput
from services.gateway.realtime_wire import Conversation, Deferred, RealtimeWire, user_audio_item
from services.gateway.session import Session
from services.gateway.turn import TurnInput, TurnSettings
from services.gateway.ws import DEPS, MODEL, SETTINGS, check_caller, check_session_room, registered
from sotto.v1 import common_pb2, tts_pb2, vad_pb2

_LOGGER = logging.getLogger(__name__)
MIN_COMMIT_MS = 100  # OpenAI's own minimum for a committed buffer
_UNSUPPORTED = {"conversation.item.delete": "items cannot be deleted here",
                "output_audio_buffer.clear": "only WebRTC/SIP clients have an output buffer on the server"}


class RealtimeSession(Session):
    def __init__(self, *, ws: web.WebSocketResponse, cfg: config.Settings, **kwargs: Any) -> None:
        model = kwargs["model"]
        gw = cfg.gateway
        self.config = RealtimeConfig(
            instructions=gw.system_prompt, voice=gw.voice or model.get("default_voice", ""),
            turn_detection=TurnDetection(threshold=cfg.vad.threshold, silence_duration_ms=cfg.vad.min_silence_ms))
        self.conversation = Conversation(keep=max(16, 4 * gw.max_history_turns))
        self.wire = RealtimeWire(ws, self.conversation, self._session_object)
        super().__init__(ws=self.wire, cfg=cfg, **kwargs)  # the wire stands for the socket
        self.wire.on_audio_sent = self._heard_so_far
        self.pending = PendingInput(gw.max_turn_audio_s)
        self._manual = bytearray()  # audio appended with turn detection off, until committed
        self._resampler = InputResampler(self.config.input_rate)
        self._audio_ms = 0.0        # input timeline: audio_start_ms / audio_end_ms count from here
        self._seq = 0
        self._response_overrides: dict[str, Any] = {}
        self._handlers: dict[str, Callable[[dict], Awaitable[None]]] = {
            "session.update": self._session_update, "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit, "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self._item_create, "conversation.item.retrieve": self._item_retrieve,
            "conversation.item.truncate": self._item_truncate, "response.create": self._response_create,
            "response.cancel": self._response_cancel}

    def open(self) -> None:
        self._open(SessionStart(protocol=PROTOCOL_VERSION, sample_rate=SAMPLE_RATE_IN, voice=self.config.voice))
        self._apply_vad_settings()

    def _session_object(self) -> dict:
        return self.config.session_object(session_id=f"sess_{self.id}", model=self.model.get("llm", {}).get("name", ""),
                                          prefix_padding_ms=self.gw.preroll_ms)

    async def _voices(self) -> list[str]:
        """The tts service's voices, asked now if the gateway has not learnt them yet (it asks once the tts
        service is up); none when it cannot answer: a voice is then checked by the tts at the next answer."""
        if not self.model.get("voices"):
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await self.tts.ListVoices(tts_pb2.ListVoicesRequest(),
                                                  timeout=self.gw.request_timeout_ms / 1000)
                self.model["voices"] = [v.name for v in reply.voices]
                self.model.setdefault("default_voice", reply.default_voice)
        return self.model.get("voices", [])

    def _apply_vad_settings(self) -> None:
        td = self.config.turn_detection
        if td is not None and self.vad is not None:
            self.vad.settings = vad_pb2.VadSettings(
                threshold=td.threshold, min_silence_ms=td.silence_duration_ms, min_speech_ms=self.cfg.vad.min_speech_ms,
                speech_pad_ms=self.cfg.vad.speech_pad_ms)

    def _heard_so_far(self, turn_id: str, samples: int) -> None:
        """What reached the client counts as heard (as OpenAI assumes) until a truncate says otherwise."""
        if self.turn is not None and self.turn.inp.turn_id == turn_id and not self.turn.interrupted:
            self.turn.report_playback(samples)

    def _reported_playback(self) -> int:
        """A Realtime client reports no playback (what was sent stands for heard only for a cut's history), so
        speech over a finished answer is judged by the playback estimate alone (i36)."""
        return 0

    # -- input -----------------------------------------------------------------------------------------------
    async def on_event(self, text: str) -> None:
        if not self._admit():
            return
        event: Any = None
        try:
            if len(text.encode()) > self.gw.max_request_bytes:
                raise OpenAIError(f"event over the {self.gw.max_request_bytes}-byte limit "
                                  "(SOTTO_GATEWAY_MAX_REQUEST_BYTES)", code="event_too_large")
            try:
                event = decode_json(text)  # the same safe decoding as /ws (depth, number size, lone surrogates)
            except ProtocolError as exc:
                raise OpenAIError(exc.message, code="invalid_json") from None
            if not isinstance(event, dict) or not isinstance(event.get("type"), str):
                raise OpenAIError("an event must be a JSON object with a string 'type'", param="type")
            kind = event["type"]
            handler = self._handlers.get(kind)
            if handler is None:
                if kind in _UNSUPPORTED:
                    raise OpenAIError(f"'{kind}' is not supported by this server: {_UNSUPPORTED[kind]}",
                                      param="type", code="unsupported_event")
                raise OpenAIError(f"unknown or unsupported event type '{kind[:60]}'; supported: "
                                  f"{', '.join(self._handlers)}", param="type", code="unsupported_event")
            await handler(event)
        except OpenAIError as exc:
            event_id = event.get("event_id") if isinstance(event, dict) else None
            self.emit({"type": "error", "error": {**exc.body(), "event_id": event_id}})

    def refuse_binary(self) -> None:
        self.emit({"type": "error", "error": OpenAIError(
            "binary frames are not part of the Realtime API: send input_audio_buffer.append with base64 PCM16",
            code="unsupported_frame").body()})

    async def _session_update(self, event: dict) -> None:
        new = apply_update(self.config, event.get("session"), await self._voices())
        old, self.config = self.config, new
        if new.input_rate != old.input_rate:
            self._resampler = InputResampler(new.input_rate)
        if new.turn_detection != old.turn_detection:
            self._manual.clear()
            self.intake.abandon_utterance()
            self._apply_vad_settings()
            if self.vad is not None:
                await self.vad.reset()  # the next audio opens a stream with the new settings
        self.emit({"type": "session.updated", "session": self._session_object()})

    async def _append(self, event: dict) -> None:
        pcm = self._resampler.stream(pcm16(event.get("audio"), "audio"))
        if self.config.turn_detection is None:
            if len(self._manual) + len(pcm) > self.pending.max_bytes:
                raise OpenAIError(f"the input audio buffer is over {self.gw.max_turn_audio_s:g} s "
                                  "(SOTTO_MAX_TURN_AUDIO_S): commit or clear it", code="audio_too_long")
            self._manual += pcm
            return
        step = self.gw.max_audio_frame_bytes - self.gw.max_audio_frame_bytes % 2
        for start in range(0, len(pcm), step):
            piece = pcm[start:start + step]
            await self.intake.audio(Frame(FrameKind.AUDIO_IN, self._seq, self._audio_ms, piece))
            self._seq += 1
            self._audio_ms += len(piece) / 2 / (SAMPLE_RATE_IN / 1000)

    async def _commit(self, _: dict) -> None:
        if self.config.turn_detection is not None:
            if not self.intake.in_utterance or self.vad is None:
                raise OpenAIError("the buffer holds no speech to commit", code="input_audio_buffer_commit_empty")
            self.vad.end_of_speech()  # the vad closes the utterance now: committed as when silence ends it
            return
        pcm = bytes(self._manual) + self._resampler.stream(b"", last=True)
        self._manual.clear()
        if len(pcm) < MIN_COMMIT_MS * SAMPLE_RATE_IN // 1000 * 2:
            raise OpenAIError(f"buffer too small: at least {MIN_COMMIT_MS} ms of audio must be appended before a "
                              "commit", code="input_audio_buffer_commit_empty")
        self.pending.add_audio(pcm)
        self.emit(Deferred(lambda: self.wire.committed(user_audio_item(new_id("item")))))

    async def _clear(self, _: dict) -> None:
        self._manual.clear()
        self._resampler = InputResampler(self.config.input_rate)
        if self.config.turn_detection is not None and self.vad is not None:
            self.intake.abandon_utterance()
            await self.vad.reset()
        self.emit({"type": "input_audio_buffer.cleared"})

    def emit(self, event: dict | Deferred) -> None:
        """An event in OpenAI's shape, queued behind everything the session sent before it."""
        self.out.put_nowait((event, None))  # the writer hands it to the wire as it is (RealtimeWire.send_str)

    async def _item_create(self, event: dict) -> None:
        item = event.get("item")
        if not isinstance(item, dict) or item.get("type", "message") != "message":
            raise OpenAIError("'item' must be a message (function calls are not supported)", param="item.type")
        previous = event.get("previous_item_id")
        if previous is not None and previous != next(reversed(self.conversation.items), None):
            raise OpenAIError("items can only be appended: 'previous_item_id' must be null or the last item's id",
                              param="previous_item_id")
        if item.get("id") in self.conversation.items:
            raise OpenAIError(f"an item with id {item['id']!r} already exists", param="item.id")
        role = item.get("role")
        content = item.get("content")
        if not isinstance(content, list) or not content:
            raise OpenAIError("'item.content' must be a non-empty list", param="item.content")
        if role == "user":
            kept = self._user_parts(content)
        elif role == "assistant":
            kept = self._assistant_parts(content)
        else:
            raise OpenAIError(f"'item.role' {role!r} is not accepted; accepted: user, assistant (system text goes in "
                              "session.update instructions)", param="item.role")
        stored = {"type": "message", "role": role, "status": "completed", "content": kept,
                  **({"id": item["id"]} if isinstance(item.get("id"), str) else {})}

        async def added() -> None:
            await self.wire.item_added(stored, self.conversation.add(stored))
        self.emit(Deferred(added))

    def _user_parts(self, content: list) -> list[dict]:
        texts, images, pcm, kept = [], [], bytearray(), []
        for i, part in enumerate(content):
            where, kind = f"item.content[{i}]", part.get("type") if isinstance(part, dict) else None
            if kind == "input_text" and isinstance(part.get("text"), str):
                if len(part["text"]) > self.gw.max_text_chars:
                    raise OpenAIError(f"'{where}.text' is over {self.gw.max_text_chars} characters "
                                      "(SOTTO_GATEWAY_MAX_TEXT_CHARS)", param=f"{where}.text")
                texts.append(part["text"])
                kept.append({"type": "input_text", "text": part["text"]})
            elif kind == "input_image":
                images.append(image_from_url(part.get("image_url"), self.gw.max_jpeg_bytes, f"{where}.image_url"))
                kept.append({"type": "input_image", "detail": "auto"})  # the bytes are not kept
            elif kind == "input_audio":
                pcm += self._resampler.whole(pcm16(part.get("audio"), f"{where}.audio"))
                kept.append({"type": "input_audio", "transcript": None})
            else:
                raise OpenAIError(f"'{where}' must be an input_text, input_image or input_audio part", param=where)
        self.pending.add_audio(bytes(pcm))
        self.pending.texts += texts
        self.pending.images += images
        return kept

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
        user = self.pending.take(turn_id="", t_input_end=0.0)
        self._remember(user.text, " ".join(texts))
        return [{"type": "output_text", "text": " ".join(texts)}]

    def _remember(self, user_text: str, answer: str) -> None:
        self.history.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_USER, text=user_text))
        self.history.append(common_pb2.Turn(role=common_pb2.Turn.ROLE_ASSISTANT, text=answer))
        self.history_owner = None  # a late truncate of the previous answer must not overwrite this one

    async def _item_retrieve(self, event: dict) -> None:
        item = self.conversation.get(event.get("item_id"))
        if item is None:
            raise OpenAIError(f"no item with id {event.get('item_id')!r}", param="item_id", code="item_not_found")
        self.emit({"type": "conversation.item.retrieved", "item": item})

    async def _item_truncate(self, event: dict) -> None:
        item_id, end_ms = event.get("item_id"), event.get("audio_end_ms")
        turn_id = self.conversation.turn_of.get(item_id)
        if turn_id is None:
            raise OpenAIError(f"no answer with audio has id {item_id!r}", param="item_id", code="item_not_found")
        if isinstance(end_ms, bool) or not isinstance(end_ms, int) or end_ms < 0:
            raise OpenAIError("'audio_end_ms' must be an integer >= 0", param="audio_end_ms")
        if event.get("content_index", 0) != 0:
            raise OpenAIError("'content_index' must be 0 (an answer has one audio part)", param="content_index")
        turn = self.turn
        if turn is None or turn.inp.turn_id != turn_id or turn_id not in self.wire.audio_sent:
            raise OpenAIError("only the latest answer can be truncated", param="item_id")
        rate, sent = self.wire.audio_sent[turn_id]
        if end_ms * rate // 1000 > sent:
            raise OpenAIError(f"audio_end_ms {end_ms} is beyond the answer's audio ({sent * 1000 // rate} ms sent)",
                              param="audio_end_ms")
        self._interrupt(turn_id, end_ms * rate // 1000)  # a running answer stops; a finished one is cut
        item = self.conversation.get(item_id)
        if self.history_owner is turn and item is not None:
            item["content"] = [{"type": "output_audio", "transcript": self.history[-1].text}]
            item["status"] = "incomplete"
        self.emit({"type": "conversation.item.truncated", "item_id": item_id,
                   "content_index": 0, "audio_end_ms": end_ms})

    # -- responses -------------------------------------------------------------------------------------------
    def _responding(self) -> bool:
        return self.turn_task is not None and not self.turn_task.done()

    async def _response_create(self, event: dict) -> None:
        params = event.get("response") or {}
        if not isinstance(params, dict):
            raise OpenAIError("'response' must be an object", param="response")
        if self._responding():
            raise OpenAIError("Conversation already has an active response in progress",
                              code="conversation_already_has_active_response")
        overrides = response_overrides(params, await self._voices())
        if self.pending.empty():
            raise OpenAIError("nothing to respond to: add a user item (conversation.item.create) or commit audio "
                              "first", code="no_user_input")
        self._response_overrides = overrides
        await super()._begin_turn(self.pending.take(self._turn_id(), time.monotonic()))

    async def _response_cancel(self, event: dict) -> None:
        turn = self.turn
        if turn is None or not self._responding():
            raise OpenAIError("there is no response in progress to cancel", code="response_cancel_not_active")
        if event.get("response_id") not in (None, f"resp_{turn.inp.turn_id}"):
            raise OpenAIError(f"response {event['response_id']!r} is not the one in progress", param="response_id")
        self.wire.cancelled_turns.add(turn.inp.turn_id)
        _, sent = self.wire.audio_sent.get(turn.inp.turn_id, (0, 0))
        self._interrupt(turn.inp.turn_id, sent)

    async def _begin_turn(self, inp: TurnInput) -> None:
        """Reached when the vad ends an utterance: it joins what the user added, and answers unless the session
        says create_response false (then response.create does)."""
        try:
            self.pending.add_audio(audio.read_wav(inp.audio_wav).pcm)
        except OpenAIError as exc:  # too much audio held: this utterance is dropped, the session goes on
            self.emit({"type": "error", "error": exc.body()})
            return
        td = self.config.turn_detection
        if td is not None and td.create_response:
            # This utterance is the turn's audio: its words (the asr's) become the user item's transcript.
            taken = self.pending.take(inp.turn_id, inp.t_input_end, inp.endpoint_ms)
            await super()._begin_turn(dataclasses.replace(taken, words=inp.words))
        elif inp.words is not None:
            inp.words.cancel()  # answered later by response.create, with whatever else the user adds

    def _turn_settings(self) -> TurnSettings:
        o, self._response_overrides = self._response_overrides, {}
        return dataclasses.replace(
            super()._turn_settings(), system_prompt=o.get("instructions", self.config.instructions),
            voice=o.get("voice", self.config.voice), max_new_tokens=o.get("max_output_tokens",
                                                                         self.config.max_output_tokens))


async def websocket(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    check_caller(request)
    check_session_room(request)
    ws = web.WebSocketResponse(max_msg_size=2 * settings.gateway.max_request_bytes + 1024, heartbeat=30)
    await ws.prepare(request)
    deps = request.app[DEPS]
    session = RealtimeSession(ws=ws, cfg=settings, channels=deps.channels, model=request.app[MODEL],
                              health=deps.status)
    with logs.bound(session.id):
        _LOGGER.info("realtime_session", extra={"model_query": request.query.get("model", "")})
        try:
            async with registered(request, session):
                session.open()
                async for msg in ws:
                    if msg.type == WSMsgType.TEXT:
                        await session.on_event(msg.data)
                    elif msg.type == WSMsgType.BINARY:
                        session.refuse_binary()
                    elif msg.type == WSMsgType.ERROR:
                        break
        finally:
            await ws.close()
    return ws
