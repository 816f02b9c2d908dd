"""Human speech stopped mid-sentence: a held-out check of the end-of-turn rules.

tools.eval.word_turns plays every 4th complete Asterisk prompt (`--stride 4`) and every prompt that trails off; the
rules in services/gateway/conversation/word_turn.py were written while reading that set's misses. The complete
prompts it skips were never looked at: each one of at least `MIN_WORDS` words is cut here after its middle word, at
the end of that word as Whisper's word timestamps place it (the offline kit's tiny.en, 40 ms of margin, never into
the next word), and labelled incomplete. This is LiveKit's way of making unfinished turns for its text turn detector
(a finished sentence cut short), on real voices. Its ending is abrupt (no trailing-off pitch), so it is not the same
thing as the prompts that trail off; it is a fresh sample of "the user stopped in mid-sentence".
"""

from __future__ import annotations

from dataclasses import replace

from tools.eval.human_speech import COMPLETE, INCOMPLETE, NAMED, SAMPLE_RATE, Clip, timed_words, word_end

MIN_WORDS = 6


def held_out(clips: list[Clip], played: set[str]) -> list[Clip]:
    """Complete Asterisk prompts that the evaluation did not play, long enough to stop in the middle of."""
    return [c for c in clips if c.id.startswith("asterisk/") and c.label == COMPLETE and c.id not in played
            and not c.id.removeprefix("asterisk/").startswith(NAMED) and len(c.transcript.split()) >= MIN_WORDS]


def stopped_midway(clips: list[Clip], limit: int) -> list[Clip]:
    """Up to `limit` of `clips`, each cut after its middle word (clips Whisper finds too few words in are skipped)."""
    out = []
    for clip in clips:
        if len(out) >= limit:
            break
        words = timed_words(clip)
        if len(words) < MIN_WORDS:
            continue
        k = len(words) // 2 - 1  # the last word kept
        said = " ".join(w.word.strip() for w in words[: k + 1])
        out.append(replace(clip, id=f"{clip.id}#to-word-{k + 1}",
                           audio=clip.audio[: int(word_end(words, k) * SAMPLE_RATE)], transcript=said,
                           label=INCOMPLETE))
    return out
