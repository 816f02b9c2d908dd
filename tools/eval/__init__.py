"""Quality evaluations. On human speech (recordings fetched by Debian package name, tools.eval.human_speech):
`python -m tools.eval.human` (word error rate, end of turn, spoken time to first audio). On a question set:
`python -m tools.eval.answers` (each LLM's accuracy beside its speed). On generated inputs where no recording covers
the case: `python -m tools.eval.hearing` (the round trip through each voice) and `python -m tools.eval.turns` (the
semantic end of turn on synthetic hesitations). Results are saved under bench/results/ and summarised in
docs/performance.md."""
