"""`python -m tools.bench run`: the whole benchmark in one go, saved as bench/results/<timestamp>.json.

Phases, each on an otherwise idle stack:
1. Spoken cases on the stack with the multimodal model (the tiny Gemma-4-shaped fixture: it takes audio and
   images), each turn paired with the same request on the direct path (the stack idle meanwhile); which of
   the two goes first alternates from pair to pair.
2. The typed case and the load levels on the stack with the text model (SmolLM2-135M-Instruct, offline kit):
   it answers in real sentences, as the typed path is meant to.
3. Components, with no stack running.
Sampling is made deterministic (top_k = 1) on both paths, so each pair of turns decodes the same reply.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from tqdm import tqdm

from services.llm import bench as llm_bench
from tools.bench import components, legs, procs, stats
from tools.bench.direct import DirectPath
from tools.bench.fixtures import LOAD_QUESTION, Case, spoken_cases, typed_case
from tools.bench.load import plot, run_levels
from tools.bench.overhead import (TARGET_OVERHEAD_MS, TARGET_OVERHEAD_RATIO, outside_synthesis, pipeline_cost,
                                   overhead_by_client)
from tools.bench.report import print_run
from tools.bench.wsdriver import run_turn
from tools.stack import TINY_LLM, model_dir, start_stack, stop_stack

# Short replies keep the first sentence short: on a slow, shared CPU a long first sentence makes synthesis
# (seconds, noisy) drown the milliseconds this bench is after. The text model's reply is real words: its first
# clause is cut from 12 tokens while the rest is still decoded, as in use. The tiny multimodal model writes
# characters at random and finishes in milliseconds, before any sentence is cut, so its whole reply is the
# first sentence, spelled out letter by letter and digit by digit (12 tokens: 1.7-2.9 s of synthesis here);
# 4 tokens keep that to 0.6-1.2 s, and change nothing else in those turns.
MAX_NEW_TOKENS = 12
SPOKEN_MAX_NEW_TOKENS = 4
# Every bench session comes from 127.0.0.1, where real users would come from their own addresses.
LOAD_ENV = {"SOTTO_GATEWAY_MAX_SESSIONS_PER_CLIENT": "16"}
STAGES = ("endpoint_ms", "llm_queue_ms", "first_token_ms", "tts_first_chunk_ms", "first_audio_ms", "ttfa_ms")


def instruct_model() -> Path:
    return model_dir() / "offline" / "smollm2-135m-instruct.litertlm"


def _tts_first_chunk_s(stack) -> float:
    """The tts service's own first-chunk time so far (first complete sentence in -> first chunk out), summed."""
    return stack.metric("tts", "sotto_tts_first_chunk_seconds_sum", method="SynthesizeStream")


def _tts_first_chunk_queued_s(stack) -> float:
    """How long the tts service's engine threads waited for a core during first chunks so far, summed."""
    return stack.metric("tts", "sotto_tts_first_chunk_queued_seconds_sum", method="SynthesizeStream")


def _paired(stack_turn, cpu: dict[str, float], tts_service_ms: float, tts_service_queued_ms: float,
            direct_turn) -> dict:
    row = {"stack": asdict(stack_turn), "stack_cpu_ms": cpu, "direct": asdict(direct_turn)}
    row["stack"].pop("llm_audio_wav", None)
    if stack_turn.client_stage_ms is not None and direct_turn.first_audio_ms is not None:
        row["overhead_ms"] = round(stack_turn.client_stage_ms - direct_turn.first_audio_ms, 1)
        row["overhead_server_ms"] = round(stack_turn.timings["first_audio_ms"] - direct_turn.first_audio_ms, 1)
    if direct_turn.tts_first_chunk_ms is not None:
        # The same first sentence synthesised by the same engine: in the tts service, beside the stack, and
        # in this process. A difference here is synthesis slowed by what runs beside it, not a hop's cost.
        row["tts_service_first_chunk_ms"] = round(tts_service_ms, 1)
        row["tts_synthesis_slowdown_ms"] = round(tts_service_ms - direct_turn.tts_first_chunk_ms, 1)
        row.update(_core_wait(tts_service_queued_ms, direct_turn))
    row.update(_first_token_split(stack_turn.timings, direct_turn))
    if {"gateway", "llm", "tts"} <= cpu.keys():
        # CPU the stack spent beyond the engines' own work: the gateway and the two model services, minus the
        # same engines' CPU in one process. It holds on a busy machine, where wall-clock differences do not.
        row["cpu_overhead_ms"] = round(cpu["gateway"] + cpu["llm"] + cpu["tts"]
                                       - (direct_turn.cpu_ms - direct_turn.vad_cpu_ms), 1)
    return row


def _core_wait(service_queued_ms: float, direct_turn) -> dict:
    """How much longer the engine's threads (the calling thread and ONNX Runtime's pool) waited for a core in
    the tts service than in process while the first chunk was made: the share of "TTS slower" that is the
    stack's other work taking the cores, apart from the host's speed, which is most of the turn-to-turn noise
    here. Summed over the threads, so two threads waiting at once count twice: an upper bound on the delay."""
    direct_queued = direct_turn.tts_first_chunk_queued_ms
    if direct_queued is None:
        return {}
    return {"tts_core_wait_ms": round(service_queued_ms, 1),
            "tts_core_wait_diff_ms": round(service_queued_ms - direct_queued, 1)}


def _first_token_split(timings: dict, direct_turn) -> dict:
    """The first token's share of the overhead in two parts, from the engine's own first-token time on each
    path: the engine prefilling more slowly inside the llm service than in this process, and the hops (request
    built, gRPC to the llm service and the token back, the service's executor hop), each net of the same
    span on the direct path."""
    stack_engine, direct_engine = timings.get("llm_engine_first_token_ms"), direct_turn.engine_first_token_ms
    if stack_engine is None or direct_engine is None or direct_turn.first_token_ms is None:
        return {}
    stack_hops = timings["first_token_ms"] - timings.get("llm_queue_ms", 0.0) - stack_engine
    return {"llm_engine_gap_ms": round(stack_engine - direct_engine, 1),
            "first_token_hops_ms": round(stack_hops - (direct_turn.first_token_ms - direct_engine), 1)}


def summarize_case(case: Case, rows: list[dict]) -> dict:
    ok = [r for r in rows if "overhead_ms" in r]
    timings = [r["stack"]["timings"] for r in ok]
    out = {"name": case.name, "client": case.client if case.source == "speech" else "typed",
           "turns": len(rows), "ok": len(ok),
           "outcomes": {o: sum(r["stack"]["outcome"] == o for r in rows) for o in {r["stack"]["outcome"] for r in rows}},
           "ttfa_ms": stats.summary(r["stack"]["client_ttfa_ms"] for r in ok),
           "server_ttfa_ms": stats.summary(t.get("ttfa_ms") for t in timings),
           "stages_ms": {s[:-3]: stats.summary(t.get(s) for t in timings) for s in STAGES[:-1]},
           "transport_ms": stats.summary(r["stack"]["transport_ms"] for r in ok),
           "direct_ms": {k: stats.summary(r["direct"][f"{k}_ms"] for r in ok)
                         for k in ("first_token", "first_sentence", "tts_first_chunk", "first_audio")},
           "overhead_ms": stats.summary(r["overhead_ms"] for r in ok),
           "overhead_p50_ci95_ms": stats.median_ci(r["overhead_ms"] for r in ok),
           "overhead_outside_synthesis_ms": stats.summary(outside_synthesis(r) for r in ok),
           "pipeline_cost_ms": stats.summary(pipeline_cost(r) for r in ok),
           "overhead_server_ms": stats.summary(r["overhead_server_ms"] for r in ok),
           "tts_synthesis_slowdown_ms": stats.summary(r.get("tts_synthesis_slowdown_ms") for r in ok),
           "tts_core_wait_ms": {"stack": stats.summary(r.get("tts_core_wait_ms") for r in ok),
                                "difference": stats.summary(r.get("tts_core_wait_diff_ms") for r in ok)},
           "llm_engine_first_token_ms": {"stack": stats.summary(t.get("llm_engine_first_token_ms") for t in timings),
                                         "direct": stats.summary(r["direct"]["engine_first_token_ms"] for r in ok)},
           "llm_engine_gap_ms": stats.summary(r.get("llm_engine_gap_ms") for r in ok),
           "first_token_hops_ms": stats.summary(r.get("first_token_hops_ms") for r in ok),
           "cpu_ms": {name: stats.summary(r["stack_cpu_ms"].get(name) for r in ok)
                      for name in ("gateway", "vad", "llm", "tts")},
           "direct_cpu_ms": stats.summary(r["direct"]["cpu_ms"] for r in ok),
           "cpu_overhead_ms": stats.summary(r.get("cpu_overhead_ms") for r in ok)}
    p50, ttfa = out["overhead_ms"]["p50"], out["ttfa_ms"]["p50"]
    out["overhead_ratio_p50"] = round(p50 / ttfa, 4) if p50 is not None and ttfa else None
    out["overhead_met"] = (p50 is not None and p50 <= TARGET_OVERHEAD_MS
                           and out["overhead_ratio_p50"] <= TARGET_OVERHEAD_RATIO)
    out["replies"] = sorted({r["stack"]["reply"][:60] for r in ok})[:3]
    out["pairs_direct_first"] = sum(r.get("direct_first", False) for r in ok)
    out["same_reply_both_paths"] = all(r["stack"]["reply"] == r["direct"]["reply"] for r in ok)
    return out


def _direct_turn(direct: DirectPath, case: Case, turn):
    """The stack turn's request on the direct path, with the microphone tail the stack's VAD heard."""
    if case.source == "text":
        return direct.first_audio(direct.request(text=case.text))
    return direct.first_audio(direct.request(audio_wav=turn.llm_audio_wav, jpegs=case.jpegs[:turn.images]),
                              turn.mic_tail_ms)


def run_cases(stack, direct: DirectPath, cases: list[Case], turns: int, bar: tqdm, timeout: float) -> dict:
    """Warm-up (one unrecorded turn of each case), then per case `turns` pairs of stack turn + direct turn.

    The order within a pair alternates (stack first, then direct first), so whatever one path leaves behind
    for the next turn (a session closing, caches) does not always fall on the same path. A direct turn that
    goes first takes the inputs the stack cut from the same fixture on its previous turn; the pair's replies
    are compared (`same_reply_both_paths`), so a different cut would show."""
    preroll = float(stack.env.get("SOTTO_PREROLL_MS", 300))
    pids = procs.children(stack.proc.pid)
    out = {}
    for case in cases:
        bar.set_description(f"{case.name} warm-up")
        previous = asyncio.run(run_turn(stack.ws_url, case, timeout, preroll))
        if not _usable(previous):
            previous = None
        else:
            _direct_turn(direct, case, previous)
        bar.update(1)
        rows = []
        for i in range(turns):
            early = None
            if i % 2 and previous is not None:
                bar.set_description(f"{case.name} direct")
                early = _direct_turn(direct, case, previous)
            bar.set_description(f"{case.name} stack")
            before, tts_before, tts_queued_before = (procs.snapshot(pids), _tts_first_chunk_s(stack),
                                                     _tts_first_chunk_queued_s(stack))
            turn = asyncio.run(run_turn(stack.ws_url, case, timeout, preroll))
            cpu = procs.delta(before, procs.snapshot(pids))
            tts_ms = (_tts_first_chunk_s(stack) - tts_before) * 1000
            tts_queued_ms = (_tts_first_chunk_queued_s(stack) - tts_queued_before) * 1000
            if _usable(turn):
                bar.set_description(f"{case.name} direct")
                rows.append(_paired(turn, cpu, tts_ms, tts_queued_ms, early or _direct_turn(direct, case, turn)))
                rows[-1]["direct_first"] = early is not None
                previous = turn
            else:
                rows.append({"stack": {**asdict(turn), "llm_audio_wav": None}, "direct": None})
            bar.update(1)
        out[case.name] = {"rows": rows, "summary": summarize_case(case, rows),
                          "load_average": stats.load_average()}
    return out


def _usable(turn) -> bool:
    return turn.outcome in ("stop", "length", "degraded") and turn.client_stage_ms is not None


def run(turns: int = 8, levels: tuple[int, ...] = (1, 2, 4, 8), load_turns: int = 2, load_bound_s: float = 60.0,
        out_dir: Path = Path("bench/results"), timeout: float = 60.0, components_on: bool = True,
        spoken_on: bool = True, case_names: tuple[str, ...] = (), quick_components: bool = False,
        keep_work: bool = False) -> dict:
    """`keep_work`: keep the fixtures and the stacks' logs (named in the result as `work_dir`); they are kept
    anyway when the run fails."""
    began = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out_dir.mkdir(parents=True, exist_ok=True)
    result: dict = {"started_at": stamp, "machine": stats.machine(), "commit": stats.commit(),
                    "command": "python -m tools.bench run " + f"--turns {turns} --levels {','.join(map(str, levels))}",
                    "config": {"turns_per_case": turns, "levels": list(levels), "load_turns_per_session": load_turns,
                               "load_bound_s": load_bound_s, "stack_env": LOAD_ENV, "top_k": 1, "llm_threads": 1,
                               "max_new_tokens": MAX_NEW_TOKENS, "spoken_max_new_tokens": SPOKEN_MAX_NEW_TOKENS,
                               "targets": {"overhead_ms_p50": TARGET_OVERHEAD_MS,
                                           "overhead_ratio_p50": TARGET_OVERHEAD_RATIO}}}
    work = Path(tempfile.mkdtemp(prefix="sotto-bench-"))
    try:
        cases = [c for c in spoken_cases(work) if not case_names or c.name in case_names] if spoken_on else []
        steps = (len(cases) + 1) * (turns + 1) + len(levels) + (4 if components_on else 0)
        env_common = {"SOTTO_LLM_TOP_K": "1", "SOTTO_LLM_THREADS": "1"}
        engine_rows: dict[str, list[dict]] = {}
        tts_engine = voice = None
        # tqdm writes to a copy of the original stderr: the LLM engine puts a line-reading tap on fd 2, and tqdm's
        # carriage-return updates (no newline) would hold back the tap's sync markers, stalling each generation
        # by up to 0.5 s in this process (services/llm/native_log.py).
        progress = os.fdopen(os.dup(2), "w", buffering=1)
        with progress, tqdm(total=steps, unit="step", dynamic_ncols=True, file=progress) as bar:
            if cases:
                bar.set_description("starting the multimodal stack")
                (work / "mm").mkdir()
                stack = start_stack(work / "mm", **env_common,
                                    SOTTO_LLM_MAX_NEW_TOKENS=str(SPOKEN_MAX_NEW_TOKENS))
                try:
                    direct = DirectPath(stack.env, str(TINY_LLM))
                    result["config"]["spoken_model"] = TINY_LLM.name
                    result["cases"] = run_cases(stack, direct, cases, turns, bar, timeout)
                    engine_rows[str(TINY_LLM)] = _engine_rows(result["cases"])
                    direct.close()
                finally:
                    stop_stack(stack)
            bar.set_description("starting the text stack")
            (work / "text").mkdir()
            model = instruct_model()
            stack = start_stack(work / "text", SOTTO_LLM_MODEL=str(model), **env_common, **LOAD_ENV,
                                SOTTO_LLM_MAX_NEW_TOKENS=str(MAX_NEW_TOKENS))
            try:
                direct = DirectPath(stack.env, str(model))
                result["config"]["typed_model"] = model.name
                result.setdefault("cases", {}).update(run_cases(stack, direct, [typed_case()], turns, bar, timeout))
                engine_rows[str(model)] = _engine_rows({"typed": result["cases"]["typed"]})
                tts_engine, voice = direct.tts, direct.voice
                bar.set_description("service legs")
                result["legs"] = legs.measure(stack.ports, direct)
                direct.close()
                limit = int(stack.env.get("SOTTO_LLM_MAX_CONCURRENT", 2))
                bar.set_description("load")
                load_case = Case("load", "text", LOAD_QUESTION)
                rows = asyncio.run(run_levels(stack.ws_url, load_case, list(levels), load_turns, load_bound_s,
                                              timeout, bar))
                result["load"] = {"admission_limit": limit, "question": LOAD_QUESTION, "levels": rows}
            finally:
                stop_stack(stack)
            png = out_dir / f"{stamp}-load.png"
            plot(result["load"]["levels"], png, result["load"]["admission_limit"])
            result["load"]["plot"] = str(png)
            if components_on:
                result["components"] = run_components(engine_rows, tts_engine, voice, bar, quick_components)
        result["overhead"] = overall_overhead(result["cases"])
    except BaseException:
        print(f"\nthe stacks' logs are kept in {work}", file=sys.stderr)
        raise
    if keep_work:
        result["work_dir"] = str(work)
    else:
        shutil.rmtree(work)
    result["machine"]["load_average_end"] = stats.load_average()
    result["wall_s"] = round(time.monotonic() - began, 1)
    path = out_dir / f"{stamp}.json"
    path.write_text(json.dumps(result, indent=1))
    result["path"] = str(path)
    print_run(result)
    return result


def _engine_rows(cases: dict) -> list[dict]:
    return [r["direct"] for c in cases.values() for r in c["rows"] if r.get("direct")
            and r["direct"]["first_token_ms"] is not None]


def run_components(engine_rows: dict[str, list[dict]], tts_engine, voice: str, bar: tqdm,
                   quick: bool = False) -> dict:
    """`quick`: small sizes, for the bench's own test."""
    out = {"load_average_start": stats.load_average()}
    bar.set_description("components: vad")
    out["vad"] = components.vad(calls=200, streams=2, seconds=1.0) if quick else components.vad()
    bar.update(1)
    bar.set_description("components: llm")
    tokens = 16 if quick else 64
    out["llm"] = [components.llm(path, 1, tokens, tokens, engine_rows=rows) for path, rows in engine_rows.items()]
    # Like for like: the llm service, the same engine in process and litert_lm.Benchmark, interleaved rounds.
    out["llm_service"] = llm_bench.run(instruct_model(), 1, turns=1 if quick else 8, decode=tokens,
                                       cancels=1 if quick else 4)
    bar.update(1)
    bar.set_description("components: tts")
    out["tts"] = components.tts(tts_engine, voice, *((1, ("short",)) if quick else ()))
    bar.update(1)
    bar.set_description("components: grpc")
    out["grpc"] = components.grpc_cost(200 if quick else 2000)
    bar.update(1)
    out["load_average_end"] = stats.load_average()
    return out


def overall_overhead(cases: dict) -> dict:
    """Per-turn overhead over the product's own clients, with each case's own verdict beside it."""
    per_case = {name: {k: c["summary"][k] for k in ("overhead_ms", "overhead_p50_ci95_ms", "overhead_ratio_p50",
                                                     "overhead_met")}
                for name, c in cases.items()}
    return overhead_by_client(cases) | {"per_case": per_case}
