"""The bench's fixed inputs: espeak-ng questions, a synthetic camera frame and typed questions.

Spoken cases come in two clients. "page" does what the product's page does (static/js/capture.js): its own
Silero VAD decides the end of speech after the server's turn silence (`SOTTO_VAD_TURN_SILENCE_MS`, which the page
reads from session.ready), audio stops at that frame and `audio.end` follows, asking the server's turn model for
its verdict; only if the model holds the turn open does the page stream on. "raw" is a client without its own VAD
(the Python client, a bare microphone stream): it goes on streaming, here 0.8 s of trailing silence, and the
server's VAD endpoints.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image

from services.common import config
from services.gateway.client import FRAME_MS
from services.vad.engine import SileroVad, SpeechEventKind, VadSettings
from tools.speech import speak

SHORT_QUESTION = "What is the capital of France?"
LONG_QUESTION = ("I am standing in my kitchen and I would like to cook something quick for dinner tonight, "
                 "so could you tell me what I could make with the things you can see here?")
TYPED_QUESTION = "What is the capital of France?"
LOAD_QUESTION = "Say hello in one short sentence."
TRAILING_S = 2.0  # silence after each question: what the page would stream if the server held the turn open


@dataclass(frozen=True)
class Case:
    """One benchmark case: a spoken utterance (16 kHz PCM16) with camera frames, or a typed question."""

    name: str
    source: str                    # "speech" or "text"
    text: str                      # what is said or typed
    pcm16: bytes = b""
    jpegs: tuple[bytes, ...] = field(default_factory=tuple)
    client: str = "page"           # spoken: "page" (own VAD, then audio.end) or "raw" (streams on), see above
    page_end_bytes: int = 0        # "page": the audio sent, up to the frame where the page's VAD hears the end

    @property
    def page_audio(self) -> bytes:
        """What the page sends: the speech, then silence up to the frame where its VAD heard the end."""
        return self.trailed[:self.page_end_bytes]

    @property
    def trailed(self) -> bytes:
        """The speech and the silence after it, what a held turn streams on into."""
        return self.pcm16 + bytes(int(TRAILING_S * 16000) * 2)


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


def page_vad_end(pcm16: bytes, trailing_s: float = TRAILING_S) -> int:
    """How much audio (bytes) the page sends for `pcm16` followed by silence: every frame up to and including the one
    on which its VAD hears the end of speech. The page runs Silero v5 through vad-web with threshold 0.5,
    hysteresis to 0.35, 300 ms minimum speech and the server's turn silence (capture.js); the same model and rules
    here, so the cut falls where the page's would."""
    audio = pcm16 + bytes(int(trailing_s * 16000) * 2)
    silence = config.load(config.VadConfig, {}).turn_silence_ms  # the page's floor, 64 ms, is below Silero's 100
    page = VadSettings(threshold=0.5, neg_threshold=0.35, min_speech_ms=300, min_silence_ms=max(100, silence))
    step = 16 * FRAME_MS * 2
    with SileroVad().open_stream(16000, page) as stream:
        for i in range(0, len(audio), step):
            if any(e.kind is SpeechEventKind.ENDED for e in stream.push(audio[i:i + step])):
                return i + step
    raise ValueError(f"no end of speech within {trailing_s} s of trailing silence")


def spoken_cases(workdir: Path, voice: str = "en-us") -> list[Case]:
    """Short and long questions, each without and with one camera frame, sent as the page sends them; and the
    short question from a client without its own VAD."""
    short = speak(SHORT_QUESTION, voice, 16000, workdir).astype("<i2").tobytes()
    long = speak(LONG_QUESTION, voice, 16000, workdir).astype("<i2").tobytes()
    jpeg = camera_jpeg(1)
    short_end, long_end = page_vad_end(short), page_vad_end(long)
    return [Case("spoken_short", "speech", SHORT_QUESTION, short, page_end_bytes=short_end),
            Case("spoken_short_camera", "speech", SHORT_QUESTION, short, (jpeg,), page_end_bytes=short_end),
            Case("spoken_long", "speech", LONG_QUESTION, long, page_end_bytes=long_end),
            Case("spoken_long_camera", "speech", LONG_QUESTION, long, (jpeg,), page_end_bytes=long_end),
            Case("spoken_short_raw", "speech", SHORT_QUESTION, short, client="raw")]


def typed_case() -> Case:
    return Case("typed", "text", TYPED_QUESTION)
