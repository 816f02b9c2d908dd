"""Soak: synthetic sessions on the real stack for SOTTO_SOAK_SECONDS, with typed and spoken turns, barge-in
interrupts, clean reconnects and sessions dropped mid-turn.

The default is a short soak that fits `make test`; `make soak` runs the full length (SOAK_SECONDS there) and only
this test.

Every few seconds the RSS and open file descriptors of the runner and of each service are sampled (pids from the
run dir's runner.json). Asserted: every turn ends with `turn.done` (after an `error` or `busy` when it failed) --
none is lost; no service restarted; after the warm-up, each process grows by less than RSS_BOUND (15 % of its
warm RSS or 50 MB, whichever is larger) and FD_BOUND file descriptors. The report goes to stdout and to
soak-report.json in $SOTTO_TEST_ARTIFACTS (or the stack's run dir).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import statistics
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from services.gateway.client import GatewayClient
from tests.e2e.test_turns import camera_jpeg
from tests.reliability.conftest import open_fds, pids, rss_kb
from tools.stack import RealStack

SOAK_S = float(os.environ.get("SOTTO_SOAK_SECONDS", "150"))
SAMPLE_EVERY_S = 5.0
WARMUP_FRACTION = 0.25       # of the run, at least WARMUP_MIN_S
WARMUP_MIN_S = 30.0
RSS_BOUND_FRACTION, RSS_BOUND_MB = 0.15, 50.0
FD_BOUND = 20
WORKERS = 2                  # the llm admits 2 concurrent requests by default
TURN_TIMEOUT_S = 90.0
PROMPTS = ["What is the capital of France?", "Tell me a short story about a cat.", "How are you today?",
           "Please count from one to ten.", "What should I cook for dinner tonight?"]
SPOKEN = ["What do you see in front of me?", "Hello there, how is the weather?", "Can you help me with this?"]


@dataclass
class Tally:
    turns: Counter = field(default_factory=Counter)      # action -> finished turns
    outcomes: Counter = field(default_factory=Counter)   # finish_reason -> count
    errors: Counter = field(default_factory=Counter)     # "code: message" of error events
    lost: list[str] = field(default_factory=list)
    sessions: int = 0


class Sampler(threading.Thread):
    def __init__(self, stack: RealStack) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.samples: list[tuple[float, dict[str, tuple[int, int, int]]]] = []  # t, name -> (pid, rss kB, fds)
        self.stop = threading.Event()
        self.t0 = time.monotonic()

    def sample(self) -> None:
        now = {}
        for name, pid in pids(self.stack).items():
            try:
                now[name] = (pid, rss_kb(pid), open_fds(pid))
            except (OSError, AssertionError):
                now[name] = (pid, -1, -1)
        self.samples.append((time.monotonic() - self.t0, now))

    def run(self) -> None:
        while not self.stop.is_set():
            self.sample()
            self.stop.wait(SAMPLE_EVERY_S)


async def one_turn(client: GatewayClient, action: str, rng: random.Random, speech: dict[str, bytes],
                   tally: Tally) -> bool:
    """Run one turn; returns False when the session was dropped on purpose (the caller reconnects)."""
    try:
        if action == "typed":
            record = await client.text_turn(rng.choice(PROMPTS), timeout=TURN_TIMEOUT_S)
        elif action == "spoken":
            # paced like a microphone: unpaced 20 ms frames would exceed the gateway's message rate limit
            record = await client.spoken_turn(speech[rng.choice(SPOKEN)], [camera_jpeg(rng.randrange(4))],
                                              realtime=True, timeout=TURN_TIMEOUT_S)
        elif action == "interrupt":
            await client.send(type="text", text=rng.choice(PROMPTS))
            sent = time.monotonic()
            start = await client.expect("turn.started", timeout=TURN_TIMEOUT_S)
            await asyncio.sleep(rng.uniform(0.0, 1.5))
            await client.send(type="interrupt", turn_id=start["turn_id"], played_samples=rng.randrange(0, 4096))
            record = await client.collect_turn(sent, TURN_TIMEOUT_S)
        else:  # "drop": close the socket in the middle of a turn
            await client.send(type="text", text=rng.choice(PROMPTS))
            await client.expect("turn.started", timeout=TURN_TIMEOUT_S)
            await asyncio.sleep(rng.uniform(0.0, 1.0))
            tally.turns["drop"] += 1
            return False
    except (asyncio.TimeoutError, ConnectionError) as exc:
        tally.lost.append(f"{action}: {type(exc).__name__} {exc}")
        return False
    done = record.done
    types = [e["type"] for e in record.events]
    if done["finish_reason"] in ("error", "busy"):
        assert "error" in types or "busy" in types, f"a failed turn without an error/busy event: {types}"
    for e in record.events:
        if e["type"] == "error":
            tally.errors[f"{e['code']}: {e['message'][:60]}"] += 1
    tally.turns[action] += 1
    tally.outcomes[done["finish_reason"]] += 1
    return True


async def worker(stack: RealStack, seed: int, deadline: float, speech: dict[str, bytes], tally: Tally) -> None:
    rng = random.Random(seed)
    while time.monotonic() < deadline:
        tally.sessions += 1
        async with GatewayClient(stack.ws_url) as client:
            for _ in range(rng.randint(1, 6)):  # then a clean reconnect
                if time.monotonic() >= deadline:
                    break
                action = rng.choices(["typed", "spoken", "interrupt", "drop"], [5, 3, 2, 1])[0]
                if not await one_turn(client, action, rng, speech, tally):
                    break


def growth_report(samples: list, warm_at: float) -> dict[str, dict]:
    """Per process: warm value (median of the first three samples after warm-up), end value (median of the last
    three), growth."""
    warm = [s for t, s in samples if t >= warm_at]
    assert len(warm) >= 4, f"too few samples after the warm-up ({len(warm)}); run longer"
    report = {}
    for name in warm[0]:
        rss = [s[name][1] for s in warm if name in s]
        fds = [s[name][2] for s in warm if name in s]
        w_rss, e_rss = statistics.median(rss[:3]), statistics.median(rss[-3:])
        w_fds, e_fds = statistics.median(fds[:3]), statistics.median(fds[-3:])
        report[name] = {"rss_warm_mb": round(w_rss / 1024, 1), "rss_end_mb": round(e_rss / 1024, 1),
                        "rss_max_mb": round(max(rss) / 1024, 1), "rss_growth_mb": round((e_rss - w_rss) / 1024, 1),
                        "fds_warm": w_fds, "fds_end": e_fds, "fds_max": max(fds), "fds_growth": e_fds - w_fds,
                        "rss_series_mb": [round(r / 1024, 1) for r in rss[::max(1, len(rss) // 20)]],
                        "pids": sorted({s[name][0] for s in warm if name in s})}
    return report


@pytest.mark.slow
@pytest.mark.timeout(int(SOAK_S) + 900)
async def test_soak(stack: RealStack, utterance) -> None:
    speech = {text: utterance(text) for text in SPOKEN}
    start_pids = pids(stack)
    sampler = Sampler(stack)
    sampler.start()
    tally = Tally()
    deadline = time.monotonic() + SOAK_S
    try:
        await asyncio.gather(*(worker(stack, seed, deadline, speech, tally) for seed in range(WORKERS)))
    finally:
        sampler.stop.set()
        sampler.join(10)
        sampler.sample()
    warm_at = max(WARMUP_MIN_S, WARMUP_FRACTION * SOAK_S)
    report = growth_report(sampler.samples, warm_at)
    summary = {"seconds": SOAK_S, "warmup_s": warm_at, "sessions": tally.sessions, "turns": dict(tally.turns),
               "outcomes": dict(tally.outcomes), "errors": dict(tally.errors), "lost": tally.lost, "processes": report,
               "samples": len(sampler.samples)}
    folder = Path(os.environ.get("SOTTO_TEST_ARTIFACTS") or stack.run_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "soak-report.json").write_text(json.dumps(summary, indent=1))
    print("\nsoak:", json.dumps({k: v for k, v in summary.items() if k != "processes"}))
    for name, r in report.items():
        print(f"  {name:<8} RSS {r['rss_warm_mb']:>7.1f} -> {r['rss_end_mb']:>7.1f} MB ({r['rss_growth_mb']:+.1f}, "
              f"max {r['rss_max_mb']:.1f})  fds {r['fds_warm']:.0f} -> {r['fds_end']:.0f} (max {r['fds_max']})")

    assert not tally.lost, f"turns without turn.done: {tally.lost}"
    assert sum(tally.turns.values()) >= max(4, SOAK_S / 60), tally  # the soak really ran turns
    assert pids(stack) == start_pids, "a process was restarted during the soak"
    for name, r in report.items():
        bound_mb = max(RSS_BOUND_MB, RSS_BOUND_FRACTION * r["rss_warm_mb"])
        assert r["rss_growth_mb"] < bound_mb, f"{name} RSS grew {r['rss_growth_mb']} MB (bound {bound_mb:.0f})"
        assert r["fds_growth"] < FD_BOUND, f"{name} open fds grew by {r['fds_growth']} (bound {FD_BOUND})"
