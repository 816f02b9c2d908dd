"""What both OpenAI-compatible endpoints share: OpenAI's error shape, ids, and media given inline (data URLs, base64).

Nothing here does I/O; a client's mistake becomes an `OpenAIError` carrying what OpenAI's own service would say
(`type`, `code`, `param`) and a message that names what is accepted.
"""

from __future__ import annotations

import base64
import binascii
import uuid
from typing import Any

from services.gateway.conversation.inputs import InputError
from services.gateway.conversation.media import check_image

IMAGE_TYPES = {"image/jpeg": "JPEG", "image/png": "PNG"}  # what the llm service decodes, as Pillow names them
MAX_TOKENS = 2**32 - 1  # the range of the llm's max_new_tokens (a uint32 in sotto.v1)


class OpenAIError(ValueError):
    """A request or event refused; `status` is the HTTP status a Chat Completions request gets."""

    def __init__(self, message: str, *, param: str | None = None, code: str = "invalid_value",
                 kind: str = "invalid_request_error", status: int = 400) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        self.code = code
        self.kind = kind
        self.status = status

    def body(self) -> dict[str, Any]:
        """OpenAI's error object: {"message", "type", "param", "code"}."""
        return {"message": self.message, "type": self.kind, "param": self.param, "code": self.code}


def new_id(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:20]}"


def decode_base64(data: Any, param: str) -> bytes:
    if not isinstance(data, str):
        raise OpenAIError(f"'{param}' must be a base64 string", param=param)
    try:
        return base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError):
        raise OpenAIError(f"'{param}' is not valid base64", param=param) from None


def token_count(value: Any, param: str) -> int:
    """A reply length in tokens, checked against what the llm service's request can carry."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise OpenAIError(f"'{param}' must be an integer", param=param)
    if not 1 <= value <= MAX_TOKENS:
        raise OpenAIError(f"'{param}' must be at least 1 and at most {MAX_TOKENS}; got {value}", param=param)
    return value


def image_from_url(url: Any, max_bytes: int, max_pixels: int, param: str) -> tuple[bytes, str]:
    """The bytes and type of a `data:image/jpeg;base64,...` (or PNG) URL, decoded and bounded in pixels; links to
    the web are refused (nothing is fetched). Decodes the image: run it in a worker thread."""
    if not isinstance(url, str):
        raise OpenAIError(f"'{param}' must be a string", param=param)
    head, sep, payload = url.partition(",")
    if not url.startswith("data:") or not sep or not head.endswith(";base64"):
        raise OpenAIError(f"'{param}' must be a data URL (data:image/jpeg;base64,... or data:image/png;base64,...): "
                          "the gateway fetches nothing from the network", param=param, code="invalid_image_url")
    mime = head[len("data:"):-len(";base64")].lower()
    if mime not in IMAGE_TYPES:
        raise OpenAIError(f"'{param}' is {mime or 'untyped'}; accepted: {', '.join(IMAGE_TYPES)}", param=param,
                          code="invalid_image_format")
    if len(payload) * 3 // 4 > max_bytes:
        raise OpenAIError(f"'{param}' holds an image over the {max_bytes}-byte limit", param=param,
                          code="image_too_large")
    data = decode_base64(payload, param)
    try:
        found = check_image(data, max_pixels)
    except InputError as exc:
        code = "image_too_large" if exc.code == "too_large" else "invalid_image"
        raise OpenAIError(f"'{param}': {exc.message}", param=param, code=code) from None
    if found != IMAGE_TYPES[mime]:
        raise OpenAIError(f"'{param}' is labelled {mime} but holds a {found} image", param=param,
                          code="invalid_image_format")
    return data, mime


def pcm16(data: Any, param: str) -> bytes:
    """Base64 PCM16 samples (little-endian, mono), checked to be whole samples."""
    pcm = decode_base64(data, param)
    if len(pcm) % 2:
        raise OpenAIError(f"'{param}' holds {len(pcm)} bytes: PCM16 needs an even count", param=param)
    return pcm
