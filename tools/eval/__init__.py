"""Quality evaluations: `python -m tools.eval.hearing` (speech recognition, the round trip through each voice, the
spoken cascade's latency). Results are saved under bench/results/ and summarised in docs/performance.md."""
