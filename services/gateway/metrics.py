"""The gateway's Prometheus metrics (the contract is docs/metrics.md)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

MS_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 3, 4, 6, 8, 12)
TURN_BUCKETS = (0.25, 0.5, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)

SESSIONS = Gauge("sotto_gateway_sessions", "Open WebSocket sessions.")
TURNS = Counter("sotto_gateway_turns_total", "Finished turns by source and outcome.", ["source", "outcome"])
TTFA = Histogram("sotto_gateway_ttfa_seconds", "End of speech (or typed text received) to first audio chunk sent.",
                 ["source"], buckets=MS_BUCKETS)
STAGE = Histogram("sotto_gateway_stage_seconds", "Per-stage latency of a turn.", ["stage"], buckets=MS_BUCKETS)
TURN_SECONDS = Histogram("sotto_gateway_turn_seconds", "Whole turn, start to done.", buckets=TURN_BUCKETS)
ERRORS = Counter("sotto_gateway_errors_total", "Error events sent to clients, by code.", ["code"])
DROPPED = Counter("sotto_gateway_dropped_total", "Input dropped without an error event, by reason.", ["reason"])
BUSY = Counter("sotto_gateway_busy_total", "Turns refused because the llm service was busy.")
INTERRUPTIONS = Counter("sotto_gateway_interruptions_total", "Turns cut by barge-in, by trigger.", ["trigger"])
CANCELLED_CALLS = Counter("sotto_gateway_cancelled_calls_total", "gRPC calls the gateway cancelled, by service.",
                          ["service"])
OPENAI_REQUESTS = Counter("sotto_gateway_openai_requests_total",
                          "Requests to the OpenAI-compatible HTTP endpoints, by endpoint and HTTP status.",
                          ["endpoint", "status"])
