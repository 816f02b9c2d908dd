"""`python -m tools.bench run`: the whole benchmark in one go, saved as bench/results/<timestamp>.json.

Phases, each on an otherwise idle stack:
1. Spoken cases on the stack with the multimodal model (the tiny Gemma-4-shaped fixture: it takes audio and
   images), each turn paired with the same request on the direct path (the stack idle meanwhile); which of
   the two goes first alternates from pair to pair.
2. On the stack with the text model (SmolLM2-135M-Instruct, offline kit), which answers in real sentences as
   the typed path is meant to: the typed case, the llm service against its engine, then the load levels.
3. The VAD and TTS components, with no stack running.
Sampling is made deterministic (top_k = 1) on both paths, so each pair of turns decodes the same reply.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from services.llm.loading import OFFLINE_MODEL
from tools.bench import components, conversation, llm_engine, stats
from tools.bench.direct import DirectPath
from tools.bench.fixtures import LOAD_QUESTION, Case, spoken_cases, typed_case
from tools.bench.load import plot, run_levels
from tools.bench.report import print_run
from tools.bench.wsdriver import run_turn
from tools.stack import TINY_LLM, model_dir, start_stack, stop_stack

# Short replies keep the first sentence short, so its synthesis (long and noisy on a slow, shared CPU) does
# not drown the milliseconds the overhead is about. The tiny multimodal model writes characters at random and
# finishes before any sentence is cut, so its whole reply is the first sentence, spelled out: fewer tokens.
MAX_NEW_TOKENS = 12
SPOKEN_MAX_NEW_TOKENS = 4
# Every bench session comes from 127.0.0.1, where real users would come from their own addresses.
LOAD_ENV = {"SOTTO_GATEWAY_MAX_SESSIONS_PER_CLIENT": "16"}
STACK_ENV = {"SOTTO_LLM_TOP_K": "1", "SOTTO_LLM_THREADS": "1"}
TARGET_OVERHEAD_MS = 10.0
TARGET_OVERHEAD_RATIO = 0.05
OK = ("stop", "length", "degraded")
BUDGET_STAGES = ("endpoint", "llm_first_token", "first_sentence", "tts_first_chunk", "gateway_to_client")


def instruct_model() -> Path:
    return model_dir() / "offline" / OFFLINE_MODEL


def stage_budget(turn) -> dict[str, float | None]:
    """Where a turn's time to first audio went: the end of speech decided, the llm's first token (queue and
    hops included), the rest of the first unit of speech decoded (`first_sentence`: a clause or the first few
    words), its first audio chunk synthesised, and the gateway's send to the client."""
    t = turn.timings
    first_token, tts, first_audio = t.get("first_token_ms"), t.get("tts_first_chunk_ms"), t.get("first_audio_ms")
    sentence = None if None in (first_token, tts, first_audio) else round(first_audio - first_token - tts, 1)
    return dict(zip(BUDGET_STAGES, (t.get("endpoint_ms"), first_token, sentence, tts, turn.transport_ms)))


def _stack_row(turn) -> dict:
    """A stack turn as saved: its chunks summed up as the gaps a listener would hear (stats.playback_gaps)."""
    gaps = stats.playback_gaps(turn.chunks, turn.sample_rate)
    return asdict(turn) | {"llm_audio_wav": None, "chunks": len(turn.chunks), "gaps_ms": gaps,
                           "longest_gap_ms": max(gaps, default=0.0)}


def _paired(stack_turn, direct_turn) -> dict:
    row = {"stack": _stack_row(stack_turn), "budget_ms": stage_budget(stack_turn), "direct": asdict(direct_turn)}
    if direct_turn.first_audio_ms is not None:
        row["overhead_ms"] = round(stack_turn.client_stage_ms - direct_turn.first_audio_ms, 1)
    return row


def summarize_case(case: Case, rows: list[dict]) -> dict:
    ok = [r for r in rows if "overhead_ms" in r]
    return {"name": case.name, "client": case.client if case.source == "speech" else "typed",
           "turns": len(rows), "ok": len(ok),
           "outcomes": {o: sum(r["stack"]["outcome"] == o for r in rows)
                        for o in {r["stack"]["outcome"] for r in rows}},
           "ttfa_ms": stats.summary(r["stack"]["client_ttfa_ms"] for r in ok),
           "budget_ms": {stage: stats.summary(r["budget_ms"][stage] for r in ok) for stage in BUDGET_STAGES},
           "longest_gap_ms": stats.summary(r["stack"]["longest_gap_ms"] for r in ok),
           "gaps": sum(len(r["stack"]["gaps_ms"]) for r in ok),
           "direct_ms": {k: stats.summary(r["direct"][f"{k}_ms"] for r in ok)
                         for k in ("first_token", "first_sentence", "tts_first_chunk", "first_audio")},
           "overhead_ms": stats.summary(r["overhead_ms"] for r in ok),
           "overhead_p50_ci95_ms": stats.median_ci(r["overhead_ms"] for r in ok),
           "replies": sorted({r["stack"]["reply"][:60] for r in ok})[:3],
           "same_reply_both_paths": all(r["stack"]["reply"] == r["direct"]["reply"] for r in ok)}


def overhead(cases: dict) -> dict:
    """The stack's overhead over the direct path across the turns of the product's own clients (the page's
    spoken turns and typed turns), with its 95 % interval and the verdict on the target; a client without its
    own VAD apart, since it streams the microphone while the answer is prepared."""
    def over(names: list[str]) -> dict:
        rows = [r for name in names for r in cases[name]["rows"] if "overhead_ms" in r]
        values, ttfa = [r["overhead_ms"] for r in rows], stats.summary(r["stack"]["client_ttfa_ms"] for r in rows)
        s, ci = stats.summary(values), stats.median_ci(values)
        ratio = round(s["p50"] / ttfa["p50"], 4) if values and ttfa["p50"] else None
        verdict = ("no turns" if ratio is None else "NOT met" if s["p50"] > TARGET_OVERHEAD_MS or
                   ratio > TARGET_OVERHEAD_RATIO else "met" if ci is not None and ci[1] <= TARGET_OVERHEAD_MS
                   else "met at the p50, but its interval reaches past the target")
        return {"cases": names, "all_turns_ms": s, "all_turns_p50_ci95_ms": ci, "ratio_p50": ratio,
                "verdict": verdict}

    raw = [name for name, c in cases.items() if c["summary"]["client"] == "raw"]
    out = over([name for name in cases if name not in raw])
    return out | ({"raw_client": over(raw)} if raw else {})


def _direct_turn(direct: DirectPath, case: Case, turn):
    """The stack turn's request on the direct path, with the microphone tail the stack's VAD heard."""
    if case.source == "text":
        return direct.first_audio(direct.request(text=case.text))
    return direct.first_audio(direct.request(audio_wav=turn.llm_audio_wav, jpegs=case.jpegs[:turn.images]),
                              turn.mic_tail_ms)


def _usable(turn) -> bool:
    return turn.outcome in OK and turn.client_stage_ms is not None


def run_cases(stack, direct: DirectPath, cases: list[Case], turns: int, bar: tqdm, timeout: float) -> dict:
    """Warm-up (one unrecorded turn of each case), then per case `turns` pairs of stack turn + direct turn.

    The order within a pair alternates, so whatever one path leaves behind for the next turn (a session
    closing, caches) does not always fall on the same path. A direct turn that goes first takes the inputs
    the stack cut on its previous turn; `same_reply_both_paths` would show a different cut."""
    preroll = float(stack.env.get("SOTTO_PREROLL_MS", 300))
    out = {}
    for case in cases:
        bar.set_description(f"{case.name} warm-up")
        previous = asyncio.run(run_turn(stack.ws_url, case, timeout, preroll))
        previous = previous if _usable(previous) else None
        if previous is not None:
            _direct_turn(direct, case, previous)
        bar.update(1)
        rows = []
        for i in range(turns):
            bar.set_description(f"{case.name} turn {i + 1}")
            early = _direct_turn(direct, case, previous) if i % 2 and previous is not None else None
            turn = asyncio.run(run_turn(stack.ws_url, case, timeout, preroll))
            if _usable(turn):
                rows.append(_paired(turn, early or _direct_turn(direct, case, turn)) | {"direct_first": bool(early)})
                previous = turn
            else:
                rows.append({"stack": _stack_row(turn), "direct": None})
            bar.update(1)
        out[case.name] = {"rows": rows, "summary": summarize_case(case, rows), "load_average": stats.load_average()}
    return out


def run(turns: int = 8, levels: tuple[int, ...] = (1, 2, 4, 8), load_turns: int = 2, load_bound_s: float = 60.0,
        out_dir: Path = Path("bench/results"), timeout: float = 60.0, components_on: bool = True,
        spoken_on: bool = True, case_names: tuple[str, ...] = (), quick: bool = False,
        keep_work: bool = False, headline_rounds: int = 2, headline_only: bool = False) -> dict:
    """`quick`: small component sizes (the bench's own test). `keep_work`: keep the fixtures and the stacks'
    logs (named in the result as `work_dir`); they are kept anyway when the run fails. `headline_rounds`: passes
    over the human-speech questions in the headline conversation (0: none); `headline_only`: nothing else."""
    began = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"started_at": stamp, "machine": stats.machine(), "commit": stats.commit(),
                    "command": f"python -m tools.bench run --turns {turns} --levels {','.join(map(str, levels))}",
                    "config": {"turns_per_case": turns, "levels": list(levels), "load_turns_per_session": load_turns,
                               "load_bound_s": load_bound_s, "stack_env": STACK_ENV | LOAD_ENV,
                               "max_new_tokens": MAX_NEW_TOKENS, "spoken_max_new_tokens": SPOKEN_MAX_NEW_TOKENS,
                               "targets": {"overhead_ms_p50": TARGET_OVERHEAD_MS,
                                           "overhead_ratio_p50": TARGET_OVERHEAD_RATIO}}}
    work = Path(tempfile.mkdtemp(prefix="sotto-bench-"))
    if headline_rounds:
        # The headline first, on a stack at make up's defaults: none of the bench-only settings below apply.
        (work / "conversation").mkdir()
        stack = start_stack(work / "conversation", SOTTO_LLM_MODEL=str(instruct_model()), SOTTO_LLM_THREADS="0")
        try:
            result["headline"] = conversation.run(stack, headline_rounds, timeout, questions=3 if quick else 0)
        finally:
            stop_stack(stack)
        conversation.print_headline(result["headline"])
    if headline_only:
        stats.save_run(result, out_dir / f"{stamp}-headline.json", work, keep_work, began)
        print(f"saved {result['path']}")
        return result
    try:
        cases = [c for c in spoken_cases(work) if not case_names or c.name in case_names] if spoken_on else []
        steps = (len(cases) + 1) * (turns + 1) + 1 + len(levels) + (2 if components_on else 0)
        # tqdm writes to a copy of the original stderr: the LLM engine puts a line-reading tap on fd 2, and
        # tqdm's carriage-return updates (no newline) would hold back the tap's sync markers, stalling each
        # generation in this process (services/llm/native_log.py).
        progress = os.fdopen(os.dup(2), "w", buffering=1)
        with progress, tqdm(total=steps, unit="step", dynamic_ncols=True, file=progress) as bar:
            if cases:
                bar.set_description("starting the multimodal stack")
                (work / "mm").mkdir()
                stack = start_stack(work / "mm", **STACK_ENV, SOTTO_LLM_MAX_NEW_TOKENS=str(SPOKEN_MAX_NEW_TOKENS))
                try:
                    direct = DirectPath(stack.env, str(TINY_LLM))
                    result["config"]["spoken_model"] = TINY_LLM.name
                    result["config"]["spoken_tts"] = f"{direct.tts.name} ({direct.voice})"
                    result["cases"] = run_cases(stack, direct, cases, turns, bar, timeout)
                    direct.close()
                finally:
                    stop_stack(stack)
            bar.set_description("starting the text stack")
            (work / "text").mkdir()
            model = instruct_model()
            stack = start_stack(work / "text", SOTTO_LLM_MODEL=str(model), **STACK_ENV, **LOAD_ENV,
                                SOTTO_LLM_MAX_NEW_TOKENS=str(MAX_NEW_TOKENS))
            try:
                direct = DirectPath(stack.env, str(model))
                result["config"]["typed_model"] = model.name
                result["config"]["typed_tts"] = f"{direct.tts.name} ({direct.voice})"
                result.setdefault("cases", {}).update(run_cases(stack, direct, [typed_case()], turns, bar, timeout))
                bar.set_description("llm service vs engine")
                result["llm_service"] = llm_engine.measure(stack, direct, str(model), 1, turns=1 if quick else 8,
                                                           decode=16 if quick else 64, cancels=1 if quick else 4)
                bar.update(1)
                tts_engine, voice = direct.tts, direct.voice
                direct.close()
                limit = int(stack.env.get("SOTTO_LLM_MAX_CONCURRENT", 2))
                bar.set_description("load")
                rows = asyncio.run(run_levels(stack.ws_url, Case("load", "text", LOAD_QUESTION), list(levels),
                                              load_turns, load_bound_s, timeout, bar))
                result["load"] = {"admission_limit": limit, "question": LOAD_QUESTION, "levels": rows}
            finally:
                stop_stack(stack)
            png = plot(result["load"]["levels"], out_dir / f"{stamp}-load.png", limit)
            result["load"]["plot"] = str(png)
            if components_on:
                bar.set_description("components: vad")
                result["components"] = {"vad": components.vad(200, 2, 1.0) if quick else components.vad()}
                bar.update(1)
                bar.set_description("components: tts")
                sizes = (1, ("short",)) if quick else ()
                result["components"]["tts"] = components.tts(tts_engine, voice, *sizes)
                if tts_engine.name != "kokoro":  # Kokoro ONNX on the kit too: the engine of a machine with its model
                    result["components"]["tts_kokoro"] = components.tts_engines(("onnx",), *sizes)["onnx"]
                bar.update(1)
        result["overhead"] = overhead(result["cases"])
    except BaseException:
        print(f"\nthe stacks' logs are kept in {work}", file=sys.stderr)
        raise
    stats.save_run(result, out_dir / f"{stamp}.json", work, keep_work, began)
    print_run(result)
    return result
