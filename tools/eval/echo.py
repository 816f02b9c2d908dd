"""Echo-safe barge-in in the real page: does the answer's own voice, fed back into the microphone, make Sotto
interrupt itself, and how soon does a real cut-in stop the answer?

    python -m tools.eval.echo [--answers 10] [--cut-ins 10] [--levels=-30,-20,-12] [--out bench/results/eval_echo.json]
    (make eval-echo)

The real stack (tools.stack: vad, llm on SmolLM2, tts on Piper's English voice, gateway) and the real page in
headless Chromium, whose microphone also hears the answer being played (tools.eval.echo_page), delayed 20-50 ms and
attenuated to `level` dB below the user's speech (active speech levels, measured). Three times: with the barge-in
gate at the service's settings (SOTTO_BARGE_IN_THRESHOLD, _MIN_SPEECH_MS and _LEVEL_DB), with its probability test
alone (SOTTO_BARGE_IN_LEVEL_DB=0), and without it (the gate set to the VAD's ordinary speech test,
SOTTO_VAD_THRESHOLD and SOTTO_VAD_MIN_SPEECH_MS: any utterance interrupts).

- self-interruptions: typed questions whose answers play with the echo and no user speech; any barge-in is one;
- cut-in to stop: while an answer plays (echo at --cut-in-level, -20 dB), the user says a short interruption 0.5 s in;
  from the start of the user's speech to the page's playback stopped, p50 / p95, and misses (the answer played on).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
from pathlib import Path

import numpy as np

from services.common import config
from services.gateway.client import GatewayClient
from services.tts.models import piper_voices
from tools.bench.run import instruct_model
from tools.eval.echo_page import Answer, echo_page, set_echo, spoken_turn, typed_answer
from tools.speech import speak
from tools.stack import RealStack, start_stack, stop_stack

MIC_RATE = 48000  # the cued microphone's context
DELAYS_MS = (20, 35, 50)
PROMPTS = ("Tell me about the sea.", "Describe a sunny morning in the city.", "What do cats like to do all day?",
           "Tell me a short story about a lighthouse.", "Why do people enjoy music?",
           "Explain how a train works.", "What is a good breakfast?", "Tell me about the mountains in winter.")
CUT_IN_AFTER_S = 0.5  # into the answer
MISS_S = 1.5  # an answer that plays on this long after a cut-in was not stopped by it
GREETING = ("Hello Sotto, can you hear me?", "en-us")
CUT_INS = (("Wait, what colour is the cup?", "en-us"), ("Stop, tell me about the moon instead.", "en-gb"),
           ("Hold on, I have another question.", "en-us+f3"), ("Actually, what time is it?", "en-gb-scotland+m3"),
           ("No, that is not what I asked.", "en-us"))
# Answers long enough to carry several seconds of echo (the reply's token cap), spoken in English by Piper; no
# history, so that every answer is as long as the first (SmolLM2's answers dwindle as the conversation grows).
STACK_ENV = {"SOTTO_TTS_ENGINE": "piper", "SOTTO_LLM_MAX_NEW_TOKENS": "30", "SOTTO_LLM_TOP_K": "1",
             "SOTTO_GATEWAY_MAX_HISTORY_TURNS": "0"}


def stack_env() -> dict[str, str]:
    """SmolLM2 and Piper's English voice (the tts extra's package), on the stack's other defaults."""
    voice, model = next(iter(piper_voices(None).items()))
    return {**STACK_ENV, "SOTTO_LLM_MODEL": str(instruct_model()), "SOTTO_TTS_MODEL": str(model),
            "SOTTO_TTS_VOICE": voice}


def active_dbfs(samples: np.ndarray, rate: int) -> float:
    """Level of the speech in `samples` (PCM16): RMS over the 20 ms frames above -50 dBFS, in dBFS."""
    frame = rate // 50
    frames = samples[: len(samples) // frame * frame].astype(np.float64).reshape(-1, frame) / 32768
    power = (frames ** 2).mean(axis=1)
    active = power[power > 10 ** (-50 / 10)]
    return round(float(10 * np.log10(active.mean())), 1)


def modes() -> dict[str, dict[str, str]]:
    vad = config.exit_on_error(lambda: config.load(config.VadConfig))
    return {"gate": {}, "probability_gate": {"SOTTO_BARGE_IN_LEVEL_DB": "0"},
            "no_gate": {"SOTTO_BARGE_IN_THRESHOLD": str(vad.threshold),
                        "SOTTO_BARGE_IN_MIN_SPEECH_MS": str(vad.min_speech_ms), "SOTTO_BARGE_IN_LEVEL_DB": "0"}}


async def answer_level(stack: RealStack) -> float:
    """The level of the stack's spoken answers, from one typed turn's audio."""
    async with GatewayClient(stack.ws_url) as client:
        record = await client.text_turn(PROMPTS[0], timeout=180)
    return active_dbfs(np.frombuffer(record.audio, dtype="<i2"), record.sample_rate)


def _answer_json(answer: Answer, **extra: object) -> dict:
    return {"turn_id": answer.turn_id, "played_s": round(answer.played_s, 2), "interrupted": answer.interrupted,
            "interrupted_itself": answer.interrupted_itself, "suppressed": answer.suppressed,
            "cut_in_to_stop_ms": answer.cut_in_to_stop_ms, **extra}


async def run_mode(stack: RealStack, levels: list[float], answers: int, cut_ins: int, cut_level: float,
                   speech: list[tuple[np.ndarray, int]], gain_db: dict[float, float]) -> dict:
    """The user greets Sotto (the page learns their level), then the answers with echo, then the cut-ins."""
    greeting, speech = speech[0], speech[1:]
    report: dict = {"levels": {}, "cut_in": {}}
    async with echo_page(stack.http_url + "/") as page:
        await set_echo(page, None, 0)
        await spoken_turn(page, *greeting)
        for level in levels:
            runs = []
            for i in range(answers):
                await set_echo(page, gain_db[level], DELAYS_MS[i % len(DELAYS_MS)])
                answer = await typed_answer(page, PROMPTS[i % len(PROMPTS)])
                runs.append(_answer_json(answer, delay_ms=DELAYS_MS[i % len(DELAYS_MS)]))
                print(f"  echo {level:+.0f} dB: answer {i + 1}/{answers}, {answer.played_s:.1f} s played"
                      + (", INTERRUPTED ITSELF" if answer.interrupted else ""), flush=True)
            heard = [r for r in runs if r["played_s"] > 0]
            report["levels"][f"{level:g}"] = {
                "answers": len(heard), "self_interruptions": sum(r["interrupted_itself"] for r in heard),
                "echo_s": round(sum(r["played_s"] for r in heard), 1),
                "suppressed": sum(r["suppressed"] for r in heard), "runs": runs}
        runs = []
        for i in range(cut_ins):
            await set_echo(page, gain_db[cut_level], DELAYS_MS[i % len(DELAYS_MS)])
            answer = await typed_answer(page, PROMPTS[i % len(PROMPTS)], cut_in=speech[i % len(speech)],
                                        cut_in_after_s=CUT_IN_AFTER_S)
            runs.append(_answer_json(answer, phrase=CUT_INS[i % len(CUT_INS)][0], said=answer.said_at_ms is not None))
            print(f"  cut-in {i + 1}/{cut_ins}: " + ("interrupted itself first" if answer.interrupted_itself else
                  f"{answer.played_s:.1f} s played, cut-in to stop {answer.cut_in_to_stop_ms} ms"), flush=True)
        # a cut-in counts where it stopped the answer or the answer played on for MISS_S after it; an answer that
        # ended sooner left nothing to stop
        said = [r for r in runs if not r["interrupted_itself"] and r["said"]
                and (r["interrupted"] or r["played_s"] >= CUT_IN_AFTER_S + MISS_S)]
        stops = np.array([r["cut_in_to_stop_ms"] for r in said if r["cut_in_to_stop_ms"] is not None])
        report["cut_in"] = {"echo_db": cut_level, "cut_ins": len(said), "missed": len(said) - len(stops),
                            "interrupted_itself_first": sum(r["interrupted_itself"] for r in runs),
                            "answer_over_first": len(runs) - len(said) - sum(r["interrupted_itself"] for r in runs),
                            "p50_ms": round(float(np.percentile(stops, 50))) if len(stops) else None,
                            "p95_ms": round(float(np.percentile(stops, 95))) if len(stops) else None,
                            "max_ms": round(float(stops.max())) if len(stops) else None, "runs": runs}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description="Self-interruptions by echo, and cut-in to stop, in the real page.")
    parser.add_argument("--answers", type=int, default=10, help="answers per echo level and mode")
    parser.add_argument("--cut-ins", type=int, default=10, help="real cut-ins per mode")
    parser.add_argument("--levels", type=lambda t: [float(x) for x in t.split(",")], default=[-30.0, -20.0, -12.0],
                        help="echo levels in dB relative to the user's speech")
    parser.add_argument("--cut-in-level", type=float, default=-20.0, help="echo level during the cut-ins, in dB")
    parser.add_argument("--modes", type=lambda t: t.split(","), default=["gate", "probability_gate", "no_gate"])
    parser.add_argument("--out", type=Path, default=Path("bench/results/eval_echo.json"))
    args = parser.parse_args()
    if args.answers < 1 or args.cut_ins < 0 or not args.levels:
        parser.error("--answers must be at least 1, --cut-ins at least 0, --levels not empty")
    envs = modes()
    unknown = [m for m in args.modes if m not in envs]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; accepted: {', '.join(envs)}")
    vad = config.exit_on_error(lambda: config.load(config.VadConfig))
    gateway = config.exit_on_error(lambda: config.load(config.GatewayConfig))
    gate = {"barge_in_threshold": vad.barge_in_threshold, "barge_in_min_speech_ms": vad.barge_in_min_speech_ms,
            "barge_in_level_db": gateway.barge_in_level_db}
    report: dict = {"machine": platform.machine(), "gate": gate, "levels_db": args.levels, "delays_ms": DELAYS_MS,
                    "stack": STACK_ENV, "modes": {}}
    with tempfile.TemporaryDirectory() as workdir:
        speech = [(speak(text, voice, MIC_RATE, Path(workdir)), MIC_RATE) for text, voice in (GREETING, *CUT_INS)]
        report["user_level_dbfs"] = user = round(float(np.mean([active_dbfs(s, MIC_RATE) for s, _ in speech])), 1)
        for mode in args.modes:
            print(f"{mode}: starting the stack", flush=True)
            stack = start_stack(Path(tempfile.mkdtemp(dir=workdir)), **stack_env(), **envs[mode])
            try:
                report["answer_level_dbfs"] = answer = asyncio.run(answer_level(stack))
                gain_db = {level: user + level - answer for level in {*args.levels, args.cut_in_level}}
                result = asyncio.run(run_mode(stack, args.levels, args.answers, args.cut_ins, args.cut_in_level,
                                              speech, gain_db))
                report["modes"][mode] = {"env": envs[mode], **result}
            finally:
                stop_stack(stack)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"user's speech {user} dBFS, answers {report['answer_level_dbfs']} dBFS")
    for mode, result in report["modes"].items():
        levels = ", ".join(f"{k} dB {v['self_interruptions']}/{v['answers']}" for k, v in result["levels"].items())
        cut = result["cut_in"]
        print(f"{mode:>8}: self-interruptions {levels}; cut-in to stop p50 {cut.get('p50_ms')} ms, "
              f"p95 {cut.get('p95_ms')} ms, missed {cut.get('missed')}/{cut.get('cut_ins')}")
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
