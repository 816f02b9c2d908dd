"""Summing up and printing `make bench-peers`: each side's time to first audio and milestones, the ratio Sotto /
Pipecat with its paired bootstrap interval, and the component floor."""

from __future__ import annotations

from collections import defaultdict

from tools.bench import stats

SIDES = ("sotto", "pipecat")
# Milestones both sides report, in ms after the end of speech (see peers.sotto_turn and peers_pipecat.Stamps).
MILESTONES = ("turn_end", "transcript", "llm_first_token", "first_audio")
FLOOR_PARTS = ("endpoint_ms", "asr_ms", "llm_first_token_ms", "first_unit_ms", "tts_first_chunk_ms", "floor_ms")


def usable(row: dict) -> bool:
    """An answered turn whose first audio came after the end of speech (one before it answered a pause)."""
    return row.get("outcome") == "ok" and row.get("ttfa_ms") is not None and row["ttfa_ms"] > 0


def pairs(rows: list[dict]) -> list[tuple[float, float]]:
    """(Sotto TTFA, Pipecat TTFA) of each clip's back-to-back pair where both sides answered."""
    by_pair: dict[int, dict[str, dict]] = defaultdict(dict)
    for row in rows:
        by_pair[row["pair"]][row["side"]] = row
    return [(p["sotto"]["ttfa_ms"], p["pipecat"]["ttfa_ms"]) for _, p in sorted(by_pair.items())
            if all(side in p and usable(p[side]) for side in SIDES)]


def verdict(ratio: float | None, interval: list[float] | None, target: float) -> str:
    if ratio is None:
        return "no pairs"
    if ratio > target:
        return "NOT met"
    if interval is not None and interval[1] <= target:
        return "met"
    return "met at the p50, but its interval reaches past the target"


def side_summary(rows: list[dict]) -> dict:
    ok = [r for r in rows if usable(r)]
    return {"turns": len(rows), "ok": len(ok),
            "early": sum(1 for r in rows if r.get("ttfa_ms") is not None and r["ttfa_ms"] <= 0),
            "failed": sorted({f"{r['outcome']}: {r.get('error', '')}"[:120] for r in rows if r["outcome"] != "ok"}),
            "ttfa_ms": stats.summary(r["ttfa_ms"] for r in ok),
            "ttfa_p50_ci95_ms": stats.median_ci(r["ttfa_ms"] for r in ok),
            "by_source": {src: stats.summary(r["ttfa_ms"] for r in ok if r["source"] == src)
                          for src in sorted({r["source"] for r in rows})},
            "milestones_ms": {m: stats.summary(r.get("ms", {}).get(m) for r in ok) for m in MILESTONES}}


def summarize(result: dict) -> dict:
    rows = result["turns"]
    out = {side: side_summary([r for r in rows if r["side"] == side]) for side in SIDES}
    paired = pairs(rows)
    target = result["config"]["target_ratio_p50"]
    ratio50, ci50 = stats.ratio_ci([s for s, _ in paired], [p for _, p in paired], 50)
    ratio95, ci95 = stats.ratio_ci([s for s, _ in paired], [p for _, p in paired], 95)
    loads = [r["load_1m"] for r in rows if "load_1m" in r]
    out["load_1m"] = stats.summary(loads) if loads else None
    out["ratio"] = {"pairs": len(paired), "p50": ratio50, "p50_ci95": ci50, "p95": ratio95, "p95_ci95": ci95,
                    "target_p50": target, "verdict": verdict(ratio50, ci50, target)}
    floor = result.get("floor", [])
    out["floor_ms"] = {part: stats.summary(r.get(part) for r in floor) for part in FLOOR_PARTS}
    floor_p50 = out["floor_ms"]["floor_ms"]["p50"]
    for side in SIDES:
        p50 = out[side]["ttfa_ms"]["p50"]
        out[side]["over_floor_p50_ms"] = None if None in (p50, floor_p50) else round(p50 - floor_p50, 1)
    return out


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _ci(interval: list[float] | None, digits: int = 2) -> str:
    return "-" if not interval else f"{interval[0]:.{digits}f}..{interval[1]:.{digits}f}"


def print_peers(r: dict) -> None:
    m, s = r["machine"], r["summary"]
    print(f"\nSotto vs Pipecat {r['started_at']}, commit {r.get('commit')}: {m['cpu']}, {m['cores']} cores, load "
          f"average {' '.join(map(str, m['load_average']))} (start) / "
          f"{' '.join(map(str, m.get('load_average_end', [])))} (end)")
    sotto, pipecat = r["config"]["sotto"], r["config"]["pipecat"]
    print(f"Sotto: {sotto['client']}; vad {sotto['vad']}; asr {sotto['asr']}; llm {sotto['llm_model']} "
          f"(threads {sotto['llm_threads']}, max {sotto['max_new_tokens']} tokens); tts {sotto['tts']}")
    print(f"Pipecat {pipecat['pipecat_ai']}: vad {pipecat['vad']}; turn {pipecat['turn']}; interruptions "
          f"{pipecat['interruptions']}; stt {pipecat['stt']}; llm {pipecat['llm']}; tts {pipecat['tts']}")
    if r["config"].get("not_product_defaults"):
        print("NOT Sotto's product defaults: " + ", ".join(f"{k}={v}" for k, v in
                                                         r["config"]["not_product_defaults"].items()))
    if s.get("load_1m"):
        print(f"1-minute load average during the turns: p50 {s['load_1m']['p50']}, max {s['load_1m']['max']}")
    print(f"{len(r['clips'])} clips ({', '.join(c['name'] for c in r['clips'])}), {r['config']['rounds']} rounds, "
          "sides alternating pair by pair")
    print("\nTime to first audio, ms after the end of speech (p50 / p95), and when each milestone came (p50)")
    print(f"{'side':<9}{'ok':>8}{'TTFA p50':>10}{'95% CI':>14}{'p95':>7}" + "".join(f"{m:>17}" for m in MILESTONES)
          + f"{'over floor':>12}")
    for side in SIDES:
        x = s[side]
        print(f"{side:<9}{x['ok']:>4}/{x['turns']:<3}{_f(x['ttfa_ms']['p50']):>10}"
              f"{_ci(x['ttfa_p50_ci95_ms'], 0):>14}{_f(x['ttfa_ms']['p95']):>7}"
              + "".join(f"{_f(x['milestones_ms'][k]['p50']):>17}" for k in MILESTONES)
              + f"{_f(x['over_floor_p50_ms']):>12}")
        for src, summary in x["by_source"].items():
            print(f"  {src:<14}p50 {_f(summary['p50'])} / p95 {_f(summary['p95'])} ms (n = {summary['n']})")
        if x["early"] or x["failed"]:
            print(f"  answered before the end of speech: {x['early']}; failed: {'; '.join(x['failed']) or '-'}")
    q = s["ratio"]
    print(f"\nSotto / Pipecat over {q['pairs']} pairs: p50 {q['p50']} (95 % CI {_ci(q['p50_ci95'])}), "
          f"p95 {q['p95']} (95 % CI {_ci(q['p95_ci95'])}); target p50 <= {q['target_p50']}: {q['verdict']}")
    f = s["floor_ms"]
    print("Component floor (each engine alone, same models; p50 ms): endpoint " + _f(f["endpoint_ms"]["p50"])
          + " + asr " + _f(f["asr_ms"]["p50"]) + " + llm first token " + _f(f["llm_first_token_ms"]["p50"])
          + " + tts first chunk " + _f(f["tts_first_chunk_ms"]["p50"]) + " = " + _f(f["floor_ms"]["p50"])
          + f" (p95 {_f(f['floor_ms']['p95'])}); the rest of the first unit decodes in {_f(f['first_unit_ms']['p50'])}")
    print(f"\nwall time {r['wall_s']:.0f} s; saved {r['path']}")
    if r.get("work_dir"):
        print(f"clips and logs: {r['work_dir']}")
