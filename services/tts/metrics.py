"""The tts service's own metrics (docs/metrics.md is their contract)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

from services.common.metrics import LATENCY_BUCKETS

FIRST_CHUNK_SECONDS = Histogram(
    "sotto_tts_first_chunk_seconds", "From request (or first complete sentence) to the first audio chunk.",
    ["method"], buckets=LATENCY_BUCKETS)
ACTIVE_STREAMS = Gauge("sotto_tts_active_streams", "Synthesis calls open now (text received, audio not all sent).")
AUDIO_SECONDS = Counter("sotto_tts_audio_seconds_total", "Seconds of audio synthesised and sent.")
