"""Printing a run: TTFA per case, its stage budget, the stack's overhead over the direct path, the load table
and the components."""

from __future__ import annotations

from tools.bench import llm_engine


def fmt(s: dict | None, q: str = "p50") -> str:
    value = None if s is None else s.get(q)
    return "-" if value is None else f"{value:.1f}"


def fmt_ci(interval: list[float] | None) -> str:
    return "-" if not interval else f"{interval[0]:.0f}..{interval[1]:.0f}"


def _ratio(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.1f} %"


def _both(s: dict | None) -> str:
    return f"{fmt(s)} / {fmt(s, 'p95')}"


def print_cases(cases: dict, config: dict) -> None:
    print(f"\nengines: spoken {config.get('spoken_model', '-')} + {config.get('spoken_tts', '-')}; typed "
          f"{config.get('typed_model', '-')} + {config.get('typed_tts', '-')}")
    print("Time to first audio per case, ms at the client, its stage budget, and the longest silence a listener "
          "hears once playback started (per turn): p50 / p95")
    columns = (("TTFA", None), ("endpoint", "endpoint"), ("llm 1st token", "llm_first_token"),
               ("1st unit", "first_sentence"), ("tts 1st chunk", "tts_first_chunk"),
               ("to client", "gateway_to_client"))
    print(f"{'case':<20}{'ok':>3}" + "".join(f"{title:>16}" for title, _ in columns) + f"{'longest gap':>16}")
    for name, c in cases.items():
        s = c["summary"]
        figures = [s["ttfa_ms"] if key is None else s["budget_ms"][key] for _, key in columns]
        print(f"{name:<20}{s['ok']:>3}" + "".join(f"{_both(f):>16}" for f in figures)
              + f"{_both(s.get('longest_gap_ms')):>16}")
    print("\nOverhead = stack (turn start -> first audio at the client) - direct path (same engines in process), ms")
    print(f"{'case':<20}{'direct p50':>11}{'ovh p50':>9}{'95% CI':>10}{'ovh p95':>9}{'same reply':>12}")
    for name, c in cases.items():
        s = c["summary"]
        print(f"{name:<20}{fmt(s['direct_ms']['first_audio']):>11}{fmt(s['overhead_ms']):>9}"
              f"{fmt_ci(s['overhead_p50_ci95_ms']):>10}{fmt(s['overhead_ms'], 'p95'):>9}"
              f"{'yes' if s['same_reply_both_paths'] else 'NO':>12}")


def print_overhead(o: dict) -> None:
    print(f"all turns of the page and typed clients ({', '.join(o['cases'])}): overhead p50 "
          f"{fmt(o['all_turns_ms'])} ms (95 % CI {fmt_ci(o['all_turns_p50_ci95_ms'])}), "
          f"{_ratio(o['ratio_p50'])} of TTFA; target <= 10 ms and <= 5 %: {o['verdict']}")
    raw = o.get("raw_client")
    if raw:
        print(f"a client without its own VAD ({', '.join(raw['cases'])}; it streams while the answer is "
              f"prepared): overhead p50 {fmt(raw['all_turns_ms'])} ms (95 % CI "
              f"{fmt_ci(raw['all_turns_p50_ci95_ms'])}), {_ratio(raw['ratio_p50'])} of TTFA")


def print_load(load: dict) -> None:
    print(f"\nLoad (typed turns; LLM admission limit {load['admission_limit']}), client TTFA ms")
    print(f"{'sessions':>8}{'turns':>7}{'ok':>5}{'busy':>6}{'errors':>8}{'timeouts':>10}{'dropped':>9}"
          f"{'http 429/503':>13}{'p50':>9}{'p95':>9}{'load avg':>10}")
    for row in load["levels"]:
        t = row["ttfa_ms"]
        print(f"{row['level']:>8}{row['turns']:>7}{row['ok']:>5}{row['busy']:>6}{row['errors']:>8}"
              f"{row['timeouts']:>10}{row['dropped']:>9}{row['refused_http']:>13}{fmt(t):>9}{fmt(t, 'p95'):>9}"
              f"{row['load_average'][0]:>10.2f}")
    print(f"plot: {load['plot']}")


def print_components(comp: dict) -> None:
    v = comp["vad"]
    print(f"\nVAD: {v['model_ms_per_window']:.3f} ms CPU per {v['window_ms']:.0f} ms window (batch 8: "
          f"{v['model_batch8_ms_per_window']:.3f}; through VadStream: {v['stream_ms_per_window']:.3f}), "
          f"{v['realtime_streams_per_core']} real-time streams per core")
    for tts in (comp["tts"], comp.get("tts_kokoro")):
        for name, row in (tts or {}).get("answers", {}).items():
            print(f"TTS {tts['engine']} {name}: first chunk {row['first_chunk_s'] * 1000:.0f} ms, RTF {row['rtf']:.2f} "
                  f"(CPU RTF {row['cpu_rtf']:.2f})")
    print(f"TTS mlx: {comp['tts']['mlx']}")


def print_run(r: dict) -> None:
    m = r["machine"]
    print(f"\nSotto bench {r['started_at']}, commit {r.get('commit')}: {m['cpu']}, {m['cores']} cores, load average "
          f"{' '.join(map(str, m['load_average']))} (start) / {' '.join(map(str, m['load_average_end']))} (end)")
    if r.get("headline"):
        from tools.bench.conversation import print_headline
        print_headline(r["headline"])
        print("\nPLUMBING (bench-only settings and stand-in models, never a headline):")
    print_cases(r["cases"], r["config"])
    print_overhead(r["overhead"])
    llm_engine.print_result(r["llm_service"])
    print_load(r["load"])
    if r.get("components"):
        print_components(r["components"])
    print(f"\nwall time {r['wall_s']:.0f} s; saved {r['path']}")
    if r.get("work_dir"):
        print(f"fixtures and the stacks' logs: {r['work_dir']}")
