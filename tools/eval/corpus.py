"""The spoken test set: sentences a voice assistant hears, spoken by espeak-ng in several voices and speeds, some
with mild noise; and the word error rate, scored on normalised words.

Deterministic: the same sentences, voices, speeds and noise (seeded) every run, so runs compare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import jiwer
import numpy as np
from num2words import num2words

from tools.speech import speak

SAMPLE_RATE = 16000
# No digits in the references; Whisper writes some numbers as digits ("seven" as "7"), which `normalise` spells out.
SENTENCES = (
    "What is the capital of France?",
    "Set an alarm for seven in the morning.",
    "What is the weather like today?",
    "Tell me a joke about cats.",
    "How far away is the moon?",
    "Play some relaxing music please.",
    "Remind me to call my mother tomorrow.",
    "What time is it in Tokyo right now?",
    "How do I make a cup of tea?",
    "Turn off the lights in the kitchen.",
    "Who wrote the novel Pride and Prejudice?",
    "Can you recommend a good book to read?",
    "What is the tallest mountain in the world?",
    "How many legs does a spider have?",
    "Translate good morning into Spanish.",
    "Why is the sky blue?",
    "What should I cook for dinner tonight?",
    "Is it going to rain this weekend?",
    "Explain how a rainbow is formed.",
    "What is the difference between a frog and a toad?",
    "Give me a short summary of the news.",
    "How do you spell necessary?",
    "Where is the nearest train station?",
    "What does a bee do in the winter?",
    "Please read me a bedtime story.",
    "What is the boiling point of water?",
    "Who painted the Mona Lisa?",
    "How long should I boil an egg?",
    "What is your favourite colour?",
    "Tell me something interesting about octopuses.",
    "Can you help me plan a trip to Italy?",
    "What are the planets of the solar system?",
)
VOICES = ("en-us", "en", "en-us+f3", "en+m3")   # American, British, and a female and a male variant
SPEEDS = (140, 175, 210)                        # espeak-ng words per minute (175 is its default)
NOISE_SNR_DB = 25.0                             # "mild": every other clip, white noise this far below the speech
_NOT_WORD = re.compile(r"[^\w' ]+")


@dataclass(frozen=True)
class Clip:
    text: str
    voice: str
    speed: int
    noisy: bool
    speech: np.ndarray  # int16 at 16 kHz, espeak's silence trimmed, noise added where `noisy`


def clips(workdir: Path, count: int = len(SENTENCES)) -> list[Clip]:
    rng = np.random.default_rng(27)
    out = []
    for i, text in enumerate(SENTENCES[:count]):
        voice, speed, noisy = VOICES[i % len(VOICES)], SPEEDS[i % len(SPEEDS)], i % 2 == 1
        speech = speak(text, voice, SAMPLE_RATE, workdir, words_per_minute=speed)
        out.append(Clip(text, voice, speed, noisy, add_noise(speech, rng) if noisy else speech))
    return out


def add_noise(speech: np.ndarray, rng: np.random.Generator, snr_db: float = NOISE_SNR_DB) -> np.ndarray:
    signal = speech.astype(np.float64)
    noise = rng.standard_normal(len(signal)) * np.sqrt(np.mean(signal ** 2) / 10 ** (snr_db / 10))
    return np.clip(signal + noise, -32768, 32767).astype(np.int16)


def noise_floor(seconds: float, like: Clip, rng: np.random.Generator) -> np.ndarray:
    """Silence as the clip's microphone would hear it: its noise, or digital zeros for a clean clip."""
    n = int(seconds * SAMPLE_RATE)
    if not like.noisy:
        return np.zeros(n, dtype=np.int16)
    level = np.sqrt(np.mean(like.speech.astype(np.float64) ** 2) / 10 ** (NOISE_SNR_DB / 10))
    return (rng.standard_normal(n) * level).astype(np.int16)


def normalise(text: str) -> str:
    spelled = re.sub(r"\d+", lambda m: num2words(int(m.group())), text)
    return " ".join(_NOT_WORD.sub(" ", spelled.lower().replace("-", " ")).split())


def wer(references: list[str], hypotheses: list[str]) -> float:
    """Word error rate over the whole set (edits / reference words), on normalised words."""
    refs = [normalise(r) for r in references]
    hyps = [normalise(h) or "<empty>" for h in hypotheses]
    return round(float(jiwer.wer(refs, hyps)), 4)
