"""The llm service's own metrics (docs/metrics.md is their contract) and what a finished reply records in them."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from services.common.metrics import LATENCY_BUCKETS
from services.llm.generation import Finished

# Time per output token: from a small model on a GPU to a large one on a slow CPU.
TOKEN_BUCKETS = (0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5)
# Milliseconds where it matters: a barge-in must free the engine for the next turn within about 100 ms.
CANCEL_BUCKETS = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2, 5)

QUEUE_DEPTH = Gauge("sotto_llm_queue_depth", "Admitted requests waiting for the engine.")
ACTIVE = Gauge("sotto_llm_active_requests", "Requests holding the engine (generating, or winding down a cancel).")
TTFT_SECONDS = Histogram(
    "sotto_llm_time_to_first_token_seconds", "Time from admission to the first streamed text.",
    buckets=LATENCY_BUCKETS,
)
TOKEN_SECONDS = Histogram(
    "sotto_llm_time_per_output_token_seconds", "Decode time per token, one observation per reply.",
    buckets=TOKEN_BUCKETS,
)
PREFILL_TOKENS = Counter("sotto_llm_prefill_tokens_total", "Prompt tokens prefilled, cancelled generations included.")
DECODE_TOKENS = Counter("sotto_llm_decode_tokens_total", "Tokens decoded, cancelled generations included.")
FINISHED = Counter("sotto_llm_finished_total", "Replies sent to the end, by finish reason.", ["reason"])
CANCELLED = Counter("sotto_llm_cancelled_total", "Requests the caller cancelled, by phase.", ["phase"])
CANCEL_SECONDS = Histogram("sotto_llm_cancel_seconds", "Cancel (call gone) to engine free, per cancelled generation.",
                           buckets=CANCEL_BUCKETS)
DEGRADED_ROUTED = Counter("sotto_llm_fallback_requests_total",
                          "Requests sent to SOTTO_LLM_FALLBACK_MODEL because their session degraded before.")
REFUSED = Counter("sotto_llm_refused_total", "Requests refused before generation, by cause.", ["cause"])
# Known label values start at 0, so rate() and increase() work before the first event.
for _reason in ("stop", "length", "degraded"):
    FINISHED.labels(_reason)
for _phase in ("queued", "prefill", "decode"):
    CANCELLED.labels(_phase)
for _cause in ("busy", "invalid"):
    REFUSED.labels(_cause)


def count_tokens(finished: Finished) -> None:
    PREFILL_TOKENS.inc(finished.prefill_tokens)
    DECODE_TOKENS.inc(finished.decode_tokens)


def observe_reply(finished: Finished) -> None:
    """A reply sent to the end: its finish reason, latencies and tokens."""
    FINISHED.labels(finished.finish_reason.value).inc()
    if finished.time_to_first_token_s is not None:
        TTFT_SECONDS.observe(finished.time_to_first_token_s)
    if finished.decode_tokens_per_s > 0:
        TOKEN_SECONDS.observe(1 / finished.decode_tokens_per_s)
    count_tokens(finished)
