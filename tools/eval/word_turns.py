"""End of turn on human speech: the audio turn model alone against the audio model with the words
(services.gateway.conversation.word_turn) and the joining of an utterance resumed before its answer was heard
(services.gateway.conversation.utterance_join).

    python -m tools.eval.word_turns [--out bench/results/eval_word_turns.json] [--answer-latency-ms 1000]
                                    [--stride 4] [--before-turn-silence-ms 200] [--stopped-midway 40]

`--stopped-midway N` adds a held-out check (tools/eval/truncated_speech.py): N complete prompts the stride skips, cut
after their middle word, summarised apart.

Every clip of tools.eval.human_speech (Asterisk prompts, some of which trail off, and LibriVox read speech with
mid-sentence pauses) is streamed, with 2 s of silence after it, through the vad's own engine (real Silero, real
smart-turn, the service's default settings) in 20 ms chunks as a microphone would. Whisper (the asr service's engine
and settings) gives the words an end-of-turn decision would see: the audio up to that end.

A clip is **cut where the user would notice** when:
- *audio alone*: the vad ends a turn before the clip's speech is over (the rest becomes a second turn, the first
  part gets an answer), or it ends a trailing-off clip as complete instead of holding it;
- *with the words*: as above, except where the words stop where no sentence ends and the speech resumes within
  the hold (SOTTO_VAD_MAX_TURN_SILENCE_MS after the speech ended); a trailing-off clip held by the words or by the
  audio model is not cut;
- *with the words and the join*: as above, except where the speech resumes before the answer's first audio would
  have gone out (the end-of-turn decision plus `--answer-latency-ms`, which stands for the time to first audio: a
  stated assumption, not a measurement, so this figure is labelled with it).

**Endpoint** of a complete clip: from the end of its speech (the last 20 ms frame within 26 dB of its loudest) to
the turn's start: the vad's decision (silence waited plus the turn model's own time, measured here), or the hold
when the words wrongly say the clip is unfinished. The recogniser's own time is not in it: a text-only model waits
for the words either way.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from services.asr.loading import load_engine
from services.common import config
from services.gateway.conversation.word_turn import WordVerdict, verdict
from services.vad.engine import SileroVad, SpeechEventKind, VadSettings
from services.vad.loading import default_settings, load_model
from services.vad.smart_turn import SmartTurn, default_model_path
from tools.eval.human_speech import INCOMPLETE, Clip, clips
from tools.eval.truncated_speech import held_out, stopped_midway

RATE = 16000
CHUNK = RATE // 50
TAIL_S = 2.0


def speech_end(audio: np.ndarray) -> int:
    """The end of the last 20 ms frame within 26 dB (1/20) of the clip's loudest frame."""
    frames = audio[: len(audio) // CHUNK * CHUNK].astype(np.float32).reshape(-1, CHUNK)
    rms = np.sqrt((frames ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > rms.max() / 20)
    return int(loud[-1] + 1) * CHUNK if len(loud) else len(audio)


def vad_run(vad: SileroVad, turn_model: SmartTurn, settings: VadSettings, audio: np.ndarray,
            guess: bool = True) -> list[dict]:
    """Every STARTED / ENDED / HELD event, with the sample at which it was decided and the model's time.

    ``guess``: as the service does, the turn model judges each pause from its first silent window while the audio
    goes on; here it runs at once and its answer is handed back when it would have been ready in real time (the
    pause's position plus the model's measured time), or when the verdict waits for it, which is then decided that
    much later. Without: ``decide()`` at the turn silence, the model's time added (the service before guesses)."""
    out = []
    pending = None  # (guess, probability, model ms, sample position at which it is ready)
    with vad.open_stream(RATE, settings, turn_model=turn_model) as stream:
        for offset in range(0, len(audio), CHUNK):
            now = offset + CHUNK
            events, model_ms, decided_at = stream.push(audio[offset: offset + CHUNK]), 0.0, float(now)
            if pending is not None and (pending[3] <= now or stream.awaiting_guess):
                decided_at = max(decided_at, pending[3])
                events += stream.settle(*pending[:3])
                pending = None
            if guess and stream.guess_due:
                taken = stream.take_guess()
                began = time.perf_counter()
                probability = stream.judge(taken)
                ms = (time.perf_counter() - began) * 1000
                pending = (taken, probability, ms, now + ms * RATE / 1000)
            if stream.verdict_due:
                began = time.perf_counter()
                events += stream.decide()
                model_ms = (time.perf_counter() - began) * 1000
            for e in events:
                if e.kind in (SpeechEventKind.STARTED, SpeechEventKind.ENDED, SpeechEventKind.HELD):
                    out.append({"kind": e.kind.value, "start": e.start_sample, "end": e.end_sample,
                                "decided_at": decided_at, "model_ms": model_ms,
                                "reason": e.reason.value if e.reason else None})
    return out


def judge(clip: Clip, events: list[dict], words_at, hold_ms: float, answer_ms: float) -> dict:
    """One clip's outcome under the three rules (see the module docstring)."""
    end = speech_end(clip.audio)
    ends = [e for e in events if e["kind"] == "ended"]
    starts = [e for e in events if e["kind"] == "started"]
    early = [e for e in ends if e["decided_at"] < end and any(s["start"] >= e["end"] for s in starts)]
    final = next((e for e in ends if e["decided_at"] >= end), None)
    result = {"id": clip.id, "label": clip.label, "seconds": round(clip.seconds, 2), "early_ends": [],
              "final_reason": final["reason"] if final else None}
    cut = {"audio": bool(early), "words": False, "words_join": False}
    for e in early:
        resume = min(s["start"] for s in starts if s["start"] >= e["end"])
        pause_ms = (resume - e["end"]) * 1000 / RATE
        silence_ms = (e["decided_at"] - e["end"]) * 1000 / RATE  # waited before the decision
        text = words_at(clip.audio[: e["end"]])
        held = verdict(text) is WordVerdict.INCOMPLETE and pause_ms <= hold_ms
        joined = held or pause_ms <= silence_ms + e["model_ms"] + answer_ms
        cut["words"] |= not held
        cut["words_join"] |= not joined
        result["early_ends"].append({"at_s": round(e["end"] / RATE, 2), "pause_ms": round(pause_ms), "words": text,
                                     "held_by_words": held, "joined": joined})
    whole = words_at(clip.audio)
    result["words"] = whole
    words_hold = verdict(whole) is WordVerdict.INCOMPLETE
    if clip.label == INCOMPLETE:
        ended_complete = final is not None and final["reason"] == "complete"
        cut["audio"] |= ended_complete
        cut["words"] |= ended_complete and not words_hold
        cut["words_join"] |= ended_complete and not words_hold
    elif final is not None:
        latency = (final["decided_at"] - end) * 1000 / RATE + final["model_ms"]
        result["endpoint_ms"] = {"audio": round(latency, 1),
                                 "words": round(max(latency, hold_ms) if words_hold else latency, 1)}
    result["cut"] = cut
    return result


def summarise(results: list[dict], answer_ms: float) -> dict:
    summary: dict = {"clips": len(results), "incomplete_clips": sum(r["label"] == INCOMPLETE for r in results)}
    for rule, name in (("audio", "audio model alone"), ("words", "audio model + words"),
                       ("words_join", f"audio model + words + join (answer latency {answer_ms:g} ms assumed)")):
        cuts = [r["id"] for r in results if r["cut"][rule]]
        trailing = [r["id"] for r in results if r["cut"][rule] and r["label"] == INCOMPLETE]
        summary[rule] = {"name": name, "cut": len(cuts), "rate": round(len(cuts) / max(1, len(results)), 4),
                         "cut_complete": len(cuts) - len(trailing), "cut_trailing_off": len(trailing),
                         "cut_ids": cuts}
        lat = [r["endpoint_ms"][rule if rule == "audio" else "words"] for r in results if "endpoint_ms" in r]
        if lat:
            summary[rule]["endpoint_ms_complete"] = {"p50": round(float(np.percentile(lat, 50)), 1),
                                                     "p95": round(float(np.percentile(lat, 95)), 1), "n": len(lat)}
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description="End of turn on human speech: audio model alone vs with words.")
    parser.add_argument("--out", type=Path, default=Path("bench/results/eval_word_turns.json"))
    parser.add_argument("--answer-latency-ms", type=float, default=1000.0,
                        help="assumed end-of-turn-to-first-audio time for the join figure (default 1000)")
    parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N clips (0: all)")
    parser.add_argument("--stride", type=int, default=1,
                        help="every Nth complete Asterisk prompt (the incomplete ones and the read speech always)")
    parser.add_argument("--stopped-midway", type=int, default=0,
                        help="also N complete prompts the stride skips, cut after their middle word "
                             "(tools/eval/truncated_speech.py: a held-out check), summarised apart (0: none)")
    parser.add_argument("--before-turn-silence-ms", type=int, default=0,
                        help="also run, on the same clips in the same run, the vad as it was before guesses: the "
                             "turn model asked at this turn silence, its time added (0: do not)")
    args = parser.parse_args()
    vad_cfg = config.exit_on_error(lambda: config.load(config.VadConfig))
    asr_cfg = config.exit_on_error(lambda: config.load(config.AsrConfig))
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    settings = config.exit_on_error(lambda: default_settings(vad_cfg))
    vad = load_model(vad_cfg.model)
    turn_model = SmartTurn(vad_cfg.turn_model or default_model_path(common.model_dir))
    turn_model.warm_up()
    engine, _ = load_engine(asr_cfg, common)
    heard: dict[tuple[str, int], str] = {}

    def words_of(clip: Clip):
        def words_at(audio: np.ndarray) -> str:
            key = (clip.id, len(audio))  # the same clip cut at the same sample: the same words
            if key not in heard:
                heard[key] = engine.transcribe(audio.astype(np.float32) / 32768.0).text
            return heard[key]
        return words_at

    every = clips()
    got = [c for i, c in enumerate(every) if c.label == INCOMPLETE or not c.id.startswith("asterisk/")
           or i % args.stride == 0]
    if args.limit:
        got = got[: args.limit]
    midway = stopped_midway(held_out(every, {c.id for c in got}), args.stopped_midway) if args.stopped_midway else []
    runs = {"defaults": (settings, True)}
    if args.before_turn_silence_ms:
        before = config.exit_on_error(lambda: default_settings(replace(vad_cfg,
                                                                       turn_silence_ms=args.before_turn_silence_ms)))
        runs[f"before (no guess, turn silence {args.before_turn_silence_ms} ms)"] = (before, False)
    tail = np.zeros(int(TAIL_S * RATE), dtype=np.int16)
    report = {"machine": platform.machine(), "stride": args.stride, "processor": platform.processor(),
              "asr_model": str(engine.model_dir.name), "runs": {}}
    for name, (run_settings, guess) in runs.items():
        def judged(chosen: list[Clip]) -> list[dict]:
            return [judge(clip, vad_run(vad, turn_model, run_settings, np.concatenate([clip.audio, tail]), guess),
                          words_of(clip), vad_cfg.max_turn_silence_ms, args.answer_latency_ms) for clip in chosen]

        results, held_results = judged(got), judged(midway)
        summary = summarise(results, args.answer_latency_ms)
        report["runs"][name] = {"vad_settings": run_settings.__dict__, "guess": guess, "summary": summary,
                                "results": results + held_results}
        if midway:
            held = summarise(held_results, args.answer_latency_ms)
            report["runs"][name]["stopped_midway"] = held
            print(f"  held out, {len(midway)} complete prompts stopped after their middle word: cut by the audio "
                  f"model alone {held['audio']['cut']}, with the words {held['words']['cut']}")
        print(f"{name}: turn silence {run_settings.turn_silence_ms} ms, guess {'on' if guess else 'off'}; "
              f"{summary['incomplete_clips']} of {summary['clips']} clips trail off")
        for rule in ("audio", "words", "words_join"):
            s = summary[rule]
            lat = s.get("endpoint_ms_complete", {})
            complete = summary["clips"] - summary["incomplete_clips"]
            print(f"  {s['name']}: cut {s['cut_complete']}/{complete} complete, {s['cut_trailing_off']}/"
                  f"{summary['incomplete_clips']} trailing off; endpoint on complete clips "
                  f"p50 {lat.get('p50')} ms, p95 {lat.get('p95')} ms (n {lat.get('n')})")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
