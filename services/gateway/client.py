"""A Python client of the gateway's WebSocket protocol (docs/protocol.md), for tools, benchmarks and tests.

    python -m services.gateway.client "What is the capital of France?" [-o answer.wav]
    python -m services.gateway.client --wav question.wav [--image cam.jpg] [--realtime]

`run_turn` sends one turn and collects everything until `turn.done`: the events in order, the reply audio and
the server's timings, plus the client-side time to first audio.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp

from services.common import audio
from services.common.audio import read_wav, wav_bytes
from services.gateway.wires.protocol import HEADER, HEADER_BYTES, PROTOCOL_VERSION, FrameKind, pack_frame

# 512 samples, one Silero window per frame: what the page sends, and each frame completes exactly one vad window
# (shorter frames complete windows unevenly, for more WebSocket messages and gateway wake-ups).
FRAME_MS = 32


@dataclass
class TurnRecord:
    events: list[dict] = field(default_factory=list)
    audio: bytearray = field(default_factory=bytearray)
    sample_rate: int = 24000
    done: dict = field(default_factory=dict)
    client_ttfa_ms: float | None = None       # last input sent -> first audio frame received

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]


class GatewayClient:
    """One session. Only `_read` receives; callers await events through `next_event`."""

    def __init__(self, url: str, origin: str | None = None) -> None:
        self.url = url
        self.origin = origin
        self.http: aiohttp.ClientSession | None = None
        self.ws: aiohttp.ClientWebSocketResponse | None = None
        self.ready: dict = {}
        self.events: asyncio.Queue[dict | bytes | None] = asyncio.Queue()
        self._reader: asyncio.Task | None = None
        self._audio_seq = 0
        self._jpeg_seq = 0

    async def __aenter__(self) -> GatewayClient:
        await self.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self, voice: str = "", language: str = "", client_vad: bool = False,
                      turn_hold: bool = False) -> dict:
        self.http = aiohttp.ClientSession()
        headers = {"Origin": self.origin} if self.origin else {}
        self.ws = await self.http.ws_connect(self.url, headers=headers, max_msg_size=0)
        self._reader = asyncio.create_task(self._read())
        await self.send(type="session.start", protocol=PROTOCOL_VERSION, sample_rate=audio.SPEECH_RATE,
                        client_vad=client_vad, voice=voice, language=language, camera=True, turn_hold=turn_hold)
        self.ready = await self.expect("session.ready", timeout=30)
        return self.ready

    async def _read(self) -> None:
        assert self.ws is not None
        async for msg in self.ws:
            if msg.type == aiohttp.WSMsgType.TEXT:
                self.events.put_nowait(json.loads(msg.data))
            elif msg.type == aiohttp.WSMsgType.BINARY:
                self.events.put_nowait(msg.data)
        self.events.put_nowait(None)

    async def next_event(self, timeout: float) -> dict | bytes:
        item = await asyncio.wait_for(self.events.get(), timeout)
        if item is None:
            raise ConnectionError("the gateway closed the session")
        return item

    async def expect(self, kind: str, timeout: float) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            item = await self.next_event(max(0.0, deadline - time.monotonic()))
            if isinstance(item, dict) and item["type"] == kind:
                return item
            if isinstance(item, dict) and item["type"] == "error" and item.get("code") == "protocol":
                raise ConnectionError(item["message"])

    async def send(self, **message: object) -> None:
        assert self.ws is not None
        await self.ws.send_str(json.dumps(message))

    async def send_audio(self, pcm16: bytes, ts_ms: float | None = None, realtime: bool = False,
                         sent: list[float] | None = None) -> float:
        """Send 16 kHz PCM16 in FRAME_MS frames; returns the monotonic time the last frame left.

        `sent`, if given, gets the monotonic time each frame left (a benchmark times from a given frame)."""
        assert self.ws is not None
        step = audio.SPEECH_RATE // 1000 * FRAME_MS * 2
        ts = time.time() * 1000 if ts_ms is None else ts_ms
        t0 = time.monotonic()
        for i in range(0, len(pcm16), step):
            await self.ws.send_bytes(pack_frame(FrameKind.AUDIO_IN, self._audio_seq, ts + i / 32, pcm16[i:i + step]))
            self._audio_seq += 1
            if sent is not None:
                sent.append(time.monotonic())
            if realtime:
                await asyncio.sleep(max(0.0, t0 + (i + step) / 32000 - time.monotonic()))
        return time.monotonic()

    async def send_jpeg(self, jpeg: bytes, ts_ms: float | None = None) -> None:
        assert self.ws is not None
        await self.ws.send_bytes(pack_frame(FrameKind.JPEG, self._jpeg_seq, time.time() * 1000 if ts_ms is None
                                            else ts_ms, jpeg))
        self._jpeg_seq += 1

    async def collect_turn(self, sent_at: float, timeout: float = 60.0) -> TurnRecord:
        """Everything up to this turn's `turn.done` (or a turn-ending `busy`/`error`). A turn the server withdraws
        because the utterance went on after a pause (`turn.resumed`: docs/protocol.md) is not the answer: its audio is
        dropped and the turn that answers the whole utterance is collected instead."""
        record = TurnRecord()
        withdrawn: set[str] = set()
        deadline = time.monotonic() + timeout
        while True:
            item = await self.next_event(max(0.0, deadline - time.monotonic()))
            if isinstance(item, bytes):
                kind = HEADER.unpack_from(item)[0]
                if kind == FrameKind.AUDIO_OUT:
                    if record.client_ttfa_ms is None:
                        record.client_ttfa_ms = (time.monotonic() - sent_at) * 1000
                    record.audio += item[HEADER_BYTES:]
                continue
            record.events.append(item)
            if item["type"] == "audio.start":
                record.sample_rate = item["sample_rate"]
            if item["type"] == "turn.resumed":
                withdrawn.add(item["turn_id"])
                record.audio, record.client_ttfa_ms = bytearray(), None
            if item["type"] == "turn.done" and item["turn_id"] not in withdrawn:
                record.done = item
                return record

    async def text_turn(self, text: str, timeout: float = 60.0) -> TurnRecord:
        await self.send(type="text", text=text)
        return await self.collect_turn(time.monotonic(), timeout)

    async def spoken_turn(self, pcm16: bytes, jpegs: list[bytes] = (), realtime: bool = False,
                          trailing_silence_s: float | None = None, timeout: float = 60.0) -> TurnRecord:
        """Speak an utterance (16 kHz PCM16) with camera frames spread over it, then silence for the endpoint.

        A live microphone goes on sending silence, so by default the silence covers the longest the server may hold
        an unfinished-sounding turn open (`turn.max_silence_ms` of session.ready)."""
        if trailing_silence_s is None:
            held_ms = self.ready.get("turn", {}).get("max_silence_ms", 0)
            trailing_silence_s = max(0.8, held_ms / 1000 + 0.2)
        ts0 = time.time() * 1000
        for i, jpeg in enumerate(jpegs):
            await self.send_jpeg(jpeg, ts0 + i * (len(pcm16) / 32) / max(1, len(jpegs)))
        await self.send_audio(pcm16, ts0, realtime)
        silence = bytes(int(trailing_silence_s * audio.SPEECH_RATE) * 2)
        sent_at = await self.send_audio(silence, ts0 + len(pcm16) / 32, realtime)
        speech_end = sent_at - (trailing_silence_s if realtime else 0.0)
        return await self.collect_turn(speech_end, timeout)

    async def close(self) -> None:
        if self.ws is not None:
            await self.ws.close()
        if self._reader is not None:
            await asyncio.gather(self._reader, return_exceptions=True)
        if self.http is not None:
            await self.http.close()


async def _main(args: argparse.Namespace) -> int:
    async with GatewayClient(args.url) as client:
        if args.wav:
            info = read_wav(Path(args.wav).read_bytes())
            if info.sample_rate != audio.SPEECH_RATE or info.channels != 1 or info.sample_width != 2:
                print("the WAV must be 16 kHz mono PCM16 (e.g. `sox in.wav -r 16000 -c 1 -b 16 out.wav`)",
                      file=sys.stderr)
                return 2
            images = [Path(p).read_bytes() for p in args.image]
            record = await client.spoken_turn(info.pcm, images, realtime=args.realtime)
        else:
            record = await client.text_turn(args.text)
    for ev in record.events:
        if ev["type"] == "text.delta":
            print(ev["text"], end="", flush=True)
        elif ev["type"] in ("error", "busy"):
            print(f"\n[{ev['type']}] {ev.get('message')}", file=sys.stderr)
    print()
    print(json.dumps(record.done.get("timings", {})), file=sys.stderr)
    if args.output and record.audio:
        Path(args.output).write_bytes(wav_bytes(bytes(record.audio), record.sample_rate))
    return 0 if record.done.get("finish_reason") not in ("error", "busy", None) else 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("text", nargs="?", default="", help="a typed turn")
    parser.add_argument("--wav", help="speak this 16 kHz mono WAV instead")
    parser.add_argument("--image", action="append", default=[], help="a JPEG camera frame (repeatable)")
    parser.add_argument("--realtime", action="store_true", help="pace the audio like a microphone")
    parser.add_argument("-o", "--output", help="write the spoken answer to this WAV")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/ws")
    args = parser.parse_args()
    if not args.text and not args.wav:
        parser.error("give a question or --wav")
    raise SystemExit(asyncio.run(_main(args)))


if __name__ == "__main__":
    main()
