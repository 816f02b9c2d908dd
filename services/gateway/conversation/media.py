"""Incoming media bookkeeping: the jitter buffer, the audio tape that utterances are cut from, camera keyframes."""

from __future__ import annotations

import io
import time
from bisect import bisect_right
from collections import deque
from dataclasses import dataclass, field

import numpy as np
from PIL import Image

from services.gateway.conversation.inputs import InputError, MediaFrame


class JitterBuffer:
    """Re-orders frames by sequence number, waiting at most `max_wait_s` for a missing one.

    Late frames (sequence already released) and duplicates are dropped; `dropped` counts them by reason.
    """

    def __init__(self, max_wait_s: float) -> None:
        self.max_wait_s = max_wait_s
        self.next_seq: int | None = None
        self.pending: dict[int, tuple[float, MediaFrame]] = {}
        self.dropped = {"late": 0, "duplicate": 0}

    def push(self, frame: MediaFrame, now: float | None = None) -> list[MediaFrame]:
        now = time.monotonic() if now is None else now
        if self.next_seq is None:
            self.next_seq = frame.sequence
        if frame.sequence < self.next_seq:
            self.dropped["late"] += 1
            return []
        if frame.sequence in self.pending:
            self.dropped["duplicate"] += 1
            return []
        self.pending[frame.sequence] = (now, frame)
        return self.release(now)

    def release(self, now: float | None = None) -> list[MediaFrame]:
        """In-order frames that are ready; skips a gap once the oldest waiting frame waited `max_wait_s`."""
        now = time.monotonic() if now is None else now
        out: list[MediaFrame] = []
        while self.pending:
            if self.next_seq in self.pending:
                out.append(self.pending.pop(self.next_seq)[1])
                self.next_seq += 1
                continue
            oldest = min(self.pending)
            if now - self.pending[oldest][0] >= self.max_wait_s:
                self.next_seq = oldest  # give up on the gap
                continue
            break
        return out


@dataclass
class _Piece:
    start: int          # sample index on the session's tape
    samples: int
    capture_ts_ms: float
    received: float     # monotonic time the gateway got it


class AudioTape:
    """The session's audio in arrival order, addressed by the same sample counter the vad stream sees."""

    def __init__(self, sample_rate: int, keep_s: float) -> None:
        self.rate = sample_rate
        self.keep = int(keep_s * sample_rate)
        self.pcm = bytearray()
        self.origin = 0          # tape sample index of pcm[0]
        self.end = 0             # next sample index
        self.pieces: deque[_Piece] = deque()

    def append(self, pcm: bytes, capture_ts_ms: float, received: float) -> int:
        start = self.end
        n = len(pcm) // 2
        self.pcm += pcm
        self.pieces.append(_Piece(start, n, capture_ts_ms, received))
        self.end += n
        excess = (self.end - self.origin) - self.keep
        if excess > 0:
            del self.pcm[: excess * 2]
            self.origin += excess
            while self.pieces and self.pieces[0].start + self.pieces[0].samples <= self.origin:
                self.pieces.popleft()
        return start

    def cut(self, start: int, end: int) -> bytes:
        start, end = max(start, self.origin), min(end, self.end)
        if end <= start:
            return b""
        return bytes(self.pcm[(start - self.origin) * 2:(end - self.origin) * 2])

    def _piece_at(self, sample: int) -> _Piece | None:
        if not self.pieces:
            return None
        starts = [p.start for p in self.pieces]
        return self.pieces[max(0, bisect_right(starts, sample) - 1)]

    def received_at(self, sample: int) -> float | None:
        """When the gateway received the audio holding `sample` (monotonic), for latency figures."""
        piece = self._piece_at(sample)
        return None if piece is None else piece.received


@dataclass
class CameraFrame:
    ts_ms: float
    jpeg: bytes
    thumb: np.ndarray = field(repr=False)


def decode_jpeg(payload: bytes, max_pixels: int) -> np.ndarray:
    """Check a JPEG without trusting it: size from the header first (decompression bombs), then a cheap decode.

    Returns a 16x16 grayscale thumbnail used to drop near-identical keyframes.
    """
    try:
        with Image.open(io.BytesIO(payload)) as img:
            if img.format != "JPEG":
                raise InputError("bad_frame", f"camera frame is {img.format}, not JPEG")
            width, height = img.size
            if width * height > max_pixels:
                raise InputError("too_large", f"camera frame of {width}x{height} pixels is over the "
                                                 f"{max_pixels}-pixel limit; send at most 640 px on the long side")
            img.draft("L", (64, 64))
            thumb = img.convert("L").resize((16, 16))
            return np.asarray(thumb, dtype=np.float32)
    except InputError:
        raise
    except Image.DecompressionBombError as exc:  # Pillow's own guard fires at open for the most extreme ones
        raise InputError("too_large", f"camera frame is far over the {max_pixels}-pixel limit ({exc})") from None
    except Exception as exc:  # Pillow raises many types for broken data; all mean the same to the client
        raise InputError("bad_frame", f"camera frame is not a decodable JPEG ({exc})") from None


def check_image(payload: bytes, max_pixels: int) -> str:
    """Decode a JPEG or PNG whole without trusting it, as it arrives: the size from the header first (a
    decompression bomb is refused before any pixel is decoded), then every pixel, so a mislabelled, truncated or
    corrupt file is refused here rather than failing later in the llm. Returns Pillow's format name.

    Decoding is CPU work of tens of ms for a large image: callers run it in a worker thread.
    """
    try:
        with Image.open(io.BytesIO(payload), formats=("JPEG", "PNG")) as img:
            width, height = img.size
            if width * height > max_pixels:
                raise InputError("too_large", f"an image of {width}x{height} pixels is over the {max_pixels}-pixel "
                                              "limit (SOTTO_GATEWAY_MAX_IMAGE_PIXELS)")
            img.load()
            return str(img.format)
    except InputError:
        raise
    except Image.DecompressionBombError as exc:
        raise InputError("too_large", f"an image far over the {max_pixels}-pixel limit ({exc})") from None
    except Exception as exc:  # Pillow raises many types for broken data; all mean the same to the client
        raise InputError("bad_frame", f"not a decodable JPEG or PNG image ({exc})") from None


NEAR_IDENTICAL = 3.0  # mean absolute difference (0-255) of 16x16 thumbnails below which frames count as the same


def pick_keyframes(frames: list[CameraFrame], start_ts: float, end_ts: float, slack_ms: float = 500.0
                   ) -> list[CameraFrame]:
    """The first frame, one about 1 s in and the last, of those captured during the utterance; never every frame."""
    inside = [f for f in frames if start_ts - slack_ms <= f.ts_ms <= end_ts + slack_ms]
    if not inside:
        earlier = [f for f in frames if f.ts_ms <= end_ts]
        inside = earlier[-1:]  # the camera was on but sent nothing during speech: the latest view
    if not inside:
        return []
    one_second = min(inside, key=lambda f: abs(f.ts_ms - (start_ts + 1000.0)))
    chosen: list[CameraFrame] = []
    for frame in (inside[0], one_second, inside[-1]):
        if any(frame is c or float(np.abs(frame.thumb - c.thumb).mean()) < NEAR_IDENTICAL for c in chosen):
            continue
        chosen.append(frame)
    return sorted(chosen, key=lambda f: f.ts_ms)
