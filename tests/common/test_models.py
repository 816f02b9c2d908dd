"""Model resolution: explicit path, cache, download from a stand-in hub on 127.0.0.1, clear failure."""

from __future__ import annotations

import hashlib
import socket
import threading
from collections.abc import Iterator
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from services.common.config import CommonConfig
from services.common.models import HubFile, ModelUnavailable, resolve

PAYLOAD = bytes(range(256)) * 4096  # 1 MiB
COMMIT = "a" * 40
REPO = "sotto-test/tiny"
FILE = "model.bin"


class _Hub(BaseHTTPRequestHandler):
    """Just enough of the hub's file API for huggingface_hub: HEAD for metadata, GET with Range for data."""

    fail_first_get = False
    gets = 0

    def log_message(self, *args: object) -> None:
        pass

    def _headers(self, length: int, status: int = 200) -> None:
        self.send_response(status)
        self.send_header("X-Repo-Commit", COMMIT)
        self.send_header("ETag", '"' + hashlib.sha256(PAYLOAD).hexdigest() + '"')
        self.send_header("Content-Length", str(length))
        self.end_headers()

    def do_HEAD(self) -> None:
        if not self.path.endswith(f"/{FILE}"):
            self.send_error(404)
            return
        self._headers(len(PAYLOAD))

    def do_GET(self) -> None:
        if not self.path.endswith(f"/{FILE}"):
            self.send_error(404)
            return
        type(self).gets += 1
        start = 0
        if rng := self.headers.get("Range"):
            start = int(rng.split("=")[1].split("-")[0])
        body = PAYLOAD[start:]
        if start:
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(PAYLOAD) - 1}/{len(PAYLOAD)}")
            self.send_header("X-Repo-Commit", COMMIT)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
        else:
            self._headers(len(body))
        if type(self).fail_first_get and type(self).gets == 1:
            self.wfile.write(body[: len(body) // 2])  # then drop the connection mid-file
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(body)


@pytest.fixture
def hub() -> Iterator[str]:
    _Hub.gets = 0
    _Hub.fail_first_get = False
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Hub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture
def common(tmp_path: Path, hub: str) -> CommonConfig:
    return CommonConfig(model_dir=tmp_path / "models", hf_endpoint=hub)


def test_explicit_path_wins(tmp_path: Path, common: CommonConfig) -> None:
    local = tmp_path / "mine.bin"
    local.write_bytes(b"x")
    assert resolve(HubFile(REPO, FILE), local, "SOTTO_X", common) == local
    assert _Hub.gets == 0


def test_missing_explicit_path_names_the_variable(tmp_path: Path, common: CommonConfig) -> None:
    with pytest.raises(ModelUnavailable, match="SOTTO_X=.*does not exist"):
        resolve(HubFile(REPO, FILE), tmp_path / "nope.bin", "SOTTO_X", common)


def test_download_then_cache_hit_offline(common: CommonConfig) -> None:
    path = resolve(HubFile(REPO, FILE), None, "SOTTO_X", common)
    assert path.read_bytes() == PAYLOAD
    again = resolve(HubFile(REPO, FILE), None, "SOTTO_X", replace(common, offline=True))
    assert again.read_bytes() == PAYLOAD
    assert _Hub.gets == 1


def test_interrupted_download_leaves_no_corrupt_file_and_resumes(common: CommonConfig) -> None:
    _Hub.fail_first_get = True
    try:
        first = resolve(HubFile(REPO, FILE), None, "SOTTO_X", common)
    except ModelUnavailable as exc:
        assert "download failed" in str(exc)
        with pytest.raises(ModelUnavailable):  # nothing half-written is served from the cache
            resolve(HubFile(REPO, FILE), None, "SOTTO_X", replace(common, offline=True))
        first = resolve(HubFile(REPO, FILE), None, "SOTTO_X", common)
    assert first.read_bytes() == PAYLOAD  # either retried internally or resumed: never corrupt
    assert not list(common.model_dir.rglob("*.incomplete"))


def test_offline_and_uncached_says_the_three_ways(common: CommonConfig) -> None:
    with pytest.raises(ModelUnavailable) as info:
        resolve(HubFile(REPO, "other.bin"), None, "SOTTO_X", replace(common, offline=True))
    message = str(info.value)
    assert "other.bin" in message and "SOTTO_X" in message and "cache" in message and "SOTTO_OFFLINE" in message


def test_unreachable_hub_is_a_clear_error(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}"
    common = CommonConfig(model_dir=tmp_path / "m", hf_endpoint=dead)
    with pytest.raises(ModelUnavailable, match="download failed"):
        resolve(HubFile(REPO, FILE), None, "SOTTO_X", common)
