"""Semantic end of turn against silence alone, on a generated set of spoken turns (tools.eval.turn_set).

    python -m tools.eval.turns [--out bench/results/eval_turns.json]      (make eval-turns)

Each utterance is fed to the vad's own engine (real Silero, real smart-turn model) in 20 ms chunks as a microphone
would, once with the semantic end of turn and once with silence alone (SOTTO_VAD_MIN_SILENCE_MS), both at the
service's default settings. Figures:

- endpoint decision latency of complete turns: from the true end of speech to the end-of-turn decision (the audio
  that had to arrive, plus the turn model's own time measured here), p50 / p95;
- false cut-offs of unfinished turns: ended before their continuation began, per class;
- complete turns held open until the long silence (the cost of a wrong "incomplete").
"""

from __future__ import annotations

import argparse
import json
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from services.common import config
from services.vad.engine import EndReason, SileroVad, SpeechEventKind, VadSettings
from services.vad.loading import default_settings, load_model
from services.vad.smart_turn import SmartTurn, default_model_path
from tools.eval.turn_set import RATE, Item, build

CHUNK = RATE // 50  # 20 ms, a typical microphone frame
UNFINISHED = ("filler", "trailing", "mid_pause")


def endpoint(vad: SileroVad, turn_model: SmartTurn, settings: VadSettings, item: Item) -> dict:
    """The first end of turn in ``item``: where (sample) and when (ms after the true end of speech), and why."""
    with vad.open_stream(RATE, settings, turn_model=turn_model) as stream:
        holds = 0
        for offset in range(0, len(item.audio), CHUNK):
            events, model_ms = stream.push(item.audio[offset : offset + CHUNK]), 0.0
            if stream.verdict_due:
                began = time.perf_counter()
                events += stream.decide()
                model_ms = (time.perf_counter() - began) * 1000
            holds += sum(e.kind is SpeechEventKind.HELD for e in events)
            for event in events:
                if event.kind is SpeechEventKind.ENDED:
                    at = offset + CHUNK
                    return {"ended_at": at, "latency_ms": round((at - item.speech_end) * 1000 / RATE + model_ms, 1),
                            "reason": event.reason.value if event.reason else None, "holds": holds,
                            "turn_probability": event.turn_probability}
    return {"ended_at": None, "latency_ms": None, "reason": None, "holds": holds, "turn_probability": None}


def summarise(items: list[Item], results: list[dict]) -> dict:
    by_item = list(zip(items, results))
    complete = [r for i, r in by_item if i.kind == "complete" and r["ended_at"] is not None]
    latencies = np.array([r["latency_ms"] for r in complete])
    summary = {
        "complete_turns": len([i for i in items if i.kind == "complete"]),
        "complete_latency_ms": {"p50": round(float(np.percentile(latencies, 50)), 1),
                                "p95": round(float(np.percentile(latencies, 95)), 1)} if len(latencies) else None,
        "complete_held_to_timeout": sum(r["reason"] == EndReason.TIMEOUT.value for r in complete),
        "false_cutoffs": {},
    }
    for kind in UNFINISHED:
        cases = [(i, r) for i, r in by_item if i.kind == kind]
        cut = [i.name for i, r in cases if r["ended_at"] is not None and r["ended_at"] <= i.continuation]
        summary["false_cutoffs"][kind] = {"cut": len(cut), "of": len(cases), "rate": round(len(cut) / len(cases), 3),
                                          "items": cut}
    return summary


def load_turn_engines() -> tuple[VadSettings, SileroVad, SmartTurn]:
    """The vad's default settings, Silero and the warmed end-of-turn model, as the vad service loads them."""
    cfg = config.exit_on_error(lambda: config.load(config.VadConfig))
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    defaults = config.exit_on_error(lambda: default_settings(cfg))
    turn_model = SmartTurn(cfg.turn_model or default_model_path(common.model_dir))
    turn_model.warm_up()
    return defaults, load_model(cfg.model), turn_model


def main() -> None:
    parser = argparse.ArgumentParser(description="Evaluate the semantic end of turn against silence alone.")
    parser.add_argument("--out", type=Path, default=Path("bench/results/eval_turns.json"))
    args = parser.parse_args()
    defaults, vad, turn_model = load_turn_engines()
    with tempfile.TemporaryDirectory() as workdir:
        items = build(Path(workdir))
    modes = {"semantic": VadSettings(**{**defaults.__dict__, "semantic": True}),
             "silence_only": VadSettings(**{**defaults.__dict__, "semantic": False})}
    report: dict = {"machine": platform.machine(), "settings": {k: v for k, v in defaults.__dict__.items()},
                    "items": [{"name": i.name, "kind": i.kind, "voice": i.voice, "speed_wpm": i.speed,
                               "noise": i.noisy} for i in items], "modes": {}}
    for mode, settings in modes.items():
        results = [endpoint(vad, turn_model, settings, item) for item in items]
        report["modes"][mode] = {"summary": summarise(items, results), "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    for mode in modes:
        s = report["modes"][mode]["summary"]
        lat = s["complete_latency_ms"] or {}
        cuts = ", ".join(f"{k} {v['cut']}/{v['of']}" for k, v in s["false_cutoffs"].items())
        print(f"{mode:>12}: complete turns p50 {lat.get('p50')} ms, p95 {lat.get('p95')} ms "
              f"(held to the long silence: {s['complete_held_to_timeout']}/{s['complete_turns']}); "
              f"false cut-offs: {cuts}")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
