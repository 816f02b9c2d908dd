"""End of turn on human speech: the audio turn model alone against the audio model with the words
(services.gateway.conversation.word_turn), the joining of an utterance resumed before its answer was heard
(services.gateway.conversation.utterance_join) and a held turn ended early on complete words
(services.gateway.conversation.early_end).

    python -m tools.eval.word_turns [--out bench/results/eval_word_turns.json] [--answer-latency-ms 1000]

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
  stated assumption, not a measurement, so this figure is labelled with it);
- *with the early end* (and *the join*): as the words (and the join) rows, and where the vad holds a pause (HELD)
  and Whisper's words so far are a complete sentence, the turn ends once those words are had. The asr service
  starts a background run when the speaker pauses (services/asr/streaming.py: PAUSE_S of audio quieter than
  QUIET_RATIO of the utterance), and answers the gateway's request from it: here that run is made on the audio up
  to where it would start (at the latest the held decision, where the request itself would start one), assuming the
  recogniser idle then, and its own time is measured; the turn ends at the later of the held decision (plus the
  turn model's time) and that run's end. Speech that resumes before then is not cut (the vad ends only a turn it
  still holds); speech that resumes after it is a cut, unless (join row) it resumes before the answer's first
  audio; a trailing-off clip ended this way is a cut.

**Endpoint** of a complete clip: from the end of its speech (the last 20 ms frame within 26 dB of its loudest) to
the turn's start: the vad's decision (silence waited plus the turn model's own time, measured here), or the hold
when the words wrongly say the clip is unfinished. The recogniser's own time is not in it (a text-only model waits
for the words either way), except where the early end waits for the words to decide.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

from services.asr.loading import load_engine
from services.asr.streaming import PAUSE_S, QUIET_RATIO
from services.common import config
from services.gateway.conversation.word_turn import WordVerdict, verdict
from services.vad.engine import SileroVad, SpeechEventKind, VadSettings
from services.vad.loading import default_settings, load_model
from services.vad.smart_turn import SmartTurn, default_model_path
from tools.eval.human_speech import INCOMPLETE, Clip, clips

RATE = 16000
CHUNK = RATE // 50
TAIL_S = 2.0


def speech_end(audio: np.ndarray) -> int:
    """The end of the last 20 ms frame within 26 dB (1/20) of the clip's loudest frame."""
    frames = audio[: len(audio) // CHUNK * CHUNK].astype(np.float32).reshape(-1, CHUNK)
    rms = np.sqrt((frames ** 2).mean(axis=1))
    loud = np.flatnonzero(rms > rms.max() / 20)
    return int(loud[-1] + 1) * CHUNK if len(loud) else len(audio)


def vad_run(vad: SileroVad, turn_model: SmartTurn, settings: VadSettings, audio: np.ndarray) -> list[dict]:
    """Every STARTED / ENDED / HELD event, with the sample at which it was decided and the model's time."""
    out = []
    with vad.open_stream(RATE, settings, turn_model=turn_model) as stream:
        for offset in range(0, len(audio), CHUNK):
            events, model_ms = stream.push(audio[offset: offset + CHUNK]), 0.0
            if stream.verdict_due:
                began = time.perf_counter()
                events += stream.decide()
                model_ms = (time.perf_counter() - began) * 1000
            for e in events:
                if e.kind in (SpeechEventKind.STARTED, SpeechEventKind.ENDED, SpeechEventKind.HELD):
                    out.append({"kind": e.kind.value, "start": e.start_sample, "end": e.end_sample,
                                "decided_at": offset + CHUNK, "model_ms": model_ms,
                                "reason": e.reason.value if e.reason else None})
    return out


def loud_frames(audio: np.ndarray) -> np.ndarray:
    """The 20 ms frames within 26 dB of the clip's loudest (as `speech_end`), by index."""
    frames = audio[: len(audio) // CHUNK * CHUNK].astype(np.float32).reshape(-1, CHUNK)
    rms = np.sqrt((frames ** 2).mean(axis=1))
    return np.flatnonzero(rms > rms.max() / 20)


def pause_run_at(audio: np.ndarray, pause_from: int, held_at: int) -> int:
    """Where the asr service's background run for the pause that began at `pause_from` starts: once PAUSE_S of
    audio is quieter than QUIET_RATIO of the utterance's RMS so far (services/asr/streaming.py), at the latest at
    the held decision (the gateway's request starts one there)."""
    energy = np.concatenate([[0.0], np.cumsum(audio.astype(np.float64) ** 2)])
    pause = int(PAUSE_S * RATE)
    for t in range(max(pause, pause_from + pause), held_at, CHUNK):
        if (energy[t] - energy[t - pause]) / pause < QUIET_RATIO ** 2 * energy[t] / t:
            return t
    return held_at


def early_end(clip: Clip, events: list[dict], timed_words, answer_ms: float) -> dict | None:
    """The first held pause whose words so far are a complete sentence, and what ending it there did: None when
    none ends early (see the module docstring)."""
    loud = loud_frames(clip.audio) * CHUNK
    audio = np.concatenate([clip.audio, np.zeros(int(TAIL_S * RATE), dtype=np.int16)])
    for held in (e for e in events if e["kind"] == "held"):
        spoken = loud[loud < held["decided_at"]]
        run_at = pause_run_at(audio, int(spoken[-1]) + CHUNK if len(spoken) else 0, held["decided_at"])
        text, asr_ms = timed_words(audio[:run_at])
        if verdict(text) is not WordVerdict.COMPLETE:
            continue
        ends_at = max(held["decided_at"] + round(held["model_ms"] * RATE / 1000),
                      run_at + round(asr_ms * RATE / 1000))
        resumed = loud[loud >= held["decided_at"]]
        if len(resumed) and resumed[0] < ends_at:
            continue  # the user went on before the words came: the vad no longer holds it
        out = {"at_s": round(held["decided_at"] / RATE, 2), "words": text, "asr_ms": round(asr_ms, 1),
               "run_before_held_ms": round((held["decided_at"] - run_at) * 1000 / RATE), "ends_at": ends_at,
               "resumed": bool(len(resumed))}
        if len(resumed):
            out["joined"] = bool(resumed[0] <= ends_at + answer_ms * RATE / 1000)
        return out
    return None


def judge(clip: Clip, events: list[dict], words_at, hold_ms: float, answer_ms: float, timed_words=None) -> dict:
    """One clip's outcome under the five rules (see the module docstring)."""
    end = speech_end(clip.audio)
    ends = [e for e in events if e["kind"] == "ended"]
    starts = [e for e in events if e["kind"] == "started"]
    early = [e for e in ends if e["decided_at"] < end and any(s["start"] >= e["end"] for s in starts)]
    final = next((e for e in ends if e["decided_at"] >= end), None)
    result = {"id": clip.id, "label": clip.label, "seconds": round(clip.seconds, 2), "early_ends": [],
              "final_reason": final["reason"] if final else None}
    cut = {"audio": bool(early), "words": False, "words_join": False}
    if final is not None:
        result["final_silence_ms"] = round((final["decided_at"] - end) * 1000 / RATE, 1)
        result["final_model_ms"] = round(final["model_ms"], 1)
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
    cut["early"], cut["early_join"] = cut["words"], cut["words_join"]
    if timed_words is not None and (ended := early_end(clip, events, timed_words, answer_ms)) is not None:
        result["early_end"] = ended
        if ended["resumed"]:  # cut at a pause: the rest is a second utterance
            cut["early"] = True
            cut["early_join"] |= not ended["joined"]
        elif clip.label == INCOMPLETE:
            cut["early"] = cut["early_join"] = True  # a trailing-off clip answered as complete
        elif "endpoint_ms" in result:
            result["endpoint_ms"]["early"] = round(min(result["endpoint_ms"]["words"],
                                                       (ended["ends_at"] - end) * 1000 / RATE), 1)
    if "endpoint_ms" in result:
        result["endpoint_ms"].setdefault("early", result["endpoint_ms"]["words"])
    result["cut"] = cut
    return result


RULES = (("audio", "audio", "audio model alone"), ("words", "words", "audio model + words"),
         ("words_join", "words", "audio model + words + join (answer latency {answer_ms:g} ms assumed)"),
         ("early", "early", "audio model + words + early end"),
         ("early_join", "early", "audio model + words + early end + join (answer latency {answer_ms:g} ms assumed)"))


def summarise(results: list[dict], answer_ms: float) -> dict:
    summary: dict = {"clips": len(results), "incomplete_clips": sum(r["label"] == INCOMPLETE for r in results)}
    for rule, endpoint, name in RULES:
        cuts = [r["id"] for r in results if r["cut"][rule]]
        summary[rule] = {"name": name.format(answer_ms=answer_ms), "cut": len(cuts),
                         "cut_complete": sum(r["label"] != INCOMPLETE for r in results if r["cut"][rule]),
                         "rate": round(len(cuts) / max(1, len(results)), 4), "cut_ids": cuts}
        lat = [r["endpoint_ms"][endpoint] for r in results if "endpoint_ms" in r]
        if lat:
            summary[rule]["endpoint_ms_complete"] = {"p50": round(float(np.percentile(lat, 50)), 1),
                                                     "p95": round(float(np.percentile(lat, 95)), 1), "n": len(lat)}
    return summary


def ends_breakdown(results: list[dict]) -> dict:
    """Where the audio model's endpoint goes on complete clips: held to the fallback, or judged complete (the
    silence waited past the speech's end, and the turn model's own time), with the early end's words time."""
    out: dict = {}
    for reason in sorted({r["final_reason"] for r in results if "endpoint_ms" in r}):
        got = [r for r in results if "endpoint_ms" in r and r["final_reason"] == reason]
        out[reason] = {"n": len(got), **{f"{key}_p50": round(float(np.median([r[key] for r in got])), 1)
                                         for key in ("final_silence_ms", "final_model_ms")},
                       "endpoint_p50": round(float(np.median([r["endpoint_ms"]["audio"] for r in got])), 1)}
    early = [r["early_end"]["asr_ms"] for r in results if "early_end" in r]
    out["early_end_words_ms_p50"] = round(float(np.median(early)), 1) if early else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description="End of turn on human speech: audio model alone vs with words.")
    parser.add_argument("--out", type=Path, default=Path("bench/results/eval_word_turns.json"))
    parser.add_argument("--answer-latency-ms", type=float, default=1000.0,
                        help="assumed end-of-turn-to-first-audio time for the join figure (default 1000)")
    parser.add_argument("--limit", type=int, default=0, help="evaluate only the first N clips (0: all)")
    parser.add_argument("--stride", type=int, default=1,
                        help="every Nth complete Asterisk prompt (the incomplete ones and the read speech always)")
    args = parser.parse_args()
    vad_cfg = config.exit_on_error(lambda: config.load(config.VadConfig))
    asr_cfg = config.exit_on_error(lambda: config.load(config.AsrConfig))
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    settings = config.exit_on_error(lambda: default_settings(vad_cfg))
    vad = load_model(vad_cfg.model)
    turn_model = SmartTurn(vad_cfg.turn_model or default_model_path(common.model_dir))
    turn_model.warm_up()
    engine, _ = load_engine(asr_cfg, common)

    def words_at(audio: np.ndarray) -> str:
        return engine.transcribe(audio.astype(np.float32) / 32768.0).text

    def timed_words(audio: np.ndarray) -> tuple[str, float]:
        began = time.perf_counter()
        return words_at(audio), (time.perf_counter() - began) * 1000

    got = [c for i, c in enumerate(clips()) if c.label == INCOMPLETE or not c.id.startswith("asterisk/")
           or i % args.stride == 0]
    if args.limit:
        got = got[: args.limit]
    tail = np.zeros(int(TAIL_S * RATE), dtype=np.int16)
    results = []
    for clip in got:
        events = vad_run(vad, turn_model, settings, np.concatenate([clip.audio, tail]))
        results.append(judge(clip, events, words_at, vad_cfg.max_turn_silence_ms, args.answer_latency_ms,
                             timed_words))
    summary = summarise(results, args.answer_latency_ms)
    summary["complete_clips_by_end"] = ends_breakdown(results)
    report = {"machine": platform.machine(), "stride": args.stride, "processor": platform.processor(),
              "vad_settings": settings.__dict__,
              "asr_model": str(engine.model_dir.name), "summary": summary, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1, default=str))
    for rule, _, _ in RULES:
        s = summary[rule]
        lat = s.get("endpoint_ms_complete", {})
        print(f"{s['name']}: cut {s['cut']}/{summary['clips']} ({s['rate']:.1%}, {s['cut_complete']} complete); "
              f"endpoint on complete clips p50 {lat.get('p50')} ms, p95 {lat.get('p95')} ms")
    print("complete clips by how the audio model ended them:", json.dumps(summary["complete_clips_by_end"]))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
