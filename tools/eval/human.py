"""`python -m tools.eval.human` (part of `make eval`): hearing and end of turn on human speech.

The clips are real recordings fetched by Debian package name (tools.eval.human_speech; licences there):

- wer: each Whisper model (the configured one, or `--asr-model` folders) transcribes every clip of two words or
  more in process, with the asr service's own settings (threads, beam, language). The word error rate is scored
  after one normaliser (tools.eval.corpus.normalise): lower case, digits spelled out as words ("7" -> "seven"),
  hyphens as spaces, punctuation other than apostrophes dropped; the Asterisk transcripts' "#" and "*" are
  spelled "pound" and "star" as the speaker says them. Also each clip's recognition time (p50/p95).
- turns: the vad's own engine (real Silero, real smart-turn model) hears each utterance in 20 ms chunks, with
  the turn model (the default) and with silence alone. Complete prompts: the endpoint delay from the end of
  speech to the decision (the audio that had to arrive plus the model's own time), p50/p95. Prompts that trail
  off ("To leave the conference...", "press 1 for"): false cut-offs, the share the turn ended on before a
  speaker pausing 0.6, 0.9 or 1.2 s would have gone on.
- ttfa: complete prompts spoken in real time as the turns of one conversation through the real stack at the
  product's defaults (`make up` offline: Piper speaks, all cores), once per LLM (`--llm-model`) with the first
  Whisper model and once per further Whisper model with the first LLM: time to first audio and its stages.
Results: bench/results/human-<time>.json; docs/performance.md summarises them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from services.asr.engine import EngineSettings, WhisperEngine
from services.asr.loading import model_folder
from services.common import config
from services.vad.engine import EndReason, VadSettings
from tools.bench.stats import commit, machine, summary
from tools.stack import model_dir
from tools.eval import human_speech
from tools.eval.answers import default_models
from tools.eval.cascade import run_turns
from tools.eval.corpus import wer
from tools.eval.turns import endpoint, load_turn_engines

LEAD_S, TAIL_S = 0.4, 2.5     # quiet before the clip; after it, longer than the longest held silence
PAUSES_S = (0.6, 0.9, 1.2)    # how long a speaker who trailed off might pause before going on
SPEECH_FLOOR_DB = -35.0       # a 10 ms frame this far below the clip's loudest one is not speech


@dataclass
class Utterance:
    """What tools.eval.turns.endpoint reads: the audio and where its speech ends."""
    audio: np.ndarray
    speech_end: int


def speech_end(audio: np.ndarray) -> int:
    """The sample after the last 10 ms frame within SPEECH_FLOOR_DB of the loudest (the recording's own tail of
    room tone is not speech)."""
    frame = human_speech.SAMPLE_RATE // 100
    frames = audio[: len(audio) // frame * frame].astype(np.float64).reshape(-1, frame)
    rms = np.sqrt((frames ** 2).mean(axis=1)) + 1e-9
    loud = np.flatnonzero(20 * np.log10(rms / rms.max()) > SPEECH_FLOOR_DB)
    return int((loud[-1] + 1) * frame) if len(loud) else len(audio)


def hearing(clips: list[human_speech.Clip], folder: Path) -> dict:
    cfg = config.load(config.AsrConfig)
    settings = EngineSettings(threads=cfg.threads or os.cpu_count() or 1, beam_size=cfg.beam_size,
                              language=cfg.language, max_audio_s=cfg.max_audio_s)
    engine = WhisperEngine(folder, settings)
    engine.warm_up()
    rows = []
    for clip in clips:
        began = time.perf_counter()
        heard = engine.transcribe(clip.as_float()).text
        rows.append({"id": clip.id, "text": clip.transcript, "heard": heard, "audio_s": round(clip.seconds, 2),
                     "ms": round((time.perf_counter() - began) * 1000, 1)})
        if len(rows) % 50 == 0:
            print(f"  {len(rows)}/{len(clips)} clips", flush=True)
    by_source = {}
    for source in human_speech.SOURCES:
        mine = [r for r in rows if r["id"].startswith(source.name + "/")]
        if mine:
            by_source[source.name] = {"clips": len(mine), "wer": wer([r["text"] for r in mine],
                                                                      [r["heard"] for r in mine])}
    audio_s = sum(r["audio_s"] for r in rows)
    return {"model": str(folder), "threads": settings.threads, "beam_size": settings.beam_size,
            "clips": len(rows), "audio_min": round(audio_s / 60, 1),
            "wer": wer([r["text"] for r in rows], [r["heard"] for r in rows]), "by_source": by_source,
            "recognition_ms": summary(r["ms"] for r in rows),
            "real_time_factor": round(sum(r["ms"] for r in rows) / 1000 / audio_s, 3), "rows": rows}


def turn_taking(clips: list[human_speech.Clip]) -> dict:
    defaults, vad, turn_model = load_turn_engines()
    rate = human_speech.SAMPLE_RATE
    lead, tail = np.zeros(int(LEAD_S * rate), np.int16), np.zeros(int(TAIL_S * rate), np.int16)
    items = [(clip, Utterance(np.concatenate([lead, clip.audio, tail]), len(lead) + speech_end(clip.audio)))
             for clip in clips]
    report: dict = {"settings": dict(defaults.__dict__), "complete": sum(c.label == "complete" for c in clips),
                    "incomplete": sum(c.label == "incomplete" for c in clips), "modes": {}}
    for mode, semantic in (("semantic", True), ("silence_only", False)):
        settings = VadSettings(**{**defaults.__dict__, "semantic": semantic})
        rows = [{"id": clip.id, "label": clip.label, **endpoint(vad, turn_model, settings, utterance)}
                for clip, utterance in items]
        complete = [r for r in rows if r["label"] == "complete"]
        incomplete = [r for r in rows if r["label"] == "incomplete"]
        report["modes"][mode] = {
            "complete_delay_ms": summary(r["latency_ms"] for r in complete),
            "complete_never_ended": sum(r["ended_at"] is None for r in complete),
            "complete_held_to_timeout": sum(r["reason"] == EndReason.TIMEOUT.value for r in complete),
            "false_cutoffs": {f"{pause:.1f}s": {
                "cut": sum(1 for r in incomplete if r["latency_ms"] is not None and r["latency_ms"] <= pause * 1000),
                "of": len(incomplete)} for pause in PAUSES_S},
            "rows": rows,
        }
    return report


@dataclass
class Spoken:
    """What tools.eval.cascade.run_turns reads of a clip."""
    speech: np.ndarray


def spoken_turns(clips: list[human_speech.Clip], llm: Path, asr: Path, count: int, env: dict[str, str]) -> dict:
    """`count` complete one-sentence prompts of four to twelve words, evenly spread over the set, as one
    conversation (a prompt of two sentences is two turns to the endpointer, as it would be from a person)."""
    fit = [c for c in clips if c.label == "complete" and 4 <= len(c.transcript.split()) <= 12
           and not re.search(r"[.?!]\s", c.transcript.strip().lstrip("."))]
    chosen = fit[:: max(1, len(fit) // count)][:count]
    run = run_turns([Spoken(c.audio) for c in chosen], SOTTO_LLM_MODEL=str(llm), SOTTO_ASR_MODEL=str(asr),
                    SOTTO_LLM_THREADS="0", **env)
    return {"llm": llm.name, "asr": str(asr), "not_default": env, "said": [c.transcript for c in chosen], **run}


def asr_models(explicit: list[Path] | None) -> list[Path]:
    """The folder the asr service would load offline, then the built candidates (`make eval-candidates`)."""
    if explicit:
        return explicit
    folder, _ = model_folder(config.load(config.AsrConfig, {**os.environ, "SOTTO_OFFLINE": "true"}),
                             config.load(config.CommonConfig, {**os.environ, "SOTTO_OFFLINE": "true"}))
    return [folder, *sorted(p.parent for p in (model_dir() / "candidates").glob("asr-*/model.bin"))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="wer,turns,ttfa", help="comma-separated, of wer, turns, ttfa")
    parser.add_argument("--asr-model", type=Path, action="append",
                        help="a faster-whisper model folder (repeatable; default: the one the asr service loads "
                             "offline, then the built candidates)")
    parser.add_argument("--llm-model", type=Path, action="append",
                        help="a .litertlm for the ttfa part (repeatable; default: the offline SmolLM2, then the "
                             "built candidates)")
    parser.add_argument("--max-clips", type=int, default=0, help="WER on at most this many clips (0: all)")
    parser.add_argument("--turns", type=int, default=10, help="spoken turns per stack run (ttfa)")
    parser.add_argument("--env", action="append", default=[], metavar="SOTTO_X=V",
                        help="a setting away from the defaults for the ttfa stacks (repeatable; reported with them)")
    parser.add_argument("--cache", type=Path, default=human_speech.DEFAULT_CACHE)
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    if set(parts) - {"wer", "turns", "ttfa"}:
        parser.error(f"unknown parts {sorted(set(parts) - {'wer', 'turns', 'ttfa'})}; choose from wer, turns, ttfa")
    clips = human_speech.clips(args.cache)
    results: dict = {"machine": machine(), "commit": commit(),
                     "sources": [s.__dict__ for s in human_speech.SOURCES], "wer": []}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"human-{time.strftime('%Y%m%d-%H%M%S')}.json"
    if "wer" in parts:
        # Longer prompts (menus up to 73 s) are over what the asr service accepts in one utterance.
        limit = config.load(config.AsrConfig).max_audio_s
        spoken = [c for c in clips if len(c.transcript.split()) >= 2 and c.seconds <= limit]
        if args.max_clips and len(spoken) > args.max_clips:  # every read sentence, the prompts evenly spread
            read = [c for c in spoken if not c.id.startswith("asterisk/")]
            prompts, room = [c for c in spoken if c.id.startswith("asterisk/")], max(0, args.max_clips - len(read))
            spoken = read + [prompts[i * len(prompts) // room] for i in range(min(room, len(prompts)))]
        for folder in asr_models(args.asr_model):
            print(f"wer: {folder} on {len(spoken)} human clips", flush=True)
            results["wer"].append(hearing(spoken, folder))
            path.write_text(json.dumps(results, indent=1))
    if "turns" in parts:
        utterances = [c for c in clips if c.label == "incomplete" or len(c.transcript.split()) >= 3]
        print(f"turns: {len(utterances)} human utterances, with the turn model and with silence alone", flush=True)
        results["turns"] = turn_taking(utterances)
        path.write_text(json.dumps(results, indent=1))
    if "ttfa" in parts:
        llms, asrs = args.llm_model or default_models(), asr_models(args.asr_model)
        results["ttfa"] = []
        for llm, asr in [(m, asrs[0]) for m in llms] + [(llms[0], a) for a in asrs[1:]]:
            print(f"ttfa: {llm.name} hearing through {asr}", flush=True)
            env = dict(item.split("=", 1) for item in args.env)
            results["ttfa"].append(spoken_turns(clips, llm, asr, args.turns, env))
            path.write_text(json.dumps(results, indent=1))
    print_summary(results)
    print(f"saved {path}")


def print_summary(results: dict) -> None:
    for run in results["wer"]:
        sources = ", ".join(f"{k} {v['wer']:.3f} ({v['clips']})" for k, v in run["by_source"].items())
        print(f"wer {Path(run['model']).name}: {run['wer']:.3f} on {run['clips']} clips ({sources}); recognition "
              f"p50/p95 {run['recognition_ms']['p50']}/{run['recognition_ms']['p95']} ms, RTF "
              f"{run['real_time_factor']}")
    if turns := results.get("turns"):
        for mode, s in turns["modes"].items():
            cuts = ", ".join(f"{k} {v['cut']}/{v['of']}" for k, v in s["false_cutoffs"].items())
            print(f"turns {mode}: complete delay p50/p95 {s['complete_delay_ms']['p50']}/"
                  f"{s['complete_delay_ms']['p95']} ms (held to the long silence {s['complete_held_to_timeout']}/"
                  f"{turns['complete']}); false cut-offs of trailing prompts within {cuts}")
    for run in results.get("ttfa", []):
        stages = ", ".join(f"{k[:-3]} {v['p50']}/{v['p95']}" for k, v in run["stages"].items() if v["n"])
        print(f"ttfa {run['llm']} + {Path(run['asr']).name} {run['not_default'] or 'at the defaults'}: "
              f"{run['answered']}/{run['turns']} answered; "
              f"p50/p95 ms: {stages}")


if __name__ == "__main__":
    main()
