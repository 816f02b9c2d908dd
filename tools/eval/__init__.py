"""Quality evaluations on generated inputs: `python -m tools.eval.hearing` (speech recognition, the round trip
through each voice, the spoken cascade's latency) and `python -m tools.eval.turns` (the semantic end of turn against
silence alone). Results are saved under bench/results/ and summarised in docs/performance.md."""
