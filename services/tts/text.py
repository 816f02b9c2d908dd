"""Text for the voice: sentences from a token stream, and words a TTS model can read.

Two responsibilities:

* :class:`SentenceSplitter` takes text in pieces, as an LLM emits it, and hands out each sentence
  as soon as it is complete, with its character span in the whole input. Sentence ends are found
  by pysbd (abbreviations, decimals, ellipses, quotes and brackets after the stop); a line break
  always ends a sentence (markdown lists and headings carry no stop), fenced code is skipped,
  and a long first sentence is cut at its first clause boundary (or, lacking one, at a space) so the
  first audio comes early.
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

_FENCE = "```"
# pysbd misses a stop inside a closing bracket: "It is big (really big.) Fine."
_BRACKET_END = re.compile(r"(?<=[.!?][)\]])\s+(?=[\"“(\[]?[A-Z0-9])")
_CLAUSE = re.compile(r"[,;:](?=\s)|\s[—–-]{1,2}(?=\s)")


@dataclass(frozen=True)
class Sentence:
    """One unit of speech: its position in the stream and its span [start, end) in the input."""

    index: int
    text: str
    start: int
    end: int


class SentenceSplitter:
    """Incremental sentence splitter: ``push(piece)`` and ``close()`` return finished sentences.

    ``first_max_chars``: a first sentence longer than this is cut at its first clause boundary
    (``, ; : —``) that leaves at least ``min_clause_chars`` before it. 0 turns that off. A first sentence
    with no clause boundary is cut at the last space before ``first_hard_max_chars``: a model that writes one
    long sentence without commas must not hold back the first audio until the whole sentence exists.
    """

    def __init__(self, first_max_chars: int = 24, min_clause_chars: int = 4, first_hard_max_chars: int = 48) -> None:
        self._segmenter = pysbd.Segmenter(language="en", clean=False, char_span=True)
        self._first_max = first_max_chars
        self._min_clause = min_clause_chars
        self._hard_max = max(first_hard_max_chars, first_max_chars)
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
        elif self._count == 0 and not out:
            clause = self._first_clause(text)
            if clause:
                out += self._emit(text, 0, clause)
                consumed = clause
        self._consume(consumed)
        return out

    def _first_clause(self, text: str) -> int:
        """End of the first clause worth speaking alone, or 0 when none should be cut."""
        if not self._first_max or len(text.strip()) <= self._first_max:
            return 0
        for m in _CLAUSE.finditer(text):
            if len(text[: m.start()].strip()) >= self._min_clause and text[m.end():].strip():
                return m.end()
        if len(text.strip()) <= self._hard_max:
            return 0
        space = text.rfind(" ", 0, self._hard_max)
        if space > 0 and len(text[:space].strip()) >= self._min_clause and text[space:].strip():
            return space
        return 0

    def _emit(self, text: str, start: int, end: int) -> list[Sentence]:
        piece = text[start:end]
        lead = len(piece) - len(piece.lstrip())
        body = piece.strip()
        if not body:
            return []
        if self._count == 0:  # a long first sentence: speak its first clause on its own
            cut = self._first_clause(body)
            if cut:
                head_end = start + lead + cut
                return self._emit(text, start, head_end) + self._emit(text, head_end, end)
        sentence = Sentence(self._count, body, self._base + start + lead,
                            self._base + start + lead + len(body))
        self._count += 1
        return [sentence]


def _split_brackets(text: str, start: int, end: int) -> list[tuple[int, int]]:
    cuts = [m.end() for m in _BRACKET_END.finditer(text, start, end)]
    bounds = [start, *cuts, end]
    return [(a, b) for a, b in zip(bounds, bounds[1:]) if b > a]


def split_sentences(text: str, first_max_chars: int = 24) -> list[Sentence]:
    """All sentences of a complete text."""
    splitter = SentenceSplitter(first_max_chars=first_max_chars)
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
