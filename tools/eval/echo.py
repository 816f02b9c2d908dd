"""Echo-safe barge-in in the real page: does the answer's own voice, fed back into the microphone, make Sotto
interrupt itself, and how soon does a real cut-in stop the answer?

    python -m tools.eval.echo [--answers 10] [--cut-ins 10] [--levels=-30,-20,-12] [--out bench/results/eval_echo.json]
    (make eval-echo)
    python -m tools.eval.echo --room [--backchannels 10] --modes gate --levels=-12 --cut-in-level=-12

The real stack (tools.stack: vad, llm on SmolLM2, tts on Piper's English voice, gateway) and the real page in
headless Chromium, whose microphone also hears the answer being played (tools.eval.echo_page), delayed 20-50 ms and
attenuated to `level` dB below the user's speech (active speech levels, measured). Three times: with the barge-in
gate at the service's settings (SOTTO_BARGE_IN_THRESHOLD, _MIN_SPEECH_MS and _LEVEL_DB), with its probability test
alone (SOTTO_BARGE_IN_LEVEL_DB=0), and without it (the gate set to the VAD's ordinary speech test,
SOTTO_VAD_THRESHOLD and SOTTO_VAD_MIN_SPEECH_MS: any utterance interrupts).

- self-interruptions: typed questions whose answers play with the echo and no user speech; any barge-in is one;
- cut-in to stop: while an answer plays (echo at --cut-in-level, -20 dB), the user says a short interruption 0.5 s in;
  from the start of the user's speech to the page's playback stopped, p50 / p95, and misses (the answer played on).

`--room`: the client with its own VAD in tools.eval.echo_room's room. The answer reaches the microphone through the
room's impulse response from the loudspeaker (pyroomacoustics, RT60 about 0.3 s), with the room's noise; the user is
a person (human speech: the Asterisk prompts) a metre away, through the room, at -26 dBFS; and `--backchannels N`
human "oh" and "right" (tools/eval/backchannels.py) 1 s into an answer: answers they stopped. As without it, no
browser echo cancellation is applied (fake capture): the echo level is what the browser's canceller left.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import soxr

from services.common import config
from services.gateway.client import GatewayClient
from services.tts.models import piper_voices
from tools.bench.run import instruct_model
from tools.eval import echo_room
from tools.eval.echo_page import Answer, echo_page, mic_rate, set_echo, set_room, spoken_turn, typed_answer
from tools.speech import speak
from tools.stack import RealStack, start_stack, stop_stack

MIC_RATE = 48000  # the cued microphone's context
DELAYS_MS = (20, 35, 50)
PROMPTS = ("Tell me about the sea.", "Describe a sunny morning in the city.", "What do cats like to do all day?",
           "Tell me a short story about a lighthouse.", "Why do people enjoy music?",
           "Explain how a train works.", "What is a good breakfast?", "Tell me about the mountains in winter.")
CUT_IN_AFTER_S = 0.5  # into the answer
BACKCHANNEL_AFTER_S = 1.0  # into the answer, as tools.eval.echo_wires
RATE_16K = 16000  # the room's and the human recordings'
ANSWER_RATE = 24000  # Piper's, as echo_room synthesises the answers
PERSON_DBFS = -26.0  # the person's speech at the microphone, with --room (as tools.eval.echo_wires)
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


@dataclass(frozen=True)
class PageRoom:
    """The room the page's microphone is in: the loudspeaker's impulse response and the noise, at RATE_16K."""

    impulse: np.ndarray
    noise_dbfs: float

    @property
    def gain_db(self) -> float:
        """How much louder the room makes the answer at the microphone (its active level through the room)."""
        answer = echo_room.reference_answer(RATE_16K)
        return active_dbfs(np.convolve(answer, self.impulse), RATE_16K) - active_dbfs(answer, RATE_16K)

    async def install(self, page) -> None:
        rate = await mic_rate(page)
        impulse = soxr.resample(self.impulse, RATE_16K, rate) * RATE_16K / rate
        noise = np.random.default_rng(0).standard_normal(2 * rate) * 10 ** (self.noise_dbfs / 20)
        await set_room(page, impulse, noise)


def room_speech(room: echo_room.Room, cut_ins: int, backchannels: int) -> tuple[list, list]:
    """A greeting and the cut-ins (complete Asterisk prompts of 1-3 s), and the backchannels, as the microphone
    hears a person a metre away: through the room, at PERSON_DBFS."""
    from tools.eval.backchannels import backchannels as human_backchannels
    person = room.impulse(room.person)

    def heard(audio: np.ndarray) -> tuple[np.ndarray, int]:
        x = echo_room.at_level(np.convolve(audio.astype(np.float64), person), PERSON_DBFS)
        return np.clip(np.rint(x), -32768, 32767).astype(np.int16), RATE_16K

    said = echo_room.cut_in_people(cut_ins + 1)  # the first is the greeting
    sounds = human_backchannels() if backchannels else []
    return [heard(a) for a in said], [heard(sounds[i % len(sounds)].audio) for i in range(backchannels)]


async def run_mode(stack: RealStack, levels: list[float], answers: int, cut_ins: int, cut_level: float,
                   speech: list[tuple[np.ndarray, int]], gain_db: dict[float, float], room: PageRoom | None = None,
                   backchannels: list[tuple[np.ndarray, int]] = ()) -> dict:
    """The user greets Sotto (the page learns their level), then the answers with echo, the cut-ins, and the
    backchannels."""
    greeting, speech = speech[0], speech[1:]
    report: dict = {"levels": {}, "cut_in": {}}
    async with echo_page(stack.http_url + "/") as page:
        await set_echo(page, None, 0)
        if room is not None:
            await room.install(page)
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
            runs.append(_answer_json(answer, phrase=CUT_INS[i % len(CUT_INS)][0] if room is None else None,
                                     said=answer.said_at_ms is not None))
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
        runs = []
        for i, sound in enumerate(backchannels):
            await set_echo(page, gain_db[cut_level], DELAYS_MS[i % len(DELAYS_MS)])
            answer = await typed_answer(page, PROMPTS[i % len(PROMPTS)], cut_in=sound,
                                        cut_in_after_s=BACKCHANNEL_AFTER_S)
            runs.append(_answer_json(answer, said=answer.said_at_ms is not None))
            print(f"  backchannel {i + 1}/{len(backchannels)}: " + ("STOPPED THE ANSWER" if answer.interrupted else
                  f"{answer.played_s:.1f} s played"), flush=True)
        said = [r for r in runs if r["said"] and not r["interrupted_itself"]]
        report["backchannel"] = {"echo_db": cut_level, "said": len(said),
                                 "stopped": sum(r["interrupted"] for r in said), "runs": runs}
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description="Self-interruptions by echo, and cut-in to stop, in the real page.")
    parser.add_argument("--answers", type=int, default=10, help="answers per echo level and mode")
    parser.add_argument("--cut-ins", type=int, default=10, help="real cut-ins per mode")
    parser.add_argument("--levels", type=lambda t: [float(x) for x in t.split(",")], default=[-30.0, -20.0, -12.0],
                        help="echo levels in dB relative to the user's speech")
    parser.add_argument("--cut-in-level", type=float, default=-20.0, help="echo level during the cut-ins, in dB")
    parser.add_argument("--modes", type=lambda t: t.split(","), default=["gate", "probability_gate", "no_gate"])
    parser.add_argument("--room", action="store_true", help="the page's microphone in a simulated room, human speech")
    parser.add_argument("--backchannels", type=int, default=0, help="human backchannels over an answer (--room)")
    parser.add_argument("--out", type=Path, default=Path("bench/results/eval_echo.json"))
    args = parser.parse_args()
    if args.answers < 1 or args.cut_ins < 0 or not args.levels or args.backchannels < 0:
        parser.error("--answers must be at least 1, --cut-ins and --backchannels at least 0, --levels not empty")
    if args.backchannels and not args.room:
        parser.error("--backchannels needs --room (human sounds through the room)")
    envs = modes()
    unknown = [m for m in args.modes if m not in envs]
    if unknown:
        parser.error(f"unknown mode(s) {unknown}; accepted: {', '.join(envs)}")
    vad = config.exit_on_error(lambda: config.load(config.VadConfig))
    gate = {"barge_in_threshold": vad.barge_in_threshold, "barge_in_min_speech_ms": vad.barge_in_min_speech_ms,
            "barge_in_level_db": vad.barge_in_level_db}
    report: dict = {"machine": platform.machine(), "gate": gate, "levels_db": args.levels, "delays_ms": DELAYS_MS,
                    "stack": STACK_ENV, "modes": {}}
    room, said_backchannels = None, []
    if args.room:
        setting = echo_room.Room()
        room = PageRoom(setting.impulse(setting.speaker), setting.noise_dbfs)
        speech, said_backchannels = room_speech(setting, args.cut_ins, args.backchannels)
        report["room"] = {**setting.__dict__, "person_dbfs": PERSON_DBFS,
                          "people": f"{len(speech)} Asterisk prompts (human speech), the first as the greeting",
                          "backchannels": args.backchannels}
    with tempfile.TemporaryDirectory() as workdir:
        if room is None:
            speech = [(speak(text, voice, MIC_RATE, Path(workdir)), MIC_RATE) for text, voice in (GREETING, *CUT_INS)]
        report["user_level_dbfs"] = user = round(float(np.mean([active_dbfs(s, r) for s, r in speech])), 1)
        for mode in args.modes:
            print(f"{mode}: starting the stack", flush=True)
            stack = start_stack(Path(tempfile.mkdtemp(dir=workdir)), **stack_env(), **envs[mode])
            try:
                report["answer_level_dbfs"] = answer = asyncio.run(answer_level(stack))
                through = room.gain_db if room is not None else 0.0
                gain_db = {level: user + level - answer - through for level in {*args.levels, args.cut_in_level}}
                result = asyncio.run(run_mode(stack, args.levels, args.answers, args.cut_ins, args.cut_in_level,
                                              speech, gain_db, room, said_backchannels))
                report["modes"][mode] = {"env": envs[mode], **result}
            finally:
                stop_stack(stack)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"user's speech {user} dBFS, answers {report['answer_level_dbfs']} dBFS")
    for mode, result in report["modes"].items():
        levels = ", ".join(f"{k} dB {v['self_interruptions']}/{v['answers']}" for k, v in result["levels"].items())
        cut = result["cut_in"]
        back = result.get("backchannel", {})
        print(f"{mode:>8}: self-interruptions {levels}; cut-in to stop p50 {cut.get('p50_ms')} ms, "
              f"p95 {cut.get('p95_ms')} ms, missed {cut.get('missed')}/{cut.get('cut_ins')}"
              + (f"; backchannels that stopped the answer {back['stopped']}/{back['said']}" if back else ""))
    print(f"saved {args.out}")


if __name__ == "__main__":
    main()
