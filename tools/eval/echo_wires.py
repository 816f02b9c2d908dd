"""Echo and cut-ins in a simulated room, through the gateway's sockets: does a client without its own VAD, whose
microphone hears the answer from a loudspeaker, make the answer stop itself, and how soon does a person speaking
over the answer stop it?

    python -m tools.eval.echo_wires [--answers 20] [--cut-ins 20] [--backchannels 0] [--level=-12]
                                    [--wires ws,ws-no-canceller,realtime] [--spoken-question]
    (make eval-echo-wires)

Unlike tools.eval.echo_room (the canceller and the vad replayed in one process), everything on the server side here
is the real stack (tools.stack: vad, asr, llm on SmolLM2, tts on Piper's English voice, gateway), reached through its
sockets in real time:
- `ws`: `/ws` as a client without its own VAD that reports its playback, with `echo_cancel: "on"`;
- `ws-no-canceller`: the same with `echo_cancel: "off"` (the control: what the canceller is for);
- `realtime`: `/v1/realtime` as an OpenAI Realtime client (server VAD, `noise_reduction` left to the gateway's
  default: the canceller on); it reports no playback, as such clients do not.
The client plays each piece of the answer as it arrives (after its output latency, or when the piece before it ends)
into the room of tools.eval.echo_room (pyroomacoustics: RT60 about 0.3 s, the loudspeaker half a metre and the person
a metre from the microphone, background noise), and streams what its microphone hears in 20 ms frames, in real time.

The stack runs a bench-only configuration (labelled): at most 30 tokens, greedy, no history (tools.eval.echo's
STACK_ENV), so that every answer carries seconds of echo; the echo path does not depend on them.

- self-interruptions: typed questions whose answers play with the echo alone. An answer the client stops is one:
  on `/ws` a `turn.cut` or a `turn.done` that says interrupted; on Realtime `input_audio_buffer.speech_started` while
  the answer plays (a Realtime client stops its playback on it);
- cut-ins: a person (human speech, the Asterisk prompts) speaks over the answer 1 s into its playback: from their
  first word to the client stopping playback, p50 / p95, and misses (the answer played on); and, where the gateway
  first lowers the answer (`turn.duck` on `/ws`: speech it has not yet judged a cut-in or a backchannel,
  conversation/backchannel.py), to its ducking. Answers the echo ducked without stopping are counted beside;
- backchannels (`--backchannels N`): a human "oh" or "right" (tools/eval/backchannels.py) over the answer 1 s into
  its playback: answers it stopped, and on `/ws` those the gateway un-ducked (`turn.unduck`).

With `--spoken-question` the person asks each question aloud (a human prompt, with nothing playing) instead of
typing it, so the session has heard them before the answer plays, as in a spoken conversation: what the server
learns of the user's voice (a level, say) is then in play.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import platform
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import numpy as np
import soxr

from services.gateway.wires.protocol import HEADER_BYTES, FrameKind, pack_frame
from tools.eval import echo_room
from tools.eval.echo import PROMPTS, stack_env
from tools.eval.room_player import FRAME, OUTPUT_LATENCY_S, RATE, Acoustics, RoomPlayer
from tools.stack import RealStack, start_stack, stop_stack

REALTIME_RATE = 24000       # what a Realtime client sends and receives
PLAYBACK_REPORT_S = 0.25    # how often a /ws client reports its playback (as the page does)
CUT_IN_AFTER_S = 1.0        # into the answer's playback
MISS_S = 2.0                # an answer that plays on this long after the person began was not stopped by them
WIRES = ("ws", "ws-no-canceller", "realtime")


@dataclass
class Run:
    """One answer as the client lived it (monotonic times)."""

    first_audio_at: float | None = None
    done_at: float | None = None
    stopped_at: float | None = None
    stop_event: str = ""
    ducked_at: float | None = None  # the first time the answer was lowered (speech over it, not yet judged)
    events: list[tuple[float, str]] = field(default_factory=list)


class Wire:
    """A client of one of the gateway's sockets: opens the session, asks, streams the microphone, and tells the
    player what arrived and when to stop."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse, player: RoomPlayer, run: Run) -> None:
        self.ws, self.player, self.run = ws, player, run
        self.seq = 0

    async def open(self) -> None:
        raise NotImplementedError

    async def ask(self, text: str) -> None:
        raise NotImplementedError

    async def send_microphone(self, pcm16: bytes) -> None:
        raise NotImplementedError

    def on_message(self, message: dict, at: float) -> None:
        raise NotImplementedError

    async def read(self) -> None:
        async for msg in self.ws:
            at = time.monotonic()
            if msg.type == aiohttp.WSMsgType.BINARY:
                self.on_binary(msg.data, at)
            elif msg.type == aiohttp.WSMsgType.TEXT:
                message = json.loads(msg.data)
                self.run.events.append((at, message.get("type", "")))
                self.on_message(message, at)

    def on_binary(self, data: bytes, at: float) -> None:
        pass

    def audio(self, pcm16: bytes, at: float) -> None:
        if self.run.first_audio_at is None:
            self.run.first_audio_at = at
        self.player.play(pcm16, at)

    def duck(self, gain_db: float, at: float) -> None:
        if self.run.stopped_at is None and self.run.first_audio_at is not None:
            self.run.ducked_at = self.run.ducked_at or at
            self.player.duck(gain_db, at)

    def stop(self, event: str, at: float) -> None:
        if self.run.stopped_at is None and self.run.first_audio_at is not None:
            self.run.stopped_at, self.run.stop_event = at, event
            self.player.stop(at)


class WsWire(Wire):
    """`/ws` (docs/protocol.md) without a VAD of its own, reporting its playback as the page does."""

    def __init__(self, ws, player, run, echo_cancel: str) -> None:
        super().__init__(ws, player, run)
        self.echo_cancel = echo_cancel
        self.turn_id = ""
        self.reported_at = 0.0
        self.ducked_db = 0.0

    async def open(self) -> None:
        await self.ws.send_json({"type": "session.start", "protocol": 1, "sample_rate": RATE,
                                 "echo_cancel": self.echo_cancel})

    async def ask(self, text: str) -> None:
        await self.ws.send_json({"type": "text", "text": text})

    async def send_microphone(self, pcm16: bytes) -> None:
        await self.ws.send_bytes(pack_frame(FrameKind.AUDIO_IN, self.seq, self.seq * 20.0, pcm16))
        self.seq += 1
        now = time.monotonic()
        if self.turn_id and self.run.stopped_at is None and now - self.reported_at >= PLAYBACK_REPORT_S:
            self.reported_at = now
            await self.ws.send_json({"type": "playback", "turn_id": self.turn_id,
                                     "played_samples": self.player.played(now)})

    def on_binary(self, data: bytes, at: float) -> None:
        if data[0] == FrameKind.AUDIO_OUT:
            self.audio(data[HEADER_BYTES:], at)

    def on_message(self, message: dict, at: float) -> None:
        kind = message.get("type")
        if kind == "audio.start":
            self.turn_id = message["turn_id"]
        elif kind == "turn.duck" and message.get("turn_id") == self.turn_id:
            self.ducked_db = float(message["gain_db"])
            self.duck(self.ducked_db, at)
        elif kind == "turn.unduck" and message.get("turn_id") == self.turn_id and self.ducked_db:
            self.duck(-self.ducked_db, at)
            self.ducked_db = 0.0
        elif kind in ("turn.cut", "turn.resumed") and message.get("turn_id") == self.turn_id:
            self.stop(kind, at)
        elif kind == "turn.done" and message.get("turn_id") == self.turn_id:
            self.run.done_at = at
            if message.get("interrupted"):
                self.stop("turn.done interrupted", at)


class RealtimeWire(Wire):
    """`/v1/realtime` as an OpenAI Realtime client: PCM16 at 24 kHz both ways, server VAD, and playback stopped on
    `input_audio_buffer.speech_started` while the answer plays."""

    def __init__(self, ws, player, run) -> None:
        super().__init__(ws, player, run)
        self.resampler = soxr.ResampleStream(RATE, REALTIME_RATE, 1, dtype="int16")

    async def open(self) -> None:
        pass  # the session as the gateway opens it: server VAD, the canceller on (noise_reduction's default)

    async def ask(self, text: str) -> None:
        await self.ws.send_json({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}})
        await self.ws.send_json({"type": "response.create"})

    async def send_microphone(self, pcm16: bytes) -> None:
        pcm = self.resampler.resample_chunk(np.frombuffer(pcm16, dtype="<i2"))
        await self.ws.send_json({"type": "input_audio_buffer.append",
                                 "audio": base64.b64encode(pcm.astype("<i2").tobytes()).decode()})

    def on_message(self, message: dict, at: float) -> None:
        kind = message.get("type")
        if kind == "response.output_audio.delta":
            self.audio(base64.b64decode(message["delta"]), at)
        elif kind == "input_audio_buffer.speech_started" and self.player.playing(at):
            self.stop(kind, at)
        elif kind == "response.done":
            self.run.done_at = at


async def converse(stack: RealStack, wire_name: str, question: str | np.ndarray, player: RoomPlayer,
                   person: np.ndarray | None = None, person_dbfs: float = -26.0) -> tuple[Run, float | None]:
    """One session, one question (typed, or said: 16 kHz audio) whose answer plays into the room (and, with
    `person`, someone speaking over it): the run, and when the person's first word was heard (monotonic)."""
    run = Run()
    url = stack.ws_url if wire_name.startswith("ws") else stack.http_url.replace("http", "ws", 1) + "/v1/realtime"
    spoke_at = None
    async with aiohttp.ClientSession() as http, http.ws_connect(url, max_msg_size=0) as ws:
        wire: Wire = (WsWire(ws, player, run, "off" if wire_name == "ws-no-canceller" else "on")
                      if wire_name.startswith("ws") else RealtimeWire(ws, player, run))
        await wire.open()
        reader = asyncio.create_task(wire.read())
        stop = asyncio.Event()

        async def stream() -> None:
            k = 0
            while not stop.is_set():
                await asyncio.sleep(max(0.0, player.time_of((k + 1) * FRAME) - time.monotonic()))
                await wire.send_microphone(player.microphone(k))
                k += 1

        player.t0 = time.monotonic()  # the microphone's clock starts with its first frame
        mic = asyncio.create_task(stream())
        try:
            await asyncio.sleep(0.5)
            if isinstance(question, str):
                await wire.ask(question)
            else:
                player.speak(question, time.monotonic(), person_dbfs)
            await until(lambda: player.first_played_at is not None, 90)
            if person is not None:
                at = player.first_played_at + CUT_IN_AFTER_S
                player.speak(person, at, person_dbfs)
                spoke_at = at + echo_room.onset_s(person)
            await until(lambda: run.done_at is not None, 90)
            await until(lambda: time.monotonic() > player.ends_at + 1.0 and (
                spoke_at is None or time.monotonic() > spoke_at + MISS_S), 120)
        finally:
            stop.set()
            await asyncio.gather(mic, return_exceptions=True)
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    return run, spoke_at


async def until(condition, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"waited {timeout_s:.0f} s")
        await asyncio.sleep(0.02)


def percentile(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q))) if values else None


async def evaluate(stack: RealStack, wires: list[str], answers: int, people: list[np.ndarray], level: float,
                   person_dbfs: float, backchannels: list[np.ndarray] = (), spoken: np.ndarray | None = None) -> dict:
    """`spoken`: the question every session asks aloud (None: typed, PROMPTS)."""
    acoustics = Acoustics.of(echo_room.Room(), person_dbfs + level)

    def question(i: int) -> str | np.ndarray:
        return PROMPTS[i % len(PROMPTS)] if spoken is None else spoken

    report: dict = {}
    for wire in wires:
        alone, ducked = [], 0
        for i in range(answers):
            run, _ = await converse(stack, wire, question(i), RoomPlayer(acoustics, seed=i))
            ducked += run.ducked_at is not None
            if run.stopped_at is not None:
                alone.append(f"answer {i}: {run.stop_event} {run.stopped_at - run.first_audio_at:.2f} s into it")
        stops, ducks, first, missed = [], [], 0, 0
        for i, person in enumerate(people):
            run, spoke_at = await converse(stack, wire, question(i), RoomPlayer(acoustics, seed=i), person,
                                           person_dbfs)
            if run.ducked_at is not None and spoke_at <= run.ducked_at <= spoke_at + MISS_S:
                ducks.append(round((run.ducked_at - spoke_at) * 1000))
            if run.stopped_at is not None and run.stopped_at < spoke_at:
                first += 1  # the echo stopped the answer before the person spoke
            elif run.stopped_at is not None and run.stopped_at - spoke_at <= MISS_S:
                stops.append(round((run.stopped_at - spoke_at) * 1000))
            else:
                missed += 1
        stopped_by_backchannel, unducked = [], 0
        for i, sound in enumerate(backchannels):
            run, spoke_at = await converse(stack, wire, question(i), RoomPlayer(acoustics, seed=100 + i), sound,
                                           person_dbfs)
            unducked += any(kind == "turn.unduck" for _, kind in run.events)
            if run.stopped_at is not None and run.stopped_at >= spoke_at:
                stopped_by_backchannel.append(f"backchannel {i}: {run.stop_event}")
        report[wire] = {"backchannels": len(backchannels), "backchannels_stopped": len(stopped_by_backchannel),
                        "backchannels_unducked": unducked, "stopped_by_backchannel": stopped_by_backchannel,
                        "answers": answers, "self_interruptions": len(alone), "ducked_by_echo": ducked,
                        "self_interrupted": alone, "cut_ins": len(people),
                        "stopped": len(stops), "missed": missed, "stopped_itself_first": first,
                        "stop_p50_ms": percentile(stops, 50), "stop_p95_ms": percentile(stops, 95),
                        "stops_ms": stops, "ducked": len(ducks), "duck_p50_ms": percentile(ducks, 50),
                        "duck_p95_ms": percentile(ducks, 95)}
        print(f"  {wire}: {report[wire]}", flush=True)
    return report


def main() -> None:
    from tools.eval.backchannels import backchannels
    parser = argparse.ArgumentParser(description="Echo and cut-ins in a simulated room, through the sockets.")
    parser.add_argument("--answers", type=int, default=20, help="answers with the echo alone, per wire")
    parser.add_argument("--cut-ins", type=int, default=20, help="people speaking over an answer, per wire")
    parser.add_argument("--backchannels", type=int, default=0,
                        help="human backchannels (tools/eval/backchannels.py, cycled) over an answer, per wire")
    parser.add_argument("--level", type=float, default=-12.0, help="echo level in dB relative to the person")
    parser.add_argument("--person-dbfs", type=float, default=-26.0, help="the person's speech level at the mic")
    parser.add_argument("--wires", type=lambda t: t.split(","), default=list(WIRES), help=",".join(WIRES))
    parser.add_argument("--spoken-question", action="store_true",
                        help="the person asks aloud (a human prompt no cut-in uses) instead of typing")
    parser.add_argument("--out", type=Path, default=Path("bench/results/eval_echo_wires.json"))
    args = parser.parse_args()
    if args.answers < 0 or args.cut_ins < 0 or not set(args.wires) <= set(WIRES):
        parser.error(f"--answers and --cut-ins must be at least 0; --wires is a comma list of {', '.join(WIRES)}")
    people = echo_room.cut_in_people(args.cut_ins + 1)
    spoken = people.pop() if args.spoken_question else None
    people = people[: args.cut_ins]
    human = backchannels() if args.backchannels else []
    said = [human[i % len(human)].audio for i in range(args.backchannels)]
    with tempfile.TemporaryDirectory(prefix="sotto-echo-wires-") as tmp:
        stack = start_stack(Path(tmp), **stack_env())
        try:
            started = time.strftime("%Y-%m-%dT%H:%M:%S")
            results = asyncio.run(evaluate(stack, args.wires, args.answers, people, args.level, args.person_dbfs,
                                           said, spoken))
        finally:
            stop_stack(stack)
    report = {"machine": platform.machine(), "started": started, "room": echo_room.Room().__dict__,
              "echo_db": args.level, "person_dbfs": args.person_dbfs, "output_latency_s": OUTPUT_LATENCY_S,
              "configuration": "bench-only: SmolLM2, at most 30 tokens, greedy, no history (tools.eval.echo)",
              "people": f"{len(people)} Asterisk prompts (human speech)", "spoken_question": spoken is not None,
              "backchannels": [h.name for h in human], "wires": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
