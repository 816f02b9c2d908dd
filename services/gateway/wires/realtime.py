"""`/v1/realtime`: OpenAI's Realtime API (GA events) onto the same conversation core as `/ws`, by composition.

A `RealtimeSession` holds a core `Session` whose output is a `RealtimeWire` (its events become OpenAI events) and
feeds it from OpenAI client events through the core's public methods: appended audio is resampled to 16 kHz and
fed to the same intake and vad (turn detection on), or held until committed (off); items (`realtime_items.py`) and
`response.create` become a turn; `response.cancel` and `conversation.item.truncate` are the barge-in of `/ws`. Same
callers, limits and rate as `/ws`. What is supported, ignored or refused: docs/openai.md.
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
from services.gateway.access import check_caller, check_session_room, registered
from services.gateway.app import DEPS, LIMITS, MODELS, SETTINGS, Catalogue
from services.gateway.conversation.settings import SessionSettings
from services.gateway.conversation.intake import SAMPLE_RATE_IN
from services.gateway.conversation.inputs import MediaFrame, Opening
from services.gateway.conversation.session import Session
from services.gateway.links.vad import turn_taking
from services.gateway.conversation.turn import TurnInput, TurnSettings
from services.gateway.wires.openai_common import OpenAIError, new_id, pcm16
from services.gateway.wires.realtime_config import RealtimeConfig, TurnDetection, apply_update, response_overrides
from services.gateway.wires.realtime_events import Conversation, Deferred, RealtimeWire, user_audio_item
from services.gateway.wires.realtime_input import InputResampler, PendingInput, decode_event
from services.gateway.wires.realtime_items import Items
from sotto.v1 import tts_pb2

_LOGGER = logging.getLogger(__name__)
MIN_COMMIT_MS = 100  # OpenAI's own minimum for a committed buffer
_UNSUPPORTED = {"conversation.item.delete": "items cannot be deleted here",
                "output_audio_buffer.clear": "only WebRTC/SIP clients have an output buffer on the server"}


class RealtimeSession:
    def __init__(self, *, ws: web.WebSocketResponse, cfg: config.Settings, limits: SessionSettings,
                 channels: dict[str, grpc.aio.Channel], models: Catalogue, health: dict[str, str]) -> None:
        gw = self.gw = cfg.gateway
        self.cfg, self.models = cfg, models
        detection = TurnDetection(type="semantic_vad" if cfg.vad.semantic_turn else "server_vad",
                                  threshold=cfg.vad.threshold, silence_duration_ms=cfg.vad.min_silence_ms)
        self.config = RealtimeConfig(instructions=gw.system_prompt, voice=gw.voice or models.current.default_voice,
                                     turn_detection=detection, gateway_detection=detection,
                                     echo_cancel=gw.echo_cancel, gateway_echo_cancel=gw.echo_cancel)
        self.conversation = Conversation(keep=max(16, 4 * gw.max_history_turns))
        self.wire = RealtimeWire(ws, self.conversation, self.session_object)
        self.session = Session(output=self.wire, cfg=cfg, settings=limits, channels=channels, models=models,
                               health=health, on_utterance=self._utterance)
        self.wire.on_audio_sent = self._heard_so_far
        self.pending = PendingInput(gw.max_turn_audio_s, gw.max_prompt_chars, gw.max_images)
        self.resampler = InputResampler(self.config.input_rate)
        self.items = Items(self)
        self._manual = bytearray()  # audio appended with turn detection off, until committed
        self._audio_ms = 0.0        # input timeline: audio_start_ms / audio_end_ms count from here
        self._seq = 0
        self._voices: tuple[str, ...] = ()  # asked of the tts service when the gateway has not learnt them yet
        self._handlers: dict[str, Callable[[dict], Awaitable[None]]] = {
            "session.update": self._session_update, "input_audio_buffer.append": self._append,
            "input_audio_buffer.commit": self._commit, "input_audio_buffer.clear": self._clear,
            "conversation.item.create": self.items.create, "conversation.item.retrieve": self.items.retrieve,
            "conversation.item.truncate": self.items.truncate, "response.create": self._response_create,
            "response.cancel": self._response_cancel}

    def open(self) -> None:
        self.session.open(Opening(sample_rate=SAMPLE_RATE_IN, voice=self.config.voice, reports_playback=False,
                                  echo_cancel=self.config.echo_cancel))
        self._apply_vad_settings()

    def session_object(self) -> dict:
        return self.config.session_object(session_id=f"sess_{self.session.id}", model=self.models.current.llm_name,
                                          prefix_padding_ms=self.gw.preroll_ms)

    async def voices(self) -> list[str]:
        """The tts service's voices, asked now if the gateway has not learnt them yet (it asks once the tts
        service is up); none when it cannot answer: a voice is then checked by the tts at the next answer."""
        if not self.models.current.voices and not self._voices:
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await self.session.tts.ListVoices(tts_pb2.ListVoicesRequest(),
                                                          timeout=self.session.settings.request_timeout_s)
                self._voices = tuple(v.name for v in reply.voices)
        return list(self.models.current.voices or self._voices)

    def _apply_vad_settings(self) -> None:
        td = self.config.turn_detection
        if td is not None:
            self.session.take_turns_with(td.vad_settings(turn_taking(self.cfg.vad)))

    def _heard_so_far(self, turn_id: str, samples: int) -> None:
        """What reached the client counts as heard (as OpenAI assumes) until a truncate says otherwise."""
        turn = self.session.turn
        if turn is not None and turn.inp.turn_id == turn_id and not turn.interrupted:
            turn.report_playback(samples)

    def emit(self, event: dict | Deferred) -> None:
        """An event in OpenAI's shape, queued behind everything the session sent before it."""
        self.session.send(event)

    # -- input -----------------------------------------------------------------------------------------------
    async def on_event(self, text: str) -> None:
        if not self.session.admit():
            return
        event: Any = None
        try:
            event = decode_event(text, self.gw.max_request_bytes)
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
        new = apply_update(self.config, event.get("session"), await self.voices(), max_chars=self.gw.max_prompt_chars)
        old, self.config = self.config, new
        if new.input_rate != old.input_rate:
            self.resampler = InputResampler(new.input_rate)
        if new.echo_cancel != old.echo_cancel:
            self.session.intake.echo.configure(enabled=new.echo_cancel, rate=SAMPLE_RATE_IN)
        if new.turn_detection != old.turn_detection:
            self._manual.clear()
            await self.session.drop_speech()  # the next audio opens a vad stream with the new settings
            self._apply_vad_settings()
        self.emit({"type": "session.updated", "session": self.session_object()})

    async def _append(self, event: dict) -> None:
        pcm = self.resampler.stream(pcm16(event.get("audio"), "audio"))
        if self.config.turn_detection is None:
            if len(self._manual) + len(pcm) > self.pending.max_bytes:
                raise OpenAIError(f"the input audio buffer is over {self.gw.max_turn_audio_s:g} s "
                                  "(SOTTO_MAX_TURN_AUDIO_S): commit or clear it", code="audio_too_long")
            self._manual += pcm
            return
        step = self.gw.max_audio_frame_bytes - self.gw.max_audio_frame_bytes % 2
        for start in range(0, len(pcm), step):
            piece = pcm[start:start + step]
            await self.session.audio(MediaFrame(self._seq, self._audio_ms, piece))
            self._seq += 1
            self._audio_ms += len(piece) / 2 / (SAMPLE_RATE_IN / 1000)

    async def _commit(self, _: dict) -> None:
        if self.config.turn_detection is not None:
            if not self.session.in_utterance:
                raise OpenAIError("the buffer holds no speech to commit", code="input_audio_buffer_commit_empty")
            self.session.end_of_speech()  # the vad closes the utterance now: committed as when silence ends it
            return
        pcm = bytes(self._manual) + self.resampler.stream(b"", last=True)
        self._manual.clear()
        if len(pcm) < MIN_COMMIT_MS * SAMPLE_RATE_IN // 1000 * 2:
            raise OpenAIError(f"buffer too small: at least {MIN_COMMIT_MS} ms of audio must be appended before a "
                              "commit", code="input_audio_buffer_commit_empty")
        self.pending.add_audio(pcm)
        self.emit(Deferred(lambda: self.wire.committed(user_audio_item(new_id("item")))))

    async def _clear(self, _: dict) -> None:
        self._manual.clear()
        self.resampler = InputResampler(self.config.input_rate)
        if self.config.turn_detection is not None:
            await self.session.drop_speech()
        self.emit({"type": "input_audio_buffer.cleared"})

    # -- responses -------------------------------------------------------------------------------------------
    async def _response_create(self, event: dict) -> None:
        params = event.get("response") or {}
        if not isinstance(params, dict):
            raise OpenAIError("'response' must be an object", param="response")
        if self.session.responding:
            raise OpenAIError("Conversation already has an active response in progress",
                              code="conversation_already_has_active_response")
        overrides = response_overrides(params, await self.voices(), max_chars=self.gw.max_prompt_chars)
        if self.pending.empty():
            raise OpenAIError("nothing to respond to: add a user item (conversation.item.create) or commit audio "
                              "first", code="no_user_input")
        inp = self.pending.take(self.session.next_turn_id(), time.monotonic())
        await self.session.begin_turn(inp, self._turn_settings(overrides))

    async def _response_cancel(self, event: dict) -> None:
        turn = self.session.turn
        if turn is None or not self.session.responding:
            raise OpenAIError("there is no response in progress to cancel", code="response_cancel_not_active")
        if event.get("response_id") not in (None, f"resp_{turn.inp.turn_id}"):
            raise OpenAIError(f"response {event['response_id']!r} is not the one in progress", param="response_id")
        self.wire.cancelled_turns.add(turn.inp.turn_id)
        _, sent = self.wire.audio_sent.get(turn.inp.turn_id, (0, 0))
        self.session.interrupt(turn.inp.turn_id, sent)

    async def _utterance(self, inp: TurnInput) -> None:
        """The vad ended an utterance: it joins what the user added, and is answered unless the session says
        create_response false (then response.create answers it)."""
        try:
            self.pending.add_audio(audio.read_wav(inp.audio_wav).pcm)
        except OpenAIError as exc:  # too much audio held: this utterance is dropped, the session goes on
            self.emit({"type": "error", "error": exc.body()})
            return
        td = self.config.turn_detection
        if td is not None and td.create_response:
            # This utterance is the turn's audio: its words (the asr's) become the user item's transcript.
            taken = self.pending.take(inp.turn_id, inp.t_input_end, inp.endpoint_ms)
            await self.session.begin_turn(dataclasses.replace(taken, words=inp.words), self._turn_settings({}))
        elif inp.words is not None:
            inp.words.cancel()  # answered later by response.create, with whatever else the user adds

    def _turn_settings(self, o: dict[str, Any]) -> TurnSettings:
        """The session's turn settings with this Realtime session's own, and one response's overrides."""
        return dataclasses.replace(
            self.session.turn_settings(), system_prompt=o.get("instructions", self.config.instructions),
            voice=o.get("voice", self.config.voice),
            max_new_tokens=o.get("max_output_tokens", self.config.max_output_tokens))


async def websocket(request: web.Request) -> web.StreamResponse:
    settings = request.app[SETTINGS]
    check_caller(request)
    check_session_room(request)
    ws = web.WebSocketResponse(max_msg_size=2 * settings.gateway.max_request_bytes + 1024, heartbeat=30)
    await ws.prepare(request)
    deps = request.app[DEPS]
    realtime = RealtimeSession(ws=ws, cfg=settings, limits=request.app[LIMITS], channels=deps.channels,
                               models=request.app[MODELS], health=deps.status)
    with logs.bound(realtime.session.id):
        _LOGGER.info("realtime_session", extra={"model_query": request.query.get("model", "")})
        try:
            async with registered(request, realtime.session):
                realtime.open()
                async for msg in ws:
                    if msg.type == WSMsgType.TEXT:
                        await realtime.on_event(msg.data)
                    elif msg.type == WSMsgType.BINARY:
                        realtime.refuse_binary()
                    elif msg.type == WSMsgType.ERROR:
                        break
        finally:
            await ws.close()
    return ws
