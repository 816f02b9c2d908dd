"""The headline: a spoken conversation as a person has it with `make up`'s offline kit.

One session, the stack at the product's defaults (sampling, reply length, threads; only ports, the run folder and
the model files are set), SmolLM2-135M-Instruct (text only, so each spoken turn goes recogniser -> model -> Piper),
the camera on (a frame with every spoken turn, as the page sends), and the history growing turn by turn. The
questions are real people reading (pocketsphinx-testdata's LibriVox sentences, cards and command, fetched by
tools.eval.human_speech; no test uses this voice), streamed in real time as a client without its own VAD does (the
server's VAD and turn model decide the end, and an utterance resumed before its answer was heard joins its first
part), and each answer is listened to for its length before the next question. Time to first audio is measured at
the client from the frame that held the end of speech.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import replace

from tools.bench import stats
from tools.bench.fixtures import Case, camera_jpeg
from tools.bench.wsdriver import TimedClient, TimedTurn, _turn
from tools.eval.human_speech import pocketsphinx_clips

BUDGET = ("endpoint_ms", "asr_ms", "first_token_ms", "tts_first_chunk_ms", "first_audio_ms")
TRAILING_S = 2.0  # silence streamed after each question: more than the longest hold (SOTTO_VAD_MAX_TURN_SILENCE_MS)


def conversation_cases() -> list[Case]:
    """Each human-speech question as a "raw" spoken case with a camera frame."""
    return [Case(clip.id, "speech", clip.transcript, clip.audio.astype("<i2").tobytes(), (camera_jpeg(i),),
                 client="raw") for i, clip in enumerate(pocketsphinx_clips())]


async def converse(url: str, cases: list[Case], timeout: float, preroll_ms: float) -> tuple[list[TimedTurn], dict]:
    turns = []
    async with TimedClient(url, client_vad=False) as client:
        ready = client.ready
        for case in cases:
            turn = TimedTurn(case.name)
            client.frame_sent.clear()  # _turn finds the end-of-speech frame among this turn's frames
            padded = replace(case, pcm16=case.pcm16 + bytes(int((TRAILING_S - 0.8) * 16000) * 2))
            try:
                await asyncio.wait_for(_turn(client, padded, turn, timeout, preroll_ms), timeout + 30)
            except asyncio.TimeoutError:
                turn.outcome, turn.error = "timeout", f"no turn.done within {timeout:.0f} s"
            turns.append(turn)
            heard_s = sum(samples for _, samples in turn.chunks) / turn.sample_rate
            await asyncio.sleep(heard_s)  # the user listens to the answer before the next question
    return turns, ready


def summarise(turns: list[TimedTurn]) -> dict:
    ok = [t for t in turns if t.outcome in ("stop", "length", "degraded") and t.client_ttfa_ms is not None]
    return {"turns": len(turns), "ok": len(ok),
            "outcomes": {o: sum(t.outcome == o for t in turns) for o in {t.outcome for t in turns}},
            "errors": [t.error for t in turns if t.error],
            "ttfa_ms": stats.summary(t.client_ttfa_ms for t in ok),
            "budget_ms": {k[:-3]: stats.summary(t.timings.get(k) for t in ok if t.timings.get(k) is not None)
                          for k in BUDGET} | {"transport": stats.summary(t.transport_ms for t in ok)},
            "rows": [{"case": t.case, "outcome": t.outcome, "client_ttfa_ms": t.client_ttfa_ms, "reply": t.reply,
                      "timings": t.timings, "error": t.error} for t in turns]}


def run(stack, rounds: int, timeout: float, questions: int = 0) -> dict:
    """`rounds` passes over the questions (the first `questions` of them; 0: all) in one session, the history
    growing throughout."""
    cases = (conversation_cases()[:questions or None]) * rounds
    began = time.monotonic()
    turns, ready = asyncio.run(converse(stack.ws_url, cases, timeout, float(stack.env.get("SOTTO_PREROLL_MS", 300))))
    out = summarise(turns)
    out["config"] = {"model": ready.get("model", {}).get("name", "?"), "tts": f"voice {ready.get('voice', '?')}",
                     "asr": "Whisper tiny.en (offline kit)", "questions": "pocketsphinx-testdata (human speech)",
                     "rounds": rounds, "stack_env": "defaults (ports, run folder and model files only)"}
    out["wall_s"] = round(time.monotonic() - began, 1)
    return out


def print_headline(h: dict) -> None:
    t, b, config = h["ttfa_ms"], h["budget_ms"], h["config"]

    def both(s: dict | None) -> str:
        return "-" if not s or s.get("p50") is None else f"{s['p50']:.0f} / {s['p95']:.0f}"

    print(f"\nHEADLINE: a spoken conversation at make up's defaults ({config['model']} + {config['tts']}, "
          f"{config['asr']}, camera on, {h['turns']} turns in one session, human speech): time to first audio "
          f"p50 / p95 {both(t)} ms ({h['ok']}/{h['turns']} turns answered; outcomes {h['outcomes']})")
    print("  stage budget p50 / p95 ms: " + ", ".join(f"{k} {both(v)}" for k, v in b.items()))
    if h["errors"]:
        print(f"  errors: {h['errors'][:3]}")
