"""Where the echo canceller places the answer it sent (its reference) beside the microphone: AEC3 cancels echo that
comes after its reference, but every jump in the reference makes it learn the echo path anew while the echo goes
through (measured through the sockets: tools/eval/echo_wires.py). A client's playback reports must not move it for
a few milliseconds' difference, and must move it where it is far off."""

from __future__ import annotations

import numpy as np

from services.gateway.conversation import events
from services.gateway.conversation.echo_cancel import EchoCanceller, EchoSettings

RATE = 16000
PIECE_S = 0.02  # the microphone's frames
MAX_ROUNDING = 4  # the resampler's filter moves a counting sample by a little


def ramp(first: int, n: int) -> events.AudioChunk:
    """Answer samples that count up (sample i is i + 1): the reference shows which sample sits where."""
    return events.AudioChunk(turn_id="t", sequence=0, sample_offset=first,
                             pcm16=np.arange(first + 1, first + n + 1, dtype="<i2").tobytes())


def reference(happenings: dict[float, callable], until_s: float) -> np.ndarray:
    """The reference beside the microphone (captured from 0.0, in 20 ms pieces up to `until_s`), with each
    happening (a chunk sent, a playback report) at its time; 0 where no answer is placed."""
    echo = EchoCanceller(EchoSettings(lead_s=0.0, gap_s=0.5))
    echo.configure(enabled=True, rate=RATE)
    echo.on_sent(events.AudioStarted(turn_id="t", sample_rate=RATE), 0.0)
    pending = sorted(happenings.items())
    out = []
    for k in range(round(until_s / PIECE_S)):
        now = (k + 1) * PIECE_S
        while pending and pending[0][0] <= now:
            pending.pop(0)[1](echo)
        mic, ref = echo.prepare(np.zeros(round(PIECE_S * RATE), "<i2").tobytes(), now)
        out.append(np.zeros(len(mic), np.int16) if ref is None else ref)
    return np.concatenate(out)


def test_a_report_of_the_clients_small_delay_does_not_move_the_reference() -> None:
    """The client plays 50 ms after receiving and reports it; the rest of the answer is sent 20 ms before the first
    part would have played out by the sending times: the reference runs on, sample after sample (AEC3 finds the
    50 ms itself)."""
    ref = reference({0.0: lambda e: e.on_sent(ramp(0, RATE // 2), 0.0),
                     0.30: lambda e: e.playback("t", RATE // 4, RATE, 0.30),   # a quarter second played by 0.30 s
                     0.48: lambda e: e.on_sent(ramp(RATE // 2, RATE // 2), 0.48)}, 0.9)
    placed = ref[ref != 0]
    steps = np.diff(placed.astype(np.int32))
    jumps = steps[np.abs(steps - 1) > MAX_ROUNDING]
    assert len(placed) > RATE // 2 and len(jumps) == 0, f"the reference jumped by {jumps.tolist()} samples"


def test_a_report_far_off_moves_the_reference() -> None:
    """A client with a deep buffer (it plays 400 ms after receiving): the sending times place the answer too early
    for AEC3, and its report moves the reference to where it plays."""
    ref = reference({0.0: lambda e: e.on_sent(ramp(0, RATE), 0.0),
                     0.50: lambda e: e.playback("t", RATE // 10, RATE, 0.50)}, 0.9)  # 0.1 s played by 0.5 s
    at_08 = ref[round(0.78 * RATE)]   # the mic's sample at 0.78 s: the answer's 0.38 s played then
    assert abs(int(at_08) - round(0.38 * RATE)) < RATE // 50, f"0.78 s has the answer's sample {at_08}"
