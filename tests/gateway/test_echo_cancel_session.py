"""The echo canceller in a session, through the gateway's wires (fake vad/llm/tts peers, the real canceller): who
gets it (Realtime clients by default, /ws clients that ask), how a client turns it on or off, and an answer played
back into the microphone of a client without its own VAD, which interrupts the answer only when the canceller is
off."""

from __future__ import annotations

import asyncio
import time

import numpy as np
import pytest
import soxr

from services.gateway.wires.protocol import HEADER_BYTES, FrameKind, pack_frame
from tests.gateway.conftest import Client, Stack
from tests.gateway.test_openai_realtime import realtime
from tools.eval import echo_room

ECHO_GAIN = 0.5        # -6 dB: a loudspeaker near the microphone
ECHO_DELAY_S = 0.1     # from the client's receiving the audio to its echo reaching the microphone
FRAME = 320            # 20 ms at 16 kHz


async def start(connect, **fields: object) -> dict:
    client = await connect(start=False)
    await client.send(type="session.start", protocol=1, sample_rate=16000, **fields)
    return (await client.wait_for("session.ready"))["turn"]


@pytest.mark.parametrize(("fields", "on"), [
    ({}, False),                     # a /ws client asks: the page's browser cancels its own echo, a file has none
    ({"client_vad": True}, False),
    ({"echo_cancel": "on"}, True),   # a client on a loudspeaker, without echo cancelling of its own
    ({"client_vad": True, "echo_cancel": "on"}, True),
    ({"echo_cancel": "off"}, False),
])
async def test_session_ready_says_whether_the_server_cancels_the_echo(stack, connect, fields, on) -> None:
    assert (await start(connect, **fields))["echo_cancel"] is on


@pytest.mark.parametrize("stack", [{"echo_cancel": False}], indirect=True)
async def test_the_gateway_setting_turns_it_off_for_realtime_clients(stack) -> None:
    async with realtime(stack) as events:
        created = await events.wait_for("session.created")
        await events.conn.session.update(session={"type": "realtime", "audio": {"input": {
            "noise_reduction": {"type": "far_field"}}}})
        asked = await events.wait_for("session.updated")
    assert created.session.audio.input.noise_reduction is None
    assert asked.session.audio.input.noise_reduction.type == "far_field"


async def test_an_unknown_echo_cancel_is_refused_by_name_and_a_good_start_follows(stack, connect) -> None:
    client = await connect(start=False)
    await client.send(type="session.start", protocol=1, echo_cancel="maybe")
    error = await client.wait_for("error")
    assert error["code"] == "bad_message"
    assert "echo_cancel 'maybe'" in error["message"] and "'on', 'off'" in error["message"]
    await client.send(type="session.start", protocol=1, echo_cancel="on")
    assert (await client.wait_for("session.ready"))["turn"]["echo_cancel"] is True


async def test_realtime_noise_reduction_turns_the_canceller_on_and_off(stack: Stack) -> None:
    async with realtime(stack) as events:
        created = await events.wait_for("session.created")
        assert created.session.audio.input.noise_reduction.type == "far_field"  # on by default
        await events.conn.session.update(session={"type": "realtime", "audio": {"input": {
            "noise_reduction": {"type": "near_field"}}}})
        near = await events.wait_for("session.updated")
        await events.conn.session.update(session={"type": "realtime", "audio": {"input": {
            "noise_reduction": {"type": "loud_room"}}}})
        refused = await events.wait_for("error")
        await events.conn.session.update(session={"type": "realtime", "audio": {"input": {"noise_reduction": None}}})
        back = await events.wait_for("session.updated", count=2)
    assert near.session.audio.input.noise_reduction is None
    assert refused.error.param == "session.audio.input.noise_reduction" and "far_field" in refused.error.message
    assert back.session.audio.input.noise_reduction.type == "far_field"  # null: the gateway's default again


class Loudspeaker:
    """A client without its own VAD whose microphone hears what it plays: it streams 20 ms frames in real time,
    each carrying the answer it received ECHO_DELAY_S later, at ECHO_GAIN, and a person's speech once `speak()` is
    called. It plays as a client's player does: each piece of the answer on arrival, or when the one before it ends
    if that is later."""

    def __init__(self, client: Client) -> None:
        self.client = client
        self.person = np.zeros(0, np.float32)
        self.person_at: float | None = None  # monotonic: when the person starts speaking
        self.resampler = soxr.ResampleStream(24000, 16000, 1, dtype="float32")
        self.played = np.zeros(0, np.float32)  # the answer at 16 kHz, from its first sample
        self.runs: list[tuple[float, int]] = []  # (monotonic, sample of `played`): where playing (re)started
        self.taken = 0                         # audio frames of the client's already taken

    @property
    def first_at(self) -> float | None:
        return self.runs[0][0] if self.runs else None

    @property
    def ends_at(self) -> float | None:
        """When the answer received so far has played."""
        if not self.runs:
            return None
        at, first = self.runs[-1]
        return at + (len(self.played) - first) / 16000

    def _receive(self) -> None:
        frames = [(at, f) for at, f in self.client.frames if f[0] == FrameKind.AUDIO_OUT]
        for at, frame in frames[self.taken:]:
            if self.ends_at is None or at > self.ends_at:
                self.runs.append((at, len(self.played)))  # the player had run dry: this piece plays on arrival
            pcm = np.frombuffer(frame[HEADER_BYTES:], dtype="<i2").astype(np.float32)
            self.played = np.concatenate([self.played, self.resampler.resample_chunk(pcm)])
        self.taken = len(frames)

    @staticmethod
    def _mix(out: np.ndarray, source: np.ndarray, first: int, gain: float = 1.0) -> None:
        lo, hi = max(first, 0), min(first + len(out), len(source))
        if hi > lo:
            out[lo - first: hi - first] += source[lo:hi] * gain

    def _echo(self, start_s: float) -> np.ndarray:
        self._receive()
        out = np.zeros(FRAME, np.float32)
        if self.person_at is not None:
            self._mix(out, self.person, round((start_s - self.person_at) * 16000))
        heard = start_s - ECHO_DELAY_S
        for i, (at, first) in enumerate(self.runs):
            if at <= heard + FRAME / 16000:
                end = self.runs[i + 1][1] if i + 1 < len(self.runs) else len(self.played)
                self._mix(out, self.played[:end], first + round((heard - at) * 16000), ECHO_GAIN)
        return out

    async def stream(self, until: asyncio.Event) -> None:
        seq, t0 = 0, time.monotonic()
        while not until.is_set():
            start_s = t0 + seq * FRAME / 16000
            await asyncio.sleep(max(0.0, start_s + FRAME / 16000 - time.monotonic()))
            pcm = np.clip(np.rint(self._echo(start_s)), -32768, 32767).astype("<i2").tobytes()
            await self.client.ws.send_bytes(pack_frame(FrameKind.AUDIO_IN, seq, seq * 20.0, pcm))
            seq += 1

    def speak(self, person: np.ndarray, at: float) -> None:
        """The person (16 kHz) starts speaking at `at` (monotonic)."""
        self.person, self.person_at = person.astype(np.float32), at


@pytest.fixture(scope="module")
def spoken_answer() -> np.ndarray:
    """What the fake tts says: a real answer in Piper's voice (a tone would mislead an echo canceller)."""
    return echo_room.synthesise(echo_room.ANSWERS[:1])[0]


@pytest.mark.parametrize("echo_cancel", ["on", "off"])
async def test_an_answer_heard_by_the_microphone_interrupts_itself_only_without_the_canceller(
        stack, connect, spoken_answer, echo_cancel) -> None:
    """The answer (3.4 s) plays into the microphone of a client without VAD: with the canceller the session hears
    nothing and the answer plays to its end; without it, the answer's own echo is speech and cuts it."""
    stack.tts.voice = spoken_answer
    # What a recogniser hears in a piece of the echo: a few of the answer's words (the fake's default question is
    # more words than a short piece of sound holds, which the backchannel rule takes for an invented sentence).
    stack.asr.words = "The sea."
    stack.tts.chunks_per_sentence = 20
    stack.tts.chunk_delay_s = 0.06  # a little faster than it plays: the turn is still responding when it is heard
    client = await connect(start=False)
    await client.send(type="session.start", protocol=1, sample_rate=16000, echo_cancel=echo_cancel)
    await client.wait_for("session.ready")
    done, speaker = asyncio.Event(), Loudspeaker(client)
    mic = asyncio.create_task(speaker.stream(done))
    try:
        await asyncio.sleep(0.3)
        await client.send(type="text", text="Tell me a story.")
        turn = await client.wait_for("turn.done", timeout=15.0)
        await asyncio.sleep(1.5)  # the answer still plays, and echoes, after its last chunk was sent
    finally:
        done.set()
        await mic
    heard = "speech.started" in client.types()
    if echo_cancel == "on":
        assert not heard and not turn["interrupted"], f"the cancelled echo was heard: {client.types()}"
    else:
        assert heard and turn["interrupted"], f"the echo was not heard without the canceller: {client.types()}"
