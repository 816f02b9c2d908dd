"""The asr service's own metrics (docs/metrics.md is their contract)."""

from __future__ import annotations

from prometheus_client import Gauge, Histogram

from services.common.metrics import LATENCY_BUCKETS

ACTIVE_STREAMS = Gauge("sotto_asr_active_streams", "Utterance streams open now.")
RECOGNITION_SECONDS = Histogram(
    "sotto_asr_recognition_seconds", "Recognition time by kind: a background partial run, the final words after "
    "`end` (what a turn waits for), a whole clip.", ["kind"], buckets=LATENCY_BUCKETS)
