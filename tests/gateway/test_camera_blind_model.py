"""The camera with a model that cannot see (the offline SmolLM2): the spoken turn is answered from the words alone,
no frame reaches the llm, and session.ready says the model takes no images (the page's note hangs on it)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from services.gateway.wires.protocol import FrameKind, pack_frame
from tests.gateway.conftest import silence, speech
from tests.gateway.test_turns import jpeg

BLIND = {"llm": {"audio_input": False, "image_input": False}}
pytestmark = pytest.mark.timeout(60)


async def ready_client(connect, image_input: bool):
    """A session opened once the gateway knows the model's modalities (asked when the llm reports SERVING)."""
    for _ in range(100):
        client = await connect()
        if client.events[0].get("model", {}).get("image_input") is image_input:
            return client
        await client.close()
        await asyncio.sleep(0.05)
    raise AssertionError("the gateway never learnt the model's modalities")


async def speak_with_camera(client, ts0: float = 5_000_000.0) -> None:
    for i, color in enumerate([(200, 0, 0), (0, 0, 200), (0, 200, 0)]):
        await client.ws.send_bytes(pack_frame(FrameKind.JPEG, i, ts0 + 100 + i * 500, jpeg(color)))
    await client.send_audio(np.concatenate([silence(0.3), speech(1.2), silence(0.5)]), ts0=ts0)


@pytest.mark.parametrize("stack", [BLIND], indirect=True)
async def test_a_model_that_cannot_see_answers_a_spoken_turn_with_the_camera_on(stack, connect):
    client = await ready_client(connect, image_input=False)
    await speak_with_camera(client)
    done = await client.wait_for("turn.done")
    assert done["finish_reason"] == "stop" and client.audio_after("audio.start") > 0
    assert "error" not in client.types()
    user = stack.llm.requests[0].user
    assert list(user.images) == [] and user.text == stack.asr.words

    # The next turn takes no frame left over from the first either.
    await speak_with_camera(client, ts0=7_000_000.0)
    await client.wait_for("turn.done", count=2)
    assert list(stack.llm.requests[1].user.images) == [] and "error" not in client.types()


async def test_a_model_that_sees_still_gets_the_keyframes(stack, connect):
    client = await ready_client(connect, image_input=True)
    await speak_with_camera(client)
    await client.wait_for("turn.done")
    assert len(stack.llm.requests[0].user.images) >= 2
