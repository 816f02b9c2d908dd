"""The server's echo canceller in a simulated room: does a client without its own VAD, whose microphone hears the
answer from a loudspeaker, make the answer interrupt itself, with and without the canceller, and is a person who
speaks over the answer still heard?

    python -m tools.eval.echo_room [--answers 20] [--cut-ins 20] [--levels=-30,-20,-12,-6,0] [--out FILE]
    (make eval-echo-room)

What is real: the answers (Piper's English voice, the offline kit's, synthesised in process), the people (human
speech from tools.eval.human_speech), the room (pyroomacoustics: a shoebox with reverberation, the loudspeaker and the
user at a distance from the microphone, background noise), the canceller (the gateway's EchoCanceller: WebRTC AEC3)
and the vad (the vad service's Silero engine and endpointing, with the barge-in gate the service applies while an
answer plays). What is simulated: the timeline a session sees (answer chunks sent faster than real time, the client
playing them after a delay, the microphone arriving in 20 ms frames with network jitter), replayed in one process
instead of through the gateway's socket: a figure of the canceller and the vad, not of the whole stack (the
end-to-end test tests/e2e/test_echo_cancel.py runs the real stack).

- self-interruptions: answers alone, echo at each level relative to the user's speech; a speech start while the
  answer plays is one;
- cut-ins: a person speaks over the answer 1 s in (echo at --cut-in-level); from the person's first word to the
  vad's speech start, p50 / p95, and misses.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyroomacoustics as pra
import soxr

from services.common import config
from services.gateway.conversation import events
from services.gateway.conversation.echo_cancel import EchoCanceller, EchoSettings
from services.vad.endpointing import SpeechEventKind, VadSettings
from services.vad.engine import SileroVad

RATE = 16000          # the microphone's
ANSWER_RATE = 24000   # the tts service's
FRAME_S = 0.02        # the client's microphone frames
CHUNK = 2048          # the tts service's chunk, at ANSWER_RATE
ANSWERS = ("The sea covers most of the planet and holds more life than any forest on land. Its tides follow the "
           "moon, and its waves carry energy across whole oceans before they break on a beach.",
           "A good breakfast has some protein, some fruit and something warm to drink. Eggs, oats and yoghurt are "
           "all fine choices, and they keep you going until lunch.",
           "Trains run on steel rails, pulled by an engine that turns electricity or diesel into motion. The "
           "wheels are shaped so that the train stays on the track, even on a bend.",
           "Cats sleep for most of the day, and spend much of the rest of it grooming, watching birds from a window "
           "and asking for food. They are most awake at dawn and dusk.",
           "Mountains in winter are quiet and cold. Snow covers the paths, the lakes freeze over, and the days are "
           "short, so walkers set out early and come back before dark.")


@dataclass(frozen=True)
class Room:
    """A living room: the loudspeaker and the person at a distance from the microphone (metres)."""

    size: tuple[float, float, float] = (5.0, 4.0, 2.6)
    absorption: float = 0.25    # of every wall: about 0.3 s of reverberation
    mic: tuple[float, float, float] = (2.5, 2.0, 0.8)
    speaker: tuple[float, float, float] = (2.9, 2.3, 0.9)   # a laptop's or a smart speaker's, half a metre away
    person: tuple[float, float, float] = (2.5, 1.2, 1.2)    # the user, about a metre away
    noise_dbfs: float = -60.0   # background noise at the microphone

    def impulse(self, source: tuple[float, float, float]) -> np.ndarray:
        room = pra.ShoeBox(list(self.size), fs=RATE, materials=pra.Material(self.absorption), max_order=17)
        room.add_source(list(source))
        room.add_microphone(list(self.mic))
        room.compute_rir()
        return np.asarray(room.rir[0][0], dtype=np.float64)


@dataclass(frozen=True)
class Timing:
    """When things happen in a session, in seconds from the microphone's first sample."""

    first_chunk_s: float = 0.5      # the answer's first chunk goes out
    synthesis_speed: float = 3.0    # chunks go out this much faster than they play (a small machine's tts)
    client_delay_s: float = 0.12    # from a chunk's sending to its playing: network and the client's player
    network_s: float = 0.01         # a microphone frame's trip to the gateway (plus up to as much jitter)


def active_dbfs(samples: np.ndarray) -> float:
    """Level of the speech in `samples`: RMS over the 20 ms frames above -50 dBFS (as tools.eval.echo)."""
    frame = RATE // 50
    frames = samples[: len(samples) // frame * frame].astype(np.float64).reshape(-1, frame) / 32768
    power = (frames ** 2).mean(axis=1)
    return float(10 * np.log10(power[power > 10 ** (-50 / 10)].mean()))


def synthesise(texts: tuple[str, ...], seed: int | None = None) -> list[np.ndarray]:
    """The answers in Piper's English voice (the offline kit's), at the tts service's rate. Piper's voice varies
    between syntheses (its noise is drawn by onnxruntime, seeded per process); `seed` fixes that draw, so that a
    test hears the same answers on every run."""
    if seed is not None:
        import onnxruntime
        onnxruntime.set_seed(seed)
    from services.tts.models import piper_voices
    from services.tts.piper import PiperEngine
    engine = PiperEngine(piper_voices(None))
    return [np.concatenate([np.frombuffer(c.pcm, dtype="<i2") for c in engine.synthesize(text)]) for text in texts]


def reference_answer(rate: int) -> np.ndarray:
    """The first answer (float64 at `rate`): what the level calibrations of the echo play through a room."""
    return soxr.resample(synthesise(ANSWERS[:1])[0].astype(np.float64), ANSWER_RATE, rate)


def cut_in_people(count: int) -> list[np.ndarray]:
    """`count` things people say to stop an answer: complete human utterances of 1 to 3 s (Asterisk's prompts)."""
    from tools.eval.human_speech import COMPLETE, asterisk_clips
    return [c.audio for c in asterisk_clips() if c.label == COMPLETE and 1.0 <= c.seconds <= 3.0][:count]


def at_level(x: np.ndarray, dbfs: float) -> np.ndarray:
    return x * 10 ** ((dbfs - active_dbfs(x)) / 20)


def microphone(answer: np.ndarray, room: Room, timing: Timing, echo_dbfs: float | None,
               person: np.ndarray | None = None, person_at_s: float = 0.0, person_dbfs: float = -26.0,
               seed: int = 0) -> np.ndarray:
    """What the client's microphone hears: the answer from the loudspeaker once the client plays it (at
    `echo_dbfs`, None: none), the person from `person_at_s` (at `person_dbfs`), and the room's noise."""
    rng = np.random.default_rng(seed)
    played_from = timing.first_chunk_s + timing.client_delay_s
    total = int((played_from + len(answer) / ANSWER_RATE + 1.5) * RATE)
    mic = np.zeros(total)
    if echo_dbfs is not None:
        echo = at_level(np.convolve(soxr.resample(answer.astype(np.float64), ANSWER_RATE, RATE),
                                    room.impulse(room.speaker)), echo_dbfs)
        start = int(played_from * RATE)
        echo = echo[: total - start]
        mic[start: start + len(echo)] += echo
    if person is not None:
        voice = at_level(np.convolve(person.astype(np.float64), room.impulse(room.person)), person_dbfs)
        start = int(person_at_s * RATE)
        voice = voice[: total - start]
        mic[start: start + len(voice)] += voice
    mic += rng.standard_normal(total) * 32768 * 10 ** (room.noise_dbfs / 20)
    return np.clip(np.rint(mic), -32768, 32767).astype(np.int16)


def vad_settings() -> VadSettings:
    """The vad service's settings (SOTTO_VAD_*, SOTTO_BARGE_IN_*); turns end on silence (starts are counted)."""
    v = config.load(config.VadConfig)
    return VadSettings(threshold=v.threshold, min_speech_ms=v.min_speech_ms, min_silence_ms=v.min_silence_ms,
                       speech_pad_ms=v.speech_pad_ms, semantic=False, barge_in_threshold=v.barge_in_threshold,
                       barge_in_min_speech_ms=v.barge_in_min_speech_ms, barge_in_level_db=v.barge_in_level_db)


def canceller(cancel: bool, lead_ms: int | None = None) -> EchoCanceller:
    """A session's canceller, on the gateway's settings (SOTTO_GATEWAY_ECHO_*)."""
    gw = config.load(config.GatewayConfig)
    echo = EchoCanceller(EchoSettings(lead_s=(gw.echo_lead_ms if lead_ms is None else lead_ms) / 1000,
                                      gap_s=gw.jitter_ms / 1000))
    echo.configure(enabled=cancel, rate=RATE)
    return echo


def replay(mic: np.ndarray, answer: np.ndarray, *, cancel: bool, timing: Timing, vad: SileroVad,
           settings: VadSettings | None = None, lead_ms: int | None = None, report_every_s: float | None = None,
           echo: EchoCanceller | None = None, start_s: float = 0.0, seed: int = 0,
           heard: list | None = None) -> list[float]:
    """The session's view of `mic` while `answer` goes out: the canceller (on or off) then the vad, with the
    barge-in gate held while the answer plays; with `report_every_s` the client reports its playback that often
    (as a /ws client's `playback`). `echo`: the session's canceller, as an earlier answer left it (default: a
    new one), and `start_s` where this microphone audio begins on its clock (after the audio it has had). Returns
    the times (s, from the start of `mic`) of the vad's speech starts. `heard`, if given, gets each piece of
    cleaned audio and the vad's events on it, in order: (piece, [SpeechEvent])."""
    rng = np.random.default_rng(seed)
    echo = echo or canceller(cancel, lead_ms)
    echo.on_sent(events.AudioStarted(turn_id="t", sample_rate=ANSWER_RATE), start_s)
    chunk_s = CHUNK / ANSWER_RATE / timing.synthesis_speed
    ends_at = timing.first_chunk_s + timing.client_delay_s + len(answer) / ANSWER_RATE + 0.5  # playback.py's margin
    stream = vad.open_stream(RATE, settings or vad_settings())
    stream.set_answer_playing(True)
    played_from = timing.first_chunk_s + timing.client_delay_s
    playing, sent, fed, starts, reported = True, 0, 0, [], 0.0
    frame = int(FRAME_S * RATE)
    for i in range(0, len(mic) - frame + 1, frame):
        now = (i + frame) / RATE + timing.network_s * (1 + rng.random())  # from the start of `mic`
        while sent < len(answer) and timing.first_chunk_s + sent / CHUNK * chunk_s <= now:
            echo.on_sent(events.AudioChunk(turn_id="t", sequence=0, sample_offset=sent,
                                           pcm16=answer[sent: sent + CHUNK].tobytes()),
                         start_s + timing.first_chunk_s + sent / CHUNK * chunk_s)
            sent += CHUNK
        while report_every_s and reported + report_every_s + timing.network_s <= now:
            reported += report_every_s  # the client's report, made then, arrives a network trip later
            played = int(np.clip((reported - played_from) * ANSWER_RATE, 0, min(sent, len(answer))))
            echo.playback("t", played, ANSWER_RATE, start_s + reported + timing.network_s)
        if playing and now > ends_at:
            playing = False
            stream.set_answer_playing(False)
        piece = echo.prepare(mic[i: i + frame].tobytes(), start_s + now)
        clean = np.frombuffer(echo.process(*piece), dtype="<i2")
        found = list(stream.push(clean))
        if heard is not None:
            heard.append((clean, found))
        for ev in found:
            if ev.kind == SpeechEventKind.STARTED:
                starts.append((fed + len(clean)) / RATE)  # when the vad decided: the end of this piece
        fed += len(clean)
    return starts


def onset_s(clip: np.ndarray) -> float:
    """Where a clip's speech begins: its first 20 ms frame within 20 dB of its active level."""
    frame = RATE // 50
    frames = clip[: len(clip) // frame * frame].astype(np.float64).reshape(-1, frame) / 32768
    level = 10 * np.log10((frames ** 2).mean(axis=1) + 1e-12)
    return float(np.argmax(level > active_dbfs(clip) - 20) * frame / RATE)


def self_interruptions(answers: list[np.ndarray], levels: list[float], room: Room, timing: Timing, vad: SileroVad,
                       person_dbfs: float) -> dict:
    """Per echo level (dB relative to the person) and canceller setting: answers that interrupted themselves."""
    out: dict = {}
    for level in levels:
        row = {}
        for cancel in (False, True):
            runs = [replay(microphone(a, room, timing, person_dbfs + level, seed=i), a, cancel=cancel, timing=timing,
                           vad=vad, seed=i) for i, a in enumerate(answers)]
            row["on" if cancel else "off"] = {"answers": len(runs), "self_interruptions": sum(bool(r) for r in runs)}
        out[f"{level:g}"] = row
        print(f"  echo {level:+.0f} dB: self-interruptions without the canceller "
              f"{row['off']['self_interruptions']}/{len(answers)}, with it {row['on']['self_interruptions']}/"
              f"{len(answers)}", flush=True)
    return out


def cut_ins(answers: list[np.ndarray], people: list[np.ndarray], level: float, room: Room, timing: Timing,
            vad: SileroVad, person_dbfs: float, miss_s: float = 2.0) -> dict:
    """A person speaks over each answer 1 s into its playback: from their first word to the vad's speech start,
    with the echo and the canceller off or on, and (the vad's own time) with no echo at all."""
    out: dict = {}
    for name, cancel, echo_db in (("off", False, level), ("on", True, level), ("no_echo", False, None)):
        delays, first, missed = [], 0, 0
        for i, person in enumerate(people):
            answer = answers[i % len(answers)]
            at = timing.first_chunk_s + timing.client_delay_s + 1.0
            mic = microphone(answer, room, timing, None if echo_db is None else person_dbfs + echo_db, person, at,
                             person_dbfs, seed=i)
            spoke = at + onset_s(person)
            starts = replay(mic, answer, cancel=cancel, timing=timing, vad=vad, seed=i)
            if starts and starts[0] < spoke:
                first += 1  # the echo interrupted the answer before the person spoke
            elif starts and starts[0] - spoke <= miss_s:
                delays.append(round((starts[0] - spoke) * 1000))
            else:
                missed += 1
        d = np.array(delays)
        out[name] = {"cut_ins": len(people), "heard": len(d), "missed": missed, "interrupted_itself_first": first,
                     "p50_ms": round(float(np.percentile(d, 50))) if len(d) else None,
                     "p95_ms": round(float(np.percentile(d, 95))) if len(d) else None, "delays_ms": delays}
        print(f"  cut-ins, {name}: {out[name]}", flush=True)
    return out


def cost_ms_per_audio_s(answer: np.ndarray, room: Room, timing: Timing) -> float:
    """The canceller's own time (prepare and process, the native calls included) per second of microphone audio
    while an answer plays, in 20 ms pieces: what one session costs the gateway's worker threads."""
    mic = microphone(answer, room, timing, -32.0)
    echo = canceller(True)
    echo.on_sent(events.AudioStarted(turn_id="t", sample_rate=ANSWER_RATE), 0.0)
    echo.on_sent(events.AudioChunk(turn_id="t", sequence=0, sample_offset=0, pcm16=answer.tobytes()),
                 timing.first_chunk_s)
    frame, spent, cancelled = int(FRAME_S * RATE), 0.0, 0
    for i in range(0, len(mic) - frame + 1, frame):
        t = time.perf_counter()
        mic_part, ref = echo.prepare(mic[i: i + frame].tobytes(), (i + frame) / RATE)
        echo.process(mic_part, ref)
        if ref is not None:
            spent, cancelled = spent + time.perf_counter() - t, cancelled + frame
    return round(spent * 1000 / (cancelled / RATE), 2)


def main() -> None:
    parser = argparse.ArgumentParser(description="The server's echo canceller in a simulated room.")
    parser.add_argument("--answers", type=int, default=20, help="answers per echo level and setting")
    parser.add_argument("--cut-ins", type=int, default=20, help="people speaking over an answer, per setting")
    parser.add_argument("--levels", type=lambda t: [float(x) for x in t.split(",")],
                        default=[-30.0, -20.0, -12.0, -6.0, 0.0], help="echo levels in dB relative to the person")
    parser.add_argument("--cut-in-level", type=float, default=-12.0, help="echo level during the cut-ins, in dB")
    parser.add_argument("--person-dbfs", type=float, default=-26.0, help="the person's speech level at the mic")
    parser.add_argument("--out", type=Path, default=Path("bench/results/eval_echo_room.json"))
    args = parser.parse_args()
    if args.answers < 1 or args.cut_ins < 0 or not args.levels:
        parser.error("--answers must be at least 1, --cut-ins at least 0, --levels not empty")
    room, timing, vad = Room(), Timing(), SileroVad()
    # Piper's voice varies from one synthesis to the next (its noise): each answer is its own rendition.
    answers = synthesise(tuple(ANSWERS[i % len(ANSWERS)] for i in range(args.answers)))
    people = cut_in_people(args.cut_ins)
    report = {"machine": platform.machine(), "room": room.__dict__, "timing": timing.__dict__,
              "rt60_s": round(float(pra.experimental.measure_rt60(room.impulse(room.speaker), RATE)), 2),
              "person_dbfs": args.person_dbfs, "vad": vad_settings().__dict__,
              "echo_lead_ms": config.load(config.GatewayConfig).echo_lead_ms,
              "answers": f"{len(answers)} Piper en_US-joe-medium answers ({min(len(answers), len(ANSWERS))} texts), "
                         f"{sum(len(a) for a in answers) / ANSWER_RATE:.0f} s in all",
              "people": f"{len(people)} Asterisk prompts (Allison Smith, human speech)",
              "cost_ms_per_audio_s": cost_ms_per_audio_s(answers[0], room, timing),
              "self_interruptions": self_interruptions(answers, args.levels, room, timing, vad, args.person_dbfs),
              "cut_in_echo_db": args.cut_in_level,
              "cut_ins": cut_ins(answers, people, args.cut_in_level, room, timing, vad, args.person_dbfs)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
