"""Kokoro's voice names and the language each was made for.

A Kokoro voice's first letter names its language (``af_heart``: American English, ``bf_emma``: British
English, ``jf_alpha``: Japanese); the second its gender. This is the one place that rule lives.
"""

from __future__ import annotations

_LANGUAGE_OF_PREFIX = {"a": "en-us", "b": "en-gb", "e": "es", "f": "fr-fr", "h": "hi", "i": "it",
                       "j": "ja", "p": "pt-br", "z": "zh"}


def language_of(voice: str, default: str) -> str:
    """The language `voice` was made for, or `default` when its name does not say."""
    return _LANGUAGE_OF_PREFIX.get(voice[:1], default)
