"""Does the text so far end a turn? The words' half of the end-of-turn decision, beside silence and the audio turn
model (the vad service's smart-turn).

Read speech pauses at commas and before clauses; the audio model, hearing a falling pitch there, calls such a pause
complete and the user is cut mid-sentence. The words settle many of these cases: a phrase that stops on a
conjunction, a preposition, an article, a possessive or an auxiliary cannot be the end of what was meant ("I went to
the", "and then, um"), while one that ends in sentence punctuation on a content word can. This is the idea of
LiveKit's text turn detector (a language model over the transcript) reduced to the closed word classes where it is
nearly always right, so it costs microseconds and needs no model; where the words say neither, the audio model's
verdict stands.
"""

from __future__ import annotations

import re
from enum import Enum


class WordVerdict(Enum):
    COMPLETE = "complete"      # ends a sentence on a word that can end one
    INCOMPLETE = "incomplete"  # stops where no sentence ends: hold the turn open
    UNSURE = "unsure"          # the words do not say: the audio model decides


# Closed classes that do not end an English sentence (a final "to" in "what are you up to?" does, hence the question
# mark exception below). Fillers are here too: "so, um" is the user thinking, not done.
_CONJUNCTIONS = {"and", "but", "or", "nor", "so", "because", "although", "though", "while", "whereas", "if",
                 "unless", "until", "when", "whenever", "where", "whether", "than", "that", "which", "who", "whose",
                 "since", "as", "then", "also", "plus"}
_PREPOSITIONS = {"of", "to", "in", "on", "at", "for", "with", "about", "from", "by", "into", "onto", "over", "under",
                 "between", "through", "during", "without", "within", "after", "before", "like", "near", "across",
                 "toward", "towards", "against", "among", "around", "behind", "beside", "besides", "per", "via", "up",
                 "off", "out", "down", "back", "away", "along", "across"}
_DETERMINERS = {"the", "a", "an", "my", "your", "his", "her", "its", "our", "their", "this", "these", "those",
                "some", "any", "each", "every", "no", "another", "which", "what's"}
_AUXILIARIES = {"is", "are", "was", "were", "am", "be", "been", "being", "have", "has", "had", "i'm", "it's",
                "let's", "you're", "we're", "they're", "there's"}
_FILLERS = {"um", "uh", "erm", "er", "hmm", "mm", "like", "actually", "basically"}
# Prepositions that also end phrasal verbs ("logged in", "turn it off", "what is it about?"): final after sentence
# punctuation, the words do not say, and the audio model decides.
_PARTICLES = {"in", "on", "off", "up", "out", "over", "down", "back", "around", "by", "through", "about", "away",
              "along", "after", "before", "behind", "near", "under", "across", "like"}
NOT_FINAL = _CONJUNCTIONS | _PREPOSITIONS | _DETERMINERS | _AUXILIARIES | _FILLERS

_WORD = re.compile(r"[a-z']+")
_TRAILING_OFF = ("...", "…", ",", ";", ":", "-", "—")


def verdict(text: str) -> WordVerdict:
    """The words' verdict on an utterance's transcript (as the recogniser wrote it, punctuation included)."""
    stripped = text.strip()
    words = _WORD.findall(stripped.lower())
    if not words:
        return WordVerdict.UNSURE
    if stripped.endswith(_TRAILING_OFF):
        return WordVerdict.INCOMPLETE
    last = words[-1]
    if stripped.endswith("?") and (last in _PREPOSITIONS or last in _AUXILIARIES):
        return WordVerdict.COMPLETE  # "what is it made of?", "can you tell me what a rainbow is?"
    if stripped.endswith((".", "!")) and (last in _PARTICLES or last in _AUXILIARIES):
        return WordVerdict.UNSURE  # "… logged in." and "… than he was." may end a sentence
    if last in NOT_FINAL:
        return WordVerdict.INCOMPLETE
    if stripped.endswith((".", "?", "!")):
        return WordVerdict.COMPLETE
    return WordVerdict.UNSURE
