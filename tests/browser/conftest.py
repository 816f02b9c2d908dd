"""Fixtures for the browser tests: vendor files, media fixtures, the fake gateway, one scripted conversation.

The conversation runs once per module (the fake microphone plays its WAV once per browser launch); each test then
checks one property of what the page and the fake server recorded. Screenshots go to the pytest temporary folder
(printed by `pytest -s`), or to $SOTTO_TEST_ARTIFACTS when set.

By default the page is served by tests/browser/fake_gateway.py. With SOTTO_BROWSER_GATEWAY_URL (e.g.
http://127.0.0.1:8000/) the conversation runs against that server instead; checks that need the fake's recording of
the wire, or its scripted answers, are then skipped.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from tests.browser import fake_gateway, media_fixtures, page_driver
from tools import web_assets

STATIC_DIR = Path(__file__).resolve().parents[2] / "services" / "gateway" / "static"


@dataclass
class Media:
    speech_wav: Path
    camera_y4m: Path
    utterance_ends_s: dict[str, float]


EXTERNAL_URL = os.environ.get("SOTTO_BROWSER_GATEWAY_URL")


@dataclass
class Conversation:
    run: page_driver.ConversationRun
    recorder_or_none: fake_gateway.Recorder | None
    media: Media

    @property
    def recorder(self) -> fake_gateway.Recorder:
        if self.recorder_or_none is None:
            pytest.skip("needs the fake gateway's recording (SOTTO_BROWSER_GATEWAY_URL is set)")
        return self.recorder_or_none


@pytest.fixture(scope="session")
def vendor_dir() -> Path:
    if not shutil.which(page_driver.CHROMIUM):
        pytest.fail(f"{page_driver.CHROMIUM} is missing: apt-get install -y chromium (or set SOTTO_CHROMIUM)")
    return web_assets.build()


@pytest.fixture(scope="session")
def artifacts(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = Path(os.environ["SOTTO_TEST_ARTIFACTS"]) if os.environ.get("SOTTO_TEST_ARTIFACTS") else \
        tmp_path_factory.mktemp("browser-artifacts")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="session")
def media(tmp_path_factory: pytest.TempPathFactory) -> Media:
    folder = tmp_path_factory.mktemp("media")
    speech = folder / "speech.wav"
    ends = media_fixtures.speech_timeline(speech, page_driver.FAKE.speech, page_driver.FAKE.total_s)
    return Media(speech, media_fixtures.camera_y4m(folder / "camera.y4m"), ends)


@contextlib.asynccontextmanager
async def serve_fake_gateway(vendor: Path, recorder: fake_gateway.Recorder,
                             script: fake_gateway.Script) -> AsyncIterator[str]:
    runner = web.AppRunner(fake_gateway.create_app(STATIC_DIR, vendor, recorder, script))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        host, port = runner.addresses[0][:2]
        yield f"http://{host}:{port}/"
    finally:
        await runner.cleanup()


@pytest.fixture(scope="module")
def conversation(vendor_dir: Path, media: Media, artifacts: Path) -> Iterator[Conversation]:
    recorder = None if EXTERNAL_URL else fake_gateway.Recorder()

    async def converse(url: str) -> page_driver.ConversationRun:
        return await asyncio.wait_for(
            page_driver.run_conversation(url, media.speech_wav, media.camera_y4m, artifacts), timeout=120)

    async def run() -> page_driver.ConversationRun:
        if EXTERNAL_URL:
            return await converse(EXTERNAL_URL)
        async with serve_fake_gateway(vendor_dir, recorder, fake_gateway.Script(page_driver.REPLY_SECONDS)) as url:
            return await converse(url)

    result = asyncio.run(run())
    print(f"browser conversation: {result.seconds:.1f} s, screenshots in {artifacts}")
    yield Conversation(result, recorder, media)
