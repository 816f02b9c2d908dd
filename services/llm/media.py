"""Check audio and image inputs before they reach LiteRT-LM, with messages that say how to fix them.

The native library answers a bad input with a generic error (or, for a missing encoder, silently
drops the media), so everything it would choke on is refused here first: audio must be a PCM16
mono WAV of bounded length, images JPEG or PNG within byte and dimension limits. Image headers are
read without decoding the pixels, so a decompression bomb is refused before it can expand.
"""

from __future__ import annotations

import dataclasses
import io
import wave

from services.common import config
from services.llm.errors import InvalidInput

_LLM = config.LlmConfig()  # the settings' defaults: the one place they are written

ALLOWED_SAMPLE_RATES = (8000, 16000, 22050, 24000, 32000, 44100, 48000)


@dataclasses.dataclass(frozen=True)
class MediaLimits:
    max_audio_seconds: float = 30.0
    max_image_bytes: int = 8 * 1024 * 1024
    max_image_side: int = 4096
    max_image_pixels: int = 16_000_000
    max_audio_items: int = 4
    max_image_items: int = _LLM.max_images


@dataclasses.dataclass(frozen=True)
class AudioInfo:
    sample_rate: int
    seconds: float


@dataclasses.dataclass(frozen=True)
class ImageInfo:
    format: str  # "JPEG" or "PNG"
    width: int
    height: int


def check_wav(data: bytes, limits: MediaLimits = MediaLimits()) -> AudioInfo:
    """Return the WAV's rate and length, or raise InvalidInput saying what is wrong."""
    if not data:
        raise InvalidInput("audio is empty: send a WAV file (PCM 16-bit, mono)")
    if data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise InvalidInput("audio is not a WAV file: send WAV (RIFF/WAVE), PCM 16-bit, mono")
    try:
        with wave.open(io.BytesIO(data)) as wav:
            channels, width, rate, frames = (
                wav.getnchannels(),
                wav.getsampwidth(),
                wav.getframerate(),
                wav.getnframes(),
            )
    except (wave.Error, EOFError) as exc:
        raise InvalidInput(f"audio WAV is unreadable or not PCM ({exc}): send PCM 16-bit mono WAV") from exc
    if width != 2:
        raise InvalidInput(f"audio must be PCM 16-bit; this WAV has {8 * width}-bit samples")
    if channels != 1:
        raise InvalidInput(f"audio must be mono; this WAV has {channels} channels")
    if rate not in ALLOWED_SAMPLE_RATES:
        raise InvalidInput(f"audio sample rate {rate} Hz is not supported; use one of {ALLOWED_SAMPLE_RATES}")
    if frames == 0:
        raise InvalidInput("audio WAV holds no samples")
    seconds = frames / rate
    if seconds > limits.max_audio_seconds:
        raise InvalidInput(f"audio is {seconds:.1f} s long; the limit is {limits.max_audio_seconds:g} s")
    return AudioInfo(sample_rate=rate, seconds=seconds)


def check_image(data: bytes, limits: MediaLimits = MediaLimits()) -> ImageInfo:
    """Return the image's format and size, or raise InvalidInput saying what is wrong."""
    from PIL import Image, UnidentifiedImageError

    if not data:
        raise InvalidInput("image is empty: send a JPEG or PNG file")
    if len(data) > limits.max_image_bytes:
        raise InvalidInput(f"image is {len(data)} bytes; the limit is {limits.max_image_bytes} bytes")
    if not (data.startswith(b"\xff\xd8\xff") or data.startswith(b"\x89PNG\r\n\x1a\n")):
        raise InvalidInput("image must be JPEG or PNG")
    try:
        # Image.open parses the header only; pixels are decoded by verify() / load(), not here.
        with Image.open(io.BytesIO(data)) as image:
            fmt, (width, height) = image.format, image.size
            if width > limits.max_image_side or height > limits.max_image_side:
                raise InvalidInput(
                    f"image is {width}x{height}; each side must be at most {limits.max_image_side} pixels"
                )
            if width * height > limits.max_image_pixels:
                raise InvalidInput(
                    f"image has {width * height} pixels; the limit is {limits.max_image_pixels}"
                )
            image.verify()  # checks the structure (and PNG CRCs) without keeping pixels
    except InvalidInput:
        raise
    except Image.DecompressionBombError as exc:
        raise InvalidInput(f"image is too large to decode safely ({exc})") from exc
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise InvalidInput(f"image is corrupt or unreadable ({exc}): send a valid JPEG or PNG") from exc
    if fmt not in ("JPEG", "PNG"):
        raise InvalidInput(f"image format {fmt} is not supported: send JPEG or PNG")
    if width < 1 or height < 1:
        raise InvalidInput("image has no pixels")
    return ImageInfo(format=fmt, width=width, height=height)
