"""Does the text so far end a turn? The words' half of the end-of-turn decision, beside silence and the audio turn
model (the vad service's smart-turn).

Read speech pauses at commas and before clauses; the audio model, hearing a falling pitch there, calls such a pause
complete and the user is cut mid-sentence. The words settle many of these cases: a phrase that stops on a
conjunction, a preposition, an article, a possessive or an auxiliary cannot be the end of what was meant ("I went to
the", "and then, um"), nor can a clause still waiting for its main clause or its complement ("To leave the
conference.", "There are currently."), while one that ends in sentence punctuation on a content word can. This is the
idea of LiveKit's text turn detector (a language model over the transcript) reduced to the closed word classes and
clause shapes where it is nearly always right, so it costs microseconds and needs no model (SmolLM2 through LiteRT-LM
needs 400-600 ms for the prefill alone on a 2-core CPU, docs/performance.md); where the words say neither, the audio
model's verdict stands.
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

# Unfinished clauses, the grammar beyond the last word:
# - a sentence opened by a subordinator or a purpose "to" with no main clause after it ("To leave the conference.",
#   "Because it rained."): Whisper writes a full stop after most pauses, so the stop does not make it complete;
# - an auxiliary or copula followed only by an adverb ("There are currently.", "The time will be exactly.");
# - a noun subject and its verb with nothing after ("The last caller was."), unless a wh-word or a comparison
#   earlier makes it an embedded or elliptical ending ("I know where the station is.", "than he was.").
_OPENERS = {"to", "if", "because", "although", "though", "unless", "whenever"}
_VERBS_BEFORE_ADVERB = _AUXILIARIES | {"will", "would", "shall", "should", "can", "could", "may", "might", "must",
                                       "do", "does", "did"}
_LY_ADJECTIVES = {"likely", "unlikely", "friendly", "lovely", "early", "only", "ugly", "silly", "holy", "lonely",
                  "daily", "weekly", "monthly", "yearly", "hourly", "elderly", "lively", "costly", "deadly", "curly",
                  "jolly", "family", "reply", "supply", "apply", "rely", "fly", "july", "italy", "ally",
                  "sly", "shy", "bubbly", "chilly", "smelly", "orderly", "timely", "manly", "sickly", "oily"}
_PRONOUNS = {"i", "you", "he", "she", "it", "we", "they", "there", "that", "this", "these", "those", "who", "one",
             "so", "which", "what", "here", "mine", "yours", "ours", "theirs", "not", "too", "yes", "no"}
_EMBEDDING = {"what", "where", "who", "whom", "how", "why", "when", "which", "whether", "if", "than", "as", "whatever",
              "wherever", "however", "what's", "who's"}

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
    if _unfinished_clause(_last_sentence(stripped)):
        return WordVerdict.INCOMPLETE
    if stripped.endswith((".", "!")) and (last in _PARTICLES or last in _AUXILIARIES):
        return WordVerdict.UNSURE  # "… logged in." and "… than he was." may end a sentence
    if last in NOT_FINAL:
        return WordVerdict.INCOMPLETE
    if stripped.endswith((".", "?", "!")):
        return WordVerdict.COMPLETE
    return WordVerdict.UNSURE


def _last_sentence(text: str) -> list[str]:
    """The words of the last sentence (what follows the last full stop, question or exclamation mark before the end),
    with commas kept as their own token: whether a clause came after the comma matters."""
    body = text.rstrip(".?!…- ")
    cut = max(body.rfind(mark) for mark in ".?!")
    return re.findall(r"[a-z']+|,", body[cut + 1:].lower())


def _unfinished_clause(tokens: list[str]) -> bool:
    words = [t for t in tokens if t != ","]
    if len(words) < 2:
        return False
    if words[0] in _OPENERS and "," not in tokens and len(words) >= 3:
        return True  # "to leave the conference", "if you could": the main clause has not come
    last, before = words[-1], words[-2]
    if last.endswith("ly") and last not in _LY_ADJECTIVES and before in _VERBS_BEFORE_ADVERB:
        return True  # "there are currently", "the time will be exactly"
    return (last in _AUXILIARIES and before not in _PRONOUNS and before not in _AUXILIARIES | {"'s"}
            and not _EMBEDDING.intersection(words[:-1]))  # "the last caller was"
