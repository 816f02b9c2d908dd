"""Sotto's benchmark: time to first audio through the real stack per case with its stage budget, the stack's
overhead over the same engines called in one process, behaviour under concurrent sessions, and the cost of
each component (VAD, TTS, the llm service beside its engine).

    python -m tools.bench run [--turns N] [--out bench/results]
    python -m tools.bench compare A.json B.json

See docs/performance.md for what each figure means and the latest figures.
"""
