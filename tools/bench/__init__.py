"""Sotto's benchmark: time to first audio through the real stack, the pipeline's own cost against the same
engines called in one process, behaviour under concurrent sessions, and the cost of each component.

    python -m tools.bench run [--turns N] [--out bench/results]
    python -m tools.bench compare A.json B.json
    python -m tools.bench load [--levels 1,2,4,8]

See docs/performance.md for what each figure means and the figures measured so far.
"""
