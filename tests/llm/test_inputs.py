"""Every bad input is refused before LiteRT-LM sees it, with a message that says what to fix."""

from __future__ import annotations

import dataclasses
import io
import wave

import pytest

from services.llm import media
from services.llm.engine import GenerateRequest, Sampling
from services.llm.conversations import Turn
from services.llm.errors import InvalidInput
from tests.llm.conftest import image_bytes

GREEDY = Sampling.greedy(4)


def wav(seconds=1.0, rate=16000, channels=1, width=2) -> bytes:
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as out:
        out.setnchannels(channels)
        out.setsampwidth(width)
        out.setframerate(rate)
        out.writeframes(b"\x01" * int(seconds * rate) * channels * width)
    return buffer.getvalue()


def png_of_size(width: int, height: int) -> bytes:
    from PIL import Image

    buffer = io.BytesIO()
    Image.new("1", (width, height)).save(buffer, "PNG")  # compresses to almost nothing
    return buffer.getvalue()


def test_good_media_pass():
    assert media.check_wav(wav(2.0)).seconds == pytest.approx(2.0)
    assert media.check_image(image_bytes("JPEG")).format == "JPEG"
    assert media.check_image(image_bytes("PNG")).format == "PNG"


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "audio is empty"),
        (b"OggS" + b"\0" * 100, "not a WAV file"),
        (wav(channels=2), "must be mono; this WAV has 2 channels"),
        (wav(width=1), "must be PCM 16-bit; this WAV has 8-bit"),
        (wav(width=4), "must be PCM 16-bit; this WAV has 32-bit"),
        (wav(rate=11025), "sample rate 11025 Hz is not supported"),
        (wav(seconds=31), "audio is 31.0 s long; the limit is 30 s"),
        (wav(seconds=0), "holds no samples"),
        (wav()[:30], "unreadable"),
    ],
)
def test_bad_audio_is_refused_clearly(data, message):
    with pytest.raises(InvalidInput, match=message):
        media.check_wav(data)


def test_audio_length_limit_is_configurable():
    with pytest.raises(InvalidInput, match="the limit is 5 s"):
        media.check_wav(wav(6.0), media.MediaLimits(max_audio_seconds=5))


@pytest.mark.parametrize(
    "data, message",
    [
        (b"", "image is empty"),
        (b"GIF89a" + b"\0" * 100, "must be JPEG or PNG"),
        (image_bytes("JPEG")[:200], "corrupt or unreadable"),
        (image_bytes("PNG")[:60], "corrupt or unreadable"),
        (png_of_size(20000, 20000), "too large to decode safely"),  # a decompression bomb (Pillow's own guard)
        (png_of_size(5000, 100), "each side must be at most 4096"),
        (png_of_size(4096, 4000), "has 16384000 pixels; the limit is 16000000"),
    ],
)
def test_bad_images_are_refused_clearly(data, message):
    with pytest.raises(InvalidInput, match=message):
        media.check_image(data)


def test_image_byte_limit_is_configurable():
    with pytest.raises(InvalidInput, match="bytes; the limit is 1000 bytes"):
        media.check_image(image_bytes("PNG"), media.MediaLimits(max_image_bytes=1000))


def test_engine_refuses_bad_requests_before_running(tiny_engine):
    bad = [
        (GenerateRequest(sampling=GREEDY), "the request is empty"),
        (GenerateRequest(text="hi", audio=(wav(channels=2),), sampling=GREEDY), "must be mono"),
        (GenerateRequest(text="hi", images=(b"GIF89a",), sampling=GREEDY), "must be JPEG or PNG"),
        (GenerateRequest(text="hi", images=(image_bytes(),) * 5, sampling=GREEDY), "5 images sent; the limit is 4"),
        (GenerateRequest(text="hi", history=(Turn("tool", "x"),), sampling=GREEDY), "history role 'tool'"),
        (GenerateRequest(text="hi", sampling=Sampling.greedy(0)), "max_new_tokens must be at least 1"),
        (GenerateRequest(text="hi", sampling=dataclasses.replace(GREEDY, top_p=1.5)), "bad sampling"),
    ]
    for request, message in bad:
        with pytest.raises(InvalidInput, match=message):
            tiny_engine.generate(request)  # raised at once, before any iteration


def test_media_to_a_text_only_model_is_refused_by_name(tiny_text_engine):
    assert not tiny_text_engine.info.audio and not tiny_text_engine.info.vision
    with pytest.raises(InvalidInput, match="does not accept audio"):
        tiny_text_engine.generate(GenerateRequest(text="hi", audio=(wav(),), sampling=GREEDY))
    with pytest.raises(InvalidInput, match="does not accept images"):
        tiny_text_engine.generate(GenerateRequest(text="hi", images=(image_bytes(),), sampling=GREEDY))
    *_, done = tiny_text_engine.generate(GenerateRequest(text="hi", sampling=GREEDY))
    assert done.decode_tokens > 0  # text still works
