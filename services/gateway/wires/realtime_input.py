"""A Realtime session's input: each client event decoded and checked, incoming audio resampled from the client's
rate to the vad's 16 kHz, and what the user added since the last answer (texts, images, audio), held for the next
turn."""

from __future__ import annotations

import numpy as np
import soxr

from services.common import audio
from services.gateway.conversation.intake import SAMPLE_RATE_IN
from services.gateway.conversation.turn import TurnInput
from services.gateway.wires.openai_common import OpenAIError
from services.gateway.wires.protocol import ProtocolError, decode_json


def decode_event(text: str, max_bytes: int) -> dict:
    """A client event as a dict with a string `type`; raises OpenAIError naming what was wrong."""
    if len(text.encode()) > max_bytes:
        raise OpenAIError(f"event over the {max_bytes}-byte limit (SOTTO_GATEWAY_MAX_REQUEST_BYTES)",
                          code="event_too_large")
    try:
        event = decode_json(text)  # the same safe decoding as /ws (depth, number size, lone surrogates)
    except ProtocolError as exc:
        raise OpenAIError(exc.message, code="invalid_json") from None
    if not isinstance(event, dict) or not isinstance(event.get("type"), str):
        raise OpenAIError("an event must be a JSON object with a string 'type'", param="type")
    return event


class InputResampler:
    """PCM16 at the client's rate to 16 kHz: a stream for appended audio (no seams between pieces), or whole."""

    def __init__(self, rate: int) -> None:
        self.rate = rate
        self._stream: soxr.ResampleStream | None = None

    def stream(self, pcm: bytes, last: bool = False) -> bytes:
        """The next piece; `last` flushes what the filter holds back and starts the next stream afresh."""
        if self.rate == SAMPLE_RATE_IN:
            return pcm
        if self._stream is None:
            self._stream = soxr.ResampleStream(self.rate, SAMPLE_RATE_IN, 1, dtype="int16")
        out = self._stream.resample_chunk(np.frombuffer(pcm, dtype="<i2"), last=last)
        if last:
            self._stream = None
        return out.astype("<i2").tobytes()

    def whole(self, pcm: bytes) -> bytes:
        if self.rate == SAMPLE_RATE_IN:
            return pcm
        return soxr.resample(np.frombuffer(pcm, dtype="<i2"), self.rate, SAMPLE_RATE_IN).astype("<i2").tobytes()


class PendingInput:
    """What the user added since the last response: texts, images and audio (16 kHz PCM16), for the next turn,
    bounded as one answer's prompt is (SOTTO_MAX_TURN_AUDIO_S, SOTTO_GATEWAY_MAX_PROMPT_CHARS, _MAX_IMAGES)."""

    def __init__(self, max_audio_s: float, max_chars: int, max_images: int) -> None:
        self.max_bytes = int(max_audio_s * SAMPLE_RATE_IN) * 2
        self.max_chars, self.max_images = max_chars, max_images
        self.texts: list[str] = []
        self.images: list[bytes] = []
        self.pcm = bytearray()

    def add_audio(self, pcm: bytes) -> None:
        if len(self.pcm) + len(pcm) > self.max_bytes:
            raise OpenAIError(f"the user's audio is over {self.max_bytes // 2 // SAMPLE_RATE_IN} s "
                              "(SOTTO_MAX_TURN_AUDIO_S)", code="audio_too_long")
        self.pcm += pcm

    def check_image_room(self, adding: int, param: str) -> None:
        """Refuse one more image over the limit before it is decoded (`adding`: those of this item so far)."""
        if len(self.images) + adding >= self.max_images:
            raise OpenAIError(f"more than {self.max_images} images for one answer (SOTTO_GATEWAY_MAX_IMAGES)",
                              param=param)

    def hold(self, texts: list[str], images: list[bytes], pcm: bytes) -> None:
        """What a user item adds, held for the next answer once all of it is known to fit (else none of it)."""
        if sum(map(len, self.texts + texts)) > self.max_chars:
            raise OpenAIError(f"the text held for one answer is over {self.max_chars} characters "
                              "(SOTTO_GATEWAY_MAX_PROMPT_CHARS): send response.create first",
                              param="item.content", code="context_length_exceeded")
        self.add_audio(pcm)
        self.texts += texts
        self.images += images

    def empty(self) -> bool:
        return not (self.texts or self.images or self.pcm)

    def take(self, turn_id: str, t_input_end: float, endpoint_ms: float | None = None) -> TurnInput:
        pcm, self.pcm = bytes(self.pcm), bytearray()
        inp = TurnInput(turn_id=turn_id, source="speech" if pcm else "text", t_input_end=t_input_end,
                        text="\n".join(self.texts), audio_wav=audio.wav_bytes(pcm, SAMPLE_RATE_IN) if pcm else b"",
                        audio_ms=len(pcm) / 2 / (SAMPLE_RATE_IN / 1000), images=self.images,
                        image_ts=[0.0] * len(self.images), endpoint_ms=endpoint_ms)
        self.texts, self.images = [], []
        return inp
