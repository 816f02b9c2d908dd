"""The bench's fixed inputs: espeak-ng questions, a synthetic camera frame and typed questions."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from tests.vad.speech import speak

SHORT_QUESTION = "What is the capital of France?"
LONG_QUESTION = ("I am standing in my kitchen and I would like to cook something quick for dinner tonight, "
                 "so could you tell me what I could make with the things you can see here?")
TYPED_QUESTION = "What is the capital of France?"
LOAD_QUESTION = "Say hello in one short sentence."


@dataclass(frozen=True)
class Case:
    """One benchmark case: a spoken utterance (16 kHz PCM16) with camera frames, or a typed question."""

    name: str
    source: str                    # "speech" or "text"
    text: str                      # what is said or typed
    pcm16: bytes = b""
    jpegs: tuple[bytes, ...] = field(default_factory=tuple)

    @property
    def speech_s(self) -> float:
        return len(self.pcm16) / 32000


def camera_jpeg(seed: int = 0, size: tuple[int, int] = (320, 240)) -> bytes:
    """A synthetic camera frame: smooth gradients plus noise, JPEG-encoded like a browser capture."""
    rng = np.random.default_rng(seed)
    w, h = size
    y, x = np.mgrid[0:h, 0:w]
    base = np.stack([x * 255 / w, y * 255 / h, (x + y) * 127 / (w + h)], axis=-1)
    pixels = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "JPEG", quality=80)
    return buf.getvalue()


def spoken_cases(workdir: Path, voice: str = "en-us") -> list[Case]:
    """Short and long questions, each without and with one camera frame."""
    short = speak(SHORT_QUESTION, voice, 16000, workdir).astype("<i2").tobytes()
    long = speak(LONG_QUESTION, voice, 16000, workdir).astype("<i2").tobytes()
    jpeg = camera_jpeg(1)
    return [Case("spoken_short", "speech", SHORT_QUESTION, short),
            Case("spoken_short_camera", "speech", SHORT_QUESTION, short, (jpeg,)),
            Case("spoken_long", "speech", LONG_QUESTION, long),
            Case("spoken_long_camera", "speech", LONG_QUESTION, long, (jpeg,))]


def typed_case() -> Case:
    return Case("typed", "text", TYPED_QUESTION)
