"""Turns through the gateway's `/ws`, timed at the client: each event and frame is stamped on arrival.

`TimedClient` is the protocol client with two additions: every item the reader receives carries its arrival
time, and the audio it sends records when each frame left, so a spoken turn's client-side TTFA can start at the
frame holding the end of speech the server's VAD found (not at a guess).

A spoken turn starts, for the pipeline, at the first of: the client's `audio.end` (a "page" client's VAD heard
the end) and the server's VAD deciding the end on its own (a "raw" client; a page's frames can also get there a
moment before its `audio.end`).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import deque
from dataclasses import dataclass, field

import aiohttp

from services.common.audio import wav_bytes
from services.gateway.client import FRAME_MS, GatewayClient
from services.gateway.wires.protocol import HEADER, FrameKind
from tools.bench.fixtures import Case

TRAILING_SILENCE_S = 0.8


@dataclass
class TimedTurn:
    """One turn as the client saw it. Times are time.monotonic() seconds; durations are ms."""

    case: str
    outcome: str = "none"               # finish_reason, or busy / error / timeout / dropped / refused (HTTP)
    timings: dict = field(default_factory=dict)   # the server's turn.done timings
    client_ttfa_ms: float | None = None  # end of input (typed: sent; spoken: frame with VAD end) -> first audio
    client_stage_ms: float | None = None  # turn start at the server -> first audio at the client, see below
    transport_ms: float | None = None    # client_ttfa_ms - server ttfa_ms
    reply: str = ""
    error: str = ""
    llm_audio_wav: bytes = b""           # the utterance span the gateway cut (rebuilt from the VAD edges)
    mic_tail_ms: float = 0.0             # microphone audio sent after the server had ended the utterance
    audio_end_sent: float | None = None  # "page" client: when its audio.end left
    held: bool = False                   # "page" client: the server's turn model held the turn open after audio.end
    after_vad_end_ms: float = 0.0        # "page" client: audio it sent after its own VAD's end (only while held)
    images: int = 0
    chunks: list = field(default_factory=list)  # (arrival s after the first audio, samples) of each audio chunk
    sample_rate: int = 24000


class TimedClient(GatewayClient):
    """GatewayClient whose reader stamps each item with its arrival time (FIFO, so stamps stay aligned)."""

    def __init__(self, url: str, client_vad: bool = False) -> None:
        super().__init__(url)
        self.client_vad = client_vad  # a page: its own VAD, and it streams on when the server holds the turn
        self._stamps: deque[float] = deque()
        self.frame_sent: list[float] = []   # monotonic send time of each audio frame of the current turn

    async def __aenter__(self) -> TimedClient:
        await self.connect(client_vad=self.client_vad, turn_hold=self.client_vad)
        return self

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            now = time.monotonic()
            if msg.type == aiohttp.WSMsgType.TEXT:
                self._stamps.append(now)
                self.events.put_nowait(json.loads(msg.data))
            elif msg.type == aiohttp.WSMsgType.BINARY:
                self._stamps.append(now)
                self.events.put_nowait(msg.data)
        self._stamps.append(time.monotonic())
        self.events.put_nowait(None)

    async def next_event(self, timeout: float) -> dict | bytes:
        """Every read goes through next_timed (connect's wait for session.ready too), so stamps stay aligned."""
        return (await self.next_timed(timeout))[1]

    async def next_timed(self, timeout: float) -> tuple[float, dict | bytes]:
        item = await asyncio.wait_for(self.events.get(), timeout)
        stamp = self._stamps.popleft()
        if item is None:
            raise ConnectionError("the gateway closed the session")
        return stamp, item


async def run_turn(url: str, case: Case, timeout: float = 60.0, preroll_ms: float = 300.0) -> TimedTurn:
    """One turn of `case` on a fresh session (no history, so every turn sends the model the same content)."""
    turn = TimedTurn(case.name)
    try:
        async with TimedClient(url, client_vad=case.client == "page") as client:
            await asyncio.wait_for(_turn(client, case, turn, timeout, preroll_ms), timeout + 30)
    except asyncio.TimeoutError:
        turn.outcome, turn.error = "timeout", f"no turn.done within {timeout:.0f} s"
    except aiohttp.WSServerHandshakeError as exc:
        turn.outcome, turn.error = "refused", f"HTTP {exc.status} at the WebSocket handshake"
    except (ConnectionError, aiohttp.ClientError, OSError) as exc:
        turn.outcome, turn.error = "dropped", f"{type(exc).__name__}: {exc}"
    return turn


async def _turn(client: TimedClient, case: Case, turn: TimedTurn, timeout: float, preroll_ms: float) -> None:
    ts0 = time.time() * 1000
    pcm = b""
    page = case.source != "text" and case.client == "page"
    if case.source == "text":
        await client.send(type="text", text=case.text)
        sent_at = time.monotonic()
    else:
        for jpeg in case.jpegs:
            await client.send_jpeg(jpeg, ts0)
        if page:
            pcm = case.page_audio
            held, over = asyncio.Event(), asyncio.Event()
            sender = asyncio.create_task(_send_as_page(client, case, ts0, turn, held, over), name="bench::send_audio")
        else:
            pcm = case.pcm16 + bytes(int(TRAILING_SILENCE_S * 16000) * 2)
            sender = asyncio.create_task(client.send_audio(pcm, ts0, realtime=True, sent=client.frame_sent),
                                         name="bench::send_audio")
        sent_at = None
    started = ended = first_audio = None
    withdrawn: set[str] = set()  # turns the gateway withdrew because the utterance went on (turn.resumed)
    try:
        deadline = time.monotonic() + timeout + (len(pcm) / 32000)
        while True:
            stamp, item = await client.next_timed(max(0.0, deadline - time.monotonic()))
            if isinstance(item, bytes):
                if HEADER.unpack_from(item)[0] == FrameKind.AUDIO_OUT:
                    first_audio = first_audio or stamp
                    turn.chunks.append((stamp - first_audio, (len(item) - HEADER.size) // 2))
                continue
            kind = item["type"]
            if kind == "speech.started":
                started = item["ts_ms"]
            elif kind == "turn.hold" and page:
                held.set()
            elif kind == "audio.start":
                turn.sample_rate = item.get("sample_rate", turn.sample_rate)
            elif kind == "speech.ended":
                ended = (item["ts_ms"], stamp)
                if page:
                    over.set()
            elif kind == "turn.started":
                turn.images = item.get("images", 0)
            elif kind == "busy":
                turn.outcome = "busy"
            elif kind == "error":
                turn.error = f"{item.get('code')}: {item.get('message')}"
            elif kind == "turn.resumed":
                withdrawn.add(item["turn_id"])
                first_audio, turn.chunks, turn.error = None, [], ""
            elif kind == "turn.done" and item["turn_id"] in withdrawn:
                continue
            elif kind == "turn.done":
                turn.timings = item.get("timings", {})
                turn.reply = item.get("text", "")
                if turn.outcome != "busy":
                    turn.outcome = "error" if turn.error and item["finish_reason"] == "error" \
                        else item["finish_reason"]
                break
    finally:
        if page:
            over.set()
        if case.source != "text":
            await sender
    if turn.held:
        pcm = case.trailed
    if case.source != "text" and ended is not None and started is not None:
        # The frame that carried the last speech sample the VAD reported: the server's "end of speech".
        index = min(len(client.frame_sent) - 1, max(0, int((ended[0] - ts0) // FRAME_MS)))
        sent_at = client.frame_sent[index]
        lo = max(0, int((started - preroll_ms - ts0) * 16)) * 2
        hi = min(len(pcm), int((ended[0] - ts0) * 16) * 2)
        turn.llm_audio_wav = wav_bytes(pcm[lo:hi], 16000)
        turn.mic_tail_ms = FRAME_MS * sum(1 for t in client.frame_sent if t > ended[1])
    if first_audio is not None and sent_at is not None:
        turn.client_ttfa_ms = round((first_audio - sent_at) * 1000, 1)
        if "ttfa_ms" in turn.timings:
            turn.transport_ms = round(turn.client_ttfa_ms - turn.timings["ttfa_ms"], 1)
        # Typed: the whole client TTFA. Spoken: from the turn's start (see the module's docstring).
        started_at = sent_at + turn.timings.get("endpoint_ms", 0.0) / 1000
        if turn.audio_end_sent is not None:
            started_at = min(started_at, turn.audio_end_sent)
        turn.client_stage_ms = round((first_audio - started_at) * 1000, 1)


async def _send_as_page(client: TimedClient, case: Case, ts0: float, turn: TimedTurn, held: asyncio.Event,
                        over: asyncio.Event) -> None:
    """The page's way: audio up to the frame where its VAD heard the end, then `audio.end` at once; and if the
    server's turn model holds the turn open (turn.hold), the silence that follows, until the utterance is over."""
    pcm = case.page_audio
    await client.send_audio(pcm, ts0, realtime=True, sent=client.frame_sent)
    page_frames = len(client.frame_sent)
    turn.audio_end_sent = time.monotonic()
    await client.send(type="audio.end")
    waits = [asyncio.ensure_future(e.wait()) for e in (held, over)]
    await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
    for w in waits:
        w.cancel()
    if held.is_set() and not over.is_set():
        turn.held = True
        streaming = asyncio.ensure_future(client.send_audio(case.trailed[len(pcm):], ts0 + len(pcm) / 32,
                                                            realtime=True, sent=client.frame_sent))
        waiting = asyncio.ensure_future(over.wait())
        await asyncio.wait([streaming, waiting], return_when=asyncio.FIRST_COMPLETED)
        streaming.cancel()
        waiting.cancel()
    turn.after_vad_end_ms = FRAME_MS * (len(client.frame_sent) - page_frames)
