"""The real stack for end-to-end tests (tools.stack): the real vad, llm, tts and gateway on free ports. No fakes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tools.stack import RealStack, start_stack, stop_stack


@pytest.fixture(scope="session")
def real_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealStack]:
    stack = start_stack(tmp_path_factory.mktemp("stack"))
    yield stack
    stop_stack(stack)
