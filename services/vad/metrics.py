"""The vad service's own metrics (docs/metrics.md is their contract)."""

from __future__ import annotations

from prometheus_client import Counter, Gauge, Histogram

ACTIVE_STREAMS = Gauge("sotto_vad_active_streams", "Audio streams being endpointed now.")
# End-of-turn decisions: a short silence plus a model call, up to the longest held silence.
ENDPOINT_BUCKETS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 0.75, 1, 1.5, 2, 3)
ENDPOINT_DECISION = Histogram(
    "sotto_vad_endpoint_decision_seconds",
    "End of speech to the end-of-turn decision (silence waited plus the turn model's time), by reason.",
    ["reason"], buckets=ENDPOINT_BUCKETS)
TURN_VERDICTS = Counter("sotto_vad_turn_verdicts_total",
                        "End-of-turn verdicts: complete (ended), incomplete (held open), timeout (held, then ended "
                        "by the long silence).", ["outcome"])
TURN_GUESSES = Counter("sotto_vad_turn_guesses_total",
                       "Turn verdicts taken as a pause began, beside the audio, by what they said while the pause "
                       "went on: complete (ends the turn at the early turn silence if the pause lasts), incomplete "
                       "(the model looks again at the turn silence), dropped (speech had resumed).", ["outcome"])
BARGE_INS_SUPPRESSED = Counter("sotto_vad_barge_ins_suppressed_total",
                               "Speech during an answer's playback that would have started a turn without the "
                               "barge-in gate (likely echo).")
