"""Text for the voice: sentences from a token stream, and words a TTS model can read.

Two responsibilities:

* :class:`SentenceSplitter` takes text in pieces, as an LLM emits it, and hands out each sentence
  as soon as it is complete, with its character span in the whole input. Sentence ends are found
  by pysbd (abbreviations, decimals, ellipses, quotes and brackets after the stop); a line break
  always ends a sentence (markdown lists and headings carry no stop), fenced code is skipped,
  and the answer's opening is spoken in short units that grow: the first clause, or lacking one the
  first few words, then a unit about twice as long, then whole sentences; so the first audio comes early
  and each unit is synthesised while the one before it plays.
* :func:`speakable` turns one sentence into plain words: markdown, emoji and code are stripped;
  numbers, ordinals, years, times, money, percentages and common symbols are spelled out
  (num2words does the numbers; the patterns around them are small and specific to speech).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import emoji
import pysbd
from num2words import num2words

from services.common import config

_TTS = config.TtsConfig()  # the settings' defaults: the one place they are written

_FENCE = "```"
# pysbd misses a stop inside a closing bracket: "It is big (really big.) Fine."
_BRACKET_END = re.compile(r"(?<=[.!?][)\]])\s+(?=[\"“(\[]?[A-Z0-9])")
_CLAUSE = re.compile(r"[,;:](?=\s)|\s[—–-]{1,2}(?=\s)")
# A clause mark that ends the text so far, after a letter (not the "1," of "1,000"): while the text streams in, the
# clause is complete as soon as its mark arrives, one token before the next word confirms it.
_CLAUSE_AT_END = re.compile(r"(?<=[^\W\d_])[,;:]\s*$")


@dataclass(frozen=True)
class Sentence:
    """One unit of speech: its position in the stream and its span [start, end) in the input.

    ``continues``: the unit was cut between two words of one phrase, so the next unit goes on without a pause."""

    index: int
    text: str
    start: int
    end: int
    continues: bool = False


# Units of the opening that may be cut out of a longer sentence; each allows twice the previous one's size.
OPENING_UNITS = 2


class SentenceSplitter:
    """Incremental sentence splitter: ``push(piece)`` and ``close()`` return finished sentences.

    The opening (the first ``OPENING_UNITS`` units) is cut short: a unit longer than ``first_max_chars`` is cut at
    its first clause boundary (``, ; : —``) that leaves at least ``min_clause_chars`` before it; lacking one, it
    is cut after its first ``first_unit_words`` words as soon as the next word has begun. The second unit allows
    twice both. 0 turns either cut off. A model's text arrives at a few words per 100 ms on a small CPU, so
    waiting for a whole first sentence (or even a clause that never comes) holds the first audio back by as much.
    """

    def __init__(self, first_max_chars: int = 12, min_clause_chars: int = 4,
                 first_unit_words: int = _TTS.first_unit_words) -> None:
        self._segmenter = pysbd.Segmenter(language="en", clean=False, char_span=True)
        self._first_max = first_max_chars
        self._min_clause = min_clause_chars
        self._unit_words = first_unit_words
        self._buf = ""
        self._base = 0  # offset of _buf[0] in the whole input
        self._in_code = False
        self._count = 0

    def push(self, piece: str) -> list[Sentence]:
        self._buf += piece
        return self._drain(final=False)

    def close(self) -> list[Sentence]:
        """End of input: whatever is left is a sentence, final punctuation or not."""
        out = self._drain(final=True)
        self._consume(len(self._buf))
        return out

    def _consume(self, n: int) -> None:
        self._buf = self._buf[n:]
        self._base += n

    def _drain(self, final: bool) -> list[Sentence]:
        out: list[Sentence] = []
        while True:
            if self._in_code:
                end = self._buf.find(_FENCE)
                if end < 0:  # keep a possible partial fence, drop the rest of the code
                    self._consume(max(0, len(self._buf) - len(_FENCE) + 1))
                    return out
                self._in_code = False
                self._consume(end + len(_FENCE))
                continue
            fence, newline = self._buf.find(_FENCE), self._buf.find("\n")
            cut = min((i for i in (fence, newline) if i >= 0), default=-1)
            if cut < 0:
                break
            out += self._segment(self._buf[:cut], complete=True)  # consumes those `cut` chars
            self._in_code = cut == fence
            self._consume(len(_FENCE) if self._in_code else 1)
        out += self._segment(self._buf, complete=final)
        return out

    def _segment(self, text: str, complete: bool) -> list[Sentence]:
        """Emit the finished sentences of `text` (a prefix of the buffer) and consume them."""
        if not text.strip():
            if complete:
                self._consume(len(text))
            return []
        spans = [span for s in self._segmenter.segment(text) for span in _split_brackets(text, s.start, s.end)]
        if not complete:
            # The last span may still grow; and until the next sentence has a letter or digit,
            # "much." may become "much..." and "Stop!" may get its closing quote.
            if re.search(r"\w", text[spans[-1][0]:]) is None:
                return []
            spans = spans[:-1]
        out: list[Sentence] = []
        consumed = 0
        for start, end in spans:
            out += self._emit(text, start, end)
            consumed = end
        if complete:
            consumed = len(text)
        elif self._count < OPENING_UNITS and not out:
            cut, continues = self._opening_cut(text, streaming=True)
            if cut:
                out += self._emit(text, 0, cut, continues, head=True)
                consumed = cut
        self._consume(consumed)
        return out

    def _opening_cut(self, text: str, streaming: bool = False) -> tuple[int, bool]:
        """(end of the opening unit worth speaking alone, whether it ends inside a phrase); (0, False) when the
        unit should not be cut (yet). `streaming`: `text` is all there is so far, and more will come."""
        if self._count >= OPENING_UNITS:
            return 0, False
        max_chars, words = self._first_max << self._count, self._unit_words << self._count
        starts = [m.start() for m in re.finditer(r"\S+", text)] if words else []
        enough_words = len(starts) > words  # the word after the cut has begun, so the last one before it is whole
        if max_chars and (len(text.strip()) > max_chars or enough_words):
            for m in _CLAUSE.finditer(text):  # a clause sounds finished on its own; a phrase cut mid-way less so
                if len(text[: m.start()].strip()) >= self._min_clause and text[m.end():].strip():
                    return m.end(), False
            end = _CLAUSE_AT_END.search(text) if streaming else None
            if end and len(text[: end.start()].strip()) >= self._min_clause:
                return end.start() + 1, False
        if words and enough_words:
            return len(text[: starts[words]].rstrip()), True
        return 0, False

    def _emit(self, text: str, start: int, end: int, continues: bool = False, head: bool = False) -> list[Sentence]:
        """`head`: the span is a unit already cut out of a longer one, spoken as it is."""
        piece = text[start:end]
        lead = len(piece) - len(piece.lstrip())
        body = piece.strip()
        if not body:
            return []
        cut, cut_continues = (0, False) if head else self._opening_cut(body)
        if cut:  # a long unit of the opening: speak its head on its own
            head_end = start + lead + cut
            return (self._emit(text, start, head_end, cut_continues, head=True)
                    + self._emit(text, head_end, end, continues))
        sentence = Sentence(self._count, body, self._base + start + lead,
                            self._base + start + lead + len(body), continues)
        self._count += 1
        return [sentence]


def _split_brackets(text: str, start: int, end: int) -> list[tuple[int, int]]:
    cuts = [m.end() for m in _BRACKET_END.finditer(text, start, end)]
    bounds = [start, *cuts, end]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def split_sentences(text: str, first_max_chars: int = 12,
                    first_unit_words: int = _TTS.first_unit_words) -> list[Sentence]:
    """All sentences of a complete text."""
    splitter = SentenceSplitter(first_max_chars=first_max_chars, first_unit_words=first_unit_words)
    return splitter.push(text) + splitter.close()


# --- speakable text -------------------------------------------------------------------------

_ABBREVIATIONS = {
    "e.g.": "for example", "i.e.": "that is", "etc.": "et cetera", "vs.": "versus",
    "Dr.": "Doctor", "Mr.": "Mister", "Mrs.": "Missus", "Ms.": "Miz", "St.": "Saint",
    "approx.": "approximately", "No.": "number",
}
_SYMBOLS = {"&": " and ", "+": " plus ", "=": " equals ", "@": " at ", "°": " degrees ",
            "×": " times ", "~": " about ", "→": " to ", "->": " to ", "≈": " about ",
            "<": " less than ", ">": " greater than "}
_CURRENCIES = {"$": ("dollar", "dollars", "cent", "cents"), "€": ("euro", "euros", "cent", "cents"),
               "£": ("pound", "pounds", "penny", "pence"), "¥": ("yen", "yen", "", "")}
_SCALES = "thousand|million|billion|trillion"
_NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"

_MD_RULES = [
    (re.compile(r"`([^`]*)`"), r"\1"),                      # inline code: keep the words
    (re.compile(r"!\[([^\]]*)\]\([^)]*\)"), r"\1"),          # image -> alt text
    (re.compile(r"\[([^\]]+)\]\([^)]*\)"), r"\1"),           # link -> its text
    (re.compile(r"https?://(?:www\.)?([^/\s]+)\S*"), r"\1"),  # bare URL -> its host
    (re.compile(r"^\s{0,3}#{1,6}\s+"), ""),                  # heading marks
    (re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+"), ""),           # list markers
    (re.compile(r"^\s*>+\s?"), ""),                          # block quote
    (re.compile(r"^\s*[-*_]{3,}\s*$"), ""),                  # horizontal rule
    (re.compile(r"(\*\*|__|\*|_|~~)(?=\S)(.+?)(?<=\S)\1"), r"\2"),  # emphasis
    (re.compile(r"\s*\|\s*"), ", "),                         # table cells
]


def _number(token: str) -> str:
    return num2words(float(token) if "." in token else int(token))


def _money(m: re.Match) -> str:
    one, many, sub_one, sub_many = _CURRENCIES[m["cur"]]
    amount = m["amount"].replace(",", "")
    if m["scale"]:
        return f"{_number(amount)} {m['scale']} {many}"
    whole, _, frac = amount.partition(".")
    words = f"{num2words(int(whole))} {one if int(whole) == 1 else many}"
    cents = int((frac + "00")[:2]) if frac else 0
    if cents and sub_one:
        words += f" and {num2words(cents)} {sub_one if cents == 1 else sub_many}"
    return words


def _time(m: re.Match) -> str:
    hour, minute = int(m["h"]), int(m["m"])
    words = num2words(hour)
    if minute == 0:
        words += "" if m["ampm"] else " o'clock"
    elif minute < 10:
        words += f" oh {num2words(minute)}"
    else:
        words += f" {num2words(minute)}"
    if m["ampm"]:
        words += " " + " ".join(m["ampm"].replace(".", "").upper())
    return words


def _plain_number(m: re.Match) -> str:
    token = m[0].replace(",", "")
    if re.fullmatch(r"1[1-9]\d\d|20\d\d", token) and "," not in m[0]:
        return num2words(int(token), to="year")
    return _number(token)


_NUMBER_RULES = [
    (re.compile(rf"(?P<cur>[$€£¥])\s?(?P<amount>{_NUM})(?:\s*(?P<scale>{_SCALES})\b)?"), _money),
    (re.compile(rf"({_NUM})\s?%"), lambda m: f"{_number(m[1].replace(',', ''))} percent"),
    (re.compile(r"\b(?P<h>[01]?\d|2[0-3]):(?P<m>[0-5]\d)\b\s*(?P<ampm>[AaPp]\.?[Mm]\.?)?"), _time),
    (re.compile(r"\b(\d+)(?:st|nd|rd|th)\b"), lambda m: num2words(int(m[1]), to="ordinal")),
    (re.compile(rf"(?<![\w.])-(?={_NUM})"), lambda m: "minus "),
    (re.compile(rf"(?<![\w.])(?:{_NUM})(?![\w.]*\d)"), _plain_number),
]


def speakable(text: str) -> str:
    """Plain words for the voice: no markdown, emoji or code; numbers and symbols spelled out."""
    text = emoji.replace_emoji(text, " ")
    for pattern, repl in _MD_RULES:
        text = pattern.sub(repl, text) if pattern.flags & re.MULTILINE or "^" not in pattern.pattern \
            else "\n".join(pattern.sub(repl, line) for line in text.split("\n"))
    for abbreviation, words in _ABBREVIATIONS.items():
        text = re.sub(rf"(?<!\w){re.escape(abbreviation)}", words, text)
    for pattern, repl in _NUMBER_RULES:
        text = pattern.sub(repl, text)
    for symbol, words in _SYMBOLS.items():
        text = text.replace(symbol, words)
    text = re.sub(r"[#*_`|\\^{}\[\]]", " ", text)  # leftover markup is not spoken
    return re.sub(r"\s+", " ", text).strip(" ,")
