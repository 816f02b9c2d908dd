"""Keep the last lines the native LiteRT-LM library wrote to file descriptor 2.

LiteRT-LM reports failures to Python as a bare RuntimeError ("Failed to create engine"); the reason
("tf_lite_audio_encoder_hw not found", ...) only reaches the process's stderr, from native threads.
`StderrTap` puts a pipe on fd 2, copies everything through to the previous stderr (nothing is
hidden) and remembers recent lines, so an error can quote what the library said.

If something else later replaces fd 2 (pytest's capture does, per test), `mark()` notices and puts
the tap back in front of whatever fd 2 now is.

`mark()` is on every generation's way to its first token, so it does not wait for the pump: it writes a
marker line and returns at once; the pump notes where the marker fell, and only `since()` (an error's
path) waits for it.
"""

from __future__ import annotations

import collections
import itertools
import os
import re
import threading
import time
import uuid

_SEVERE_PREFIXES = ("E0", "F0", "ERROR", "FATAL")
_MARKS_KEPT = 256  # where recent marks fell; an older mark's `since` falls back to every line kept


class StderrTap:
    """A process-wide tee of fd 2 with a bounded memory of numbered lines."""

    def __init__(self, max_lines: int = 400):
        self._lines: collections.deque[tuple[int, str]] = collections.deque(maxlen=max_lines)
        self._seq = 0
        self._lock = threading.Lock()
        self._seen = threading.Condition(self._lock)
        self._read_fd, self._write_fd = os.pipe()
        self._echo_fd: int | None = None
        self._markers: set[str] = set()  # written, not yet read by the pump
        self._positions: collections.OrderedDict[str, int] = collections.OrderedDict()  # marker -> seq before it
        self._ids = itertools.count()
        self._run = uuid.uuid4().hex[:12]  # makes this tap's markers unlike any text the library writes
        self._thread = threading.Thread(target=self._pump, name="llm-stderr-tap", daemon=True)
        self._thread.start()
        self._ensure_installed()

    def _installed(self) -> bool:
        try:
            return os.path.sameopenfile(2, self._write_fd)
        except OSError:
            return False

    def _ensure_installed(self) -> None:
        with self._lock:
            if self._installed():
                return
            old_echo = self._echo_fd
            self._echo_fd = os.dup(2)
            os.dup2(self._write_fd, 2)
            if old_echo is not None:
                os.close(old_echo)

    def _pump(self) -> None:
        pending = b""
        while True:
            chunk = os.read(self._read_fd, 65536)
            if not chunk:
                return
            pending += chunk
            *complete, pending = pending.split(b"\n")
            passthrough = []
            with self._lock:
                for raw in complete:
                    line = raw.decode("utf-8", "replace")
                    # A marker may follow a partial line someone else left on fd 2 (a progress bar's "\r").
                    marker = next((m for m in self._markers if line.endswith(m)), None)
                    if marker is not None:
                        line, raw = line[: -len(marker)], raw[: -len(marker.encode())]
                    if line or marker is None:
                        self._seq += 1
                        self._lines.append((self._seq, line))
                        passthrough.append(raw + b"\n")
                    if marker is not None:
                        self._markers.discard(marker)
                        self._positions[marker] = self._seq  # the partial line before it is not "since"
                        while len(self._positions) > _MARKS_KEPT:
                            self._positions.popitem(last=False)
                        self._seen.notify_all()
                echo = self._echo_fd
            if echo is not None and passthrough:
                try:
                    os.write(echo, b"".join(passthrough))
                except OSError:
                    pass

    def mark(self) -> str:
        """Return a mark; `since(mark)` later gives the lines written after it. Does not wait for the pump."""
        self._ensure_installed()
        return self._write_marker()

    def _write_marker(self) -> str:
        marker = f"--llm-stderr-tap-{self._run}-{next(self._ids)}--"
        with self._lock:
            self._markers.add(marker)
        os.write(2, (marker + "\n").encode())
        return marker

    def sync(self, timeout: float = 0.5) -> None:
        """Wait until everything already written to fd 2 has been read by the pump."""
        marker = self._write_marker()
        deadline = time.monotonic() + timeout
        with self._lock:
            while marker in self._markers:
                left = deadline - time.monotonic()
                if left <= 0 or not self._installed():
                    self._markers.discard(marker)
                    return
                self._seen.wait(left)

    def since(self, mark: str) -> list[str]:
        self.sync()
        with self._lock:
            position = self._positions.get(mark, 0)
            return [line for seq, line in self._lines if seq > position]

    def reason_since(self, mark: str, max_lines: int = 3) -> str:
        """The native library's error lines since `mark` (or its last lines), in one string."""
        lines = [line.strip() for line in self.since(mark) if line.strip()]
        severe = [line for line in lines if line.startswith(_SEVERE_PREFIXES) or "rror" in line]
        chosen = (severe or lines)[-max_lines:]
        return " | ".join(_strip_log_prefix(line) for line in chosen)


_GLOG_PREFIX = re.compile(r"^[EFWI]\d{4} [\d:.]+\s+\d+\s+")


def _strip_log_prefix(line: str) -> str:
    """'E0000 00:00:17.1  8591 engine.cc:112] Reason' -> 'engine.cc:112] Reason'."""
    return _GLOG_PREFIX.sub("", line)


_TAP: StderrTap | None = None
_TAP_LOCK = threading.Lock()


def stderr_tap() -> StderrTap:
    """The process's one tap, created on first use."""
    global _TAP
    with _TAP_LOCK:
        if _TAP is None:
            _TAP = StderrTap()
        return _TAP
