"""The engine adapter against the real LiteRT-LM engine on the tiny multimodal fixture."""

from __future__ import annotations

import threading

import pytest

from services.llm.conversations import Turn, audio_digest
from services.llm.engine import (
    EngineConfig,
    FinishReason,
    Finished,
    GenerateRequest,
    LlmEngine,
    Sampling,
    TextDelta,
)
from services.llm import generation as generation_module
from services.llm import gpu
from services.llm.errors import EngineError
from tests.llm.conftest import EXPECTED_BACKEND, LIVE_GPU, TINY_MM, TINY_TEXT, image_bytes, wav_seconds

GREEDY = Sampling.greedy(max_new_tokens=16)


def run(engine, **fields) -> tuple[list[TextDelta], Finished]:
    *deltas, finished = engine.generate(GenerateRequest(**fields))
    assert all(isinstance(d, TextDelta) for d in deltas)
    assert isinstance(finished, Finished)
    return deltas, finished


def test_model_info_reports_modalities_and_backends(tiny_engine):
    info = tiny_engine.info
    assert info.audio and info.vision
    assert info.name == "tiny-gemma4-mm"
    assert info.backend == EXPECTED_BACKEND and info.vision_backend == EXPECTED_BACKEND
    assert info.audio_backend == "cpu"  # the audio encoder is CPU-only by the model's design
    assert info.context_tokens == 2048  # the fixture's own KV cache length


def test_text_streams_several_deltas_with_consistent_figures(tiny_engine):
    deltas, done = run(tiny_engine, text="Tell me something.", sampling=Sampling.greedy(20))
    assert len(deltas) > 1
    assert done.text == "".join(d.text for d in deltas)
    assert done.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert 0 < done.decode_tokens <= 20
    assert done.prefill_tokens > 0
    assert done.prefill_tokens + done.decode_tokens == done.context_tokens  # a fresh conversation
    assert 0 < done.time_to_first_token_s <= done.total_s
    assert done.decode_tokens_per_s > 0 and done.prefill_tokens_per_s > 0


def test_audio_image_and_text_all_reach_the_model(tiny_engine, speech):
    """Streaming text alone proves nothing (a missing encoder silently drops media): the KV cache
    must grow by about 25 tokens per second of audio and by the image's soft tokens."""
    wav = speech("What is the capital of France? Tell me in one word, please.")
    jpeg = image_bytes("JPEG")
    _, text_only = run(tiny_engine, text="Describe.", sampling=GREEDY)
    _, with_audio = run(tiny_engine, text="Describe.", audio=(wav,), sampling=GREEDY)
    _, with_image = run(tiny_engine, text="Describe.", images=(jpeg,), sampling=GREEDY)
    deltas, everything = run(tiny_engine, text="Describe.", audio=(wav,), images=(jpeg,), sampling=GREEDY)

    audio_tokens = with_audio.prefill_tokens - text_only.prefill_tokens
    image_tokens = with_image.prefill_tokens - text_only.prefill_tokens
    seconds = wav_seconds(wav)
    assert 20 * seconds <= audio_tokens - 2 <= 30 * seconds + 2, (audio_tokens, seconds)  # + <|audio> <audio|>
    assert 50 <= image_tokens <= 142, image_tokens  # up to 140 soft tokens + <|image> <image|>
    assert everything.prefill_tokens == text_only.prefill_tokens + audio_tokens + image_tokens
    assert len(deltas) > 1 and everything.text


def test_audio_tokens_grow_with_duration(tiny_engine, speech):
    short = speech("Hello.")
    long = speech("Hello there. This is a much longer sentence, spoken slowly, to fill several seconds of audio.")
    _, a = run(tiny_engine, text="x", audio=(short,), sampling=GREEDY)
    _, b = run(tiny_engine, text="x", audio=(long,), sampling=GREEDY)
    rate = (b.prefill_tokens - a.prefill_tokens) / (wav_seconds(long) - wav_seconds(short))
    assert 20 <= rate <= 30, rate


def test_several_images_in_one_message(tiny_engine):
    png = image_bytes("PNG", size=(200, 200))
    _, one = run(tiny_engine, text="x", images=(png,), sampling=GREEDY)
    _, two = run(tiny_engine, text="x", images=(png, png), sampling=GREEDY)
    _, none = run(tiny_engine, text="x", sampling=GREEDY)
    assert two.prefill_tokens - none.prefill_tokens == 2 * (one.prefill_tokens - none.prefill_tokens)


def test_greedy_is_deterministic(tiny_engine):
    _, a = run(tiny_engine, text="Same prompt.", sampling=GREEDY)
    _, b = run(tiny_engine, text="Same prompt.", sampling=GREEDY)
    assert a.text == b.text and a.decode_tokens == b.decode_tokens


def _prompt_that_stops(engine, system_prompt: str) -> tuple[str, str]:
    """A prompt whose greedy reply ends by itself (finish reason stop), found deterministically."""
    for i in range(200):
        prompt = f"question {i}"
        _, done = run(engine, text=prompt, system_prompt=system_prompt, sampling=Sampling.greedy(40))
        if done.finish_reason is FinishReason.STOP:
            assert done.decode_tokens == len(done.text) + 1  # one token per character, plus the stop
            return prompt, done.text
    pytest.fail("no prompt with a natural stop among 200")


def test_reused_and_rebuilt_conversations_answer_identically(tiny_engine):
    system = "You are terse."
    prompt, _ = _prompt_that_stops(tiny_engine, system)
    first = GenerateRequest(text=prompt, system_prompt=system, sampling=Sampling.greedy(40), session_id="reuse")
    *_, done = tiny_engine.generate(first)
    assert done.finish_reason is FinishReason.STOP and not done.reused_conversation
    history = (Turn("user", prompt), Turn("assistant", done.text))
    follow_up = dict(text="And then?", system_prompt=system, history=history, sampling=Sampling.greedy(12))

    _, reused = run(tiny_engine, session_id="reuse", **follow_up)
    _, rebuilt = run(tiny_engine, session_id="fresh-session", **follow_up)
    assert reused.reused_conversation and not rebuilt.reused_conversation
    assert reused.context_tokens == rebuilt.context_tokens  # the same tokens in both KV caches
    assert reused.prefill_tokens < rebuilt.prefill_tokens  # only the new turn was prefilled
    assert reused.text == rebuilt.text


def test_a_spoken_turn_is_matched_by_its_audio_and_rebuilt_from_its_words(tiny_engine, speech):
    """The gateway's history holds a spoken turn's transcript, which the model never saw as text: the turn still
    matches the conversation holding its audio (by digest), and a rebuild carries the words instead."""
    wav = speech("What is the capital of France?")
    for i in range(100):
        prompt = f"question {i}"
        _, probe = run(tiny_engine, text=prompt, audio=(wav,), sampling=Sampling.greedy(40))
        if probe.finish_reason is FinishReason.STOP:
            break
    else:
        pytest.fail("no spoken question with a natural stop among 100")
    _, spoken = run(tiny_engine, text=prompt, audio=(wav,), sampling=Sampling.greedy(40), session_id="spoken")
    assert spoken.finish_reason is FinishReason.STOP

    def history(words: str, clip: bytes = wav) -> tuple[Turn, ...]:
        return Turn("user", words, audio_digest((clip,))), Turn("assistant", spoken.text)

    follow_up = dict(text="And then?", sampling=GREEDY)
    _, reused = run(tiny_engine, history=history("What is the capital of France?"), session_id="spoken", **follow_up)
    assert reused.reused_conversation
    _, other_audio = run(tiny_engine, history=history("What is the capital of France?", speech("Hello there.")),
                         session_id="spoken", **follow_up)
    assert not other_audio.reused_conversation
    _, short = run(tiny_engine, history=history("France?"), session_id="rebuilt-a", **follow_up)
    _, long = run(tiny_engine, history=history("What is the capital of France?"), session_id="rebuilt-b", **follow_up)
    assert not short.reused_conversation and not long.reused_conversation
    assert long.prefill_tokens - short.prefill_tokens >= len("What is the capital of ") // 4  # the words are in it


def test_session_is_rebuilt_when_history_differs(tiny_engine):
    system = "You are terse."
    prompt, reply = _prompt_that_stops(tiny_engine, system)
    run(tiny_engine, text=prompt, system_prompt=system, sampling=Sampling.greedy(40), session_id="edited")
    edited = (Turn("user", prompt), Turn("assistant", reply[: len(reply) // 2]))  # e.g. barge-in cut it
    _, done = run(tiny_engine, text="Go on.", system_prompt=system, history=edited, sampling=GREEDY,
                  session_id="edited")
    assert not done.reused_conversation


def test_truncated_reply_is_not_reused(tiny_engine):
    _, first = run(tiny_engine, text="Talk at length.", sampling=Sampling.greedy(3), session_id="trunc")
    assert first.finish_reason is FinishReason.LENGTH
    history = (Turn("user", "Talk at length."), Turn("assistant", first.text))
    _, second = run(tiny_engine, text="More.", history=history, sampling=GREEDY, session_id="trunc")
    assert not second.reused_conversation


@pytest.fixture(scope="module")
def endless(tiny_engine) -> str:
    """A prompt whose greedy reply runs to 1900 tokens (random weights rarely loop forever)."""
    for i in range(100):
        prompt = f"story {i}"
        _, done = run(tiny_engine, text=prompt, sampling=Sampling.greedy(1900))
        if done.finish_reason is FinishReason.LENGTH:
            return prompt
    pytest.fail("no prompt runs to the token limit among 100")


def test_cancel_mid_decode_stops_the_decode_and_the_session_recovers(tiny_engine, endless):
    generation = tiny_engine.generate(
        GenerateRequest(text=endless, sampling=Sampling.greedy(1500), session_id="cancel-me")
    )
    deltas = 0
    for event in generation:
        if isinstance(event, TextDelta):
            deltas += 1
            if deltas == 5:
                generation.cancel()
        else:
            done = event
    assert done.finish_reason is FinishReason.CANCELLED
    assert deltas == 5  # nothing decoded after the cancel reaches the caller
    assert done.decode_tokens < 1500

    history = (Turn("user", endless), Turn("assistant", done.text))
    _, after = run(tiny_engine, text="Hello?", history=history, sampling=GREEDY, session_id="cancel-me")
    assert after.finish_reason in (FinishReason.STOP, FinishReason.LENGTH)
    assert not after.reused_conversation and after.decode_tokens > 0


def test_cancel_from_another_thread_while_queued(tiny_engine, endless):
    """A request waiting for the engine can be cancelled before it ever runs."""
    busy = tiny_engine.generate(GenerateRequest(text=endless, sampling=Sampling.greedy(1500)))
    first = next(iter(busy))  # holds the engine
    assert isinstance(first, TextDelta)
    queued = tiny_engine.generate(GenerateRequest(text="Waiting.", sampling=GREEDY))
    events: list = []
    waiter = threading.Thread(target=lambda: events.extend(queued))  # waits for the engine `busy` holds
    waiter.start()
    queued.cancel()
    waiter.join(30)
    assert not waiter.is_alive(), "the queued generation did not end on its cancel"
    (done,) = events
    assert done.finish_reason is FinishReason.CANCELLED and done.text == ""
    busy.cancel()
    *_, busy_done = busy
    assert busy_done.finish_reason is FinishReason.CANCELLED


def test_abandoned_stream_stops_the_engine(tiny_engine, endless, monkeypatch):
    drained: list[int] = []

    def counting_drain(stream) -> None:  # what the native decode still sent after the consumer left
        count = 0
        try:
            for _ in stream:
                count += 1
        except RuntimeError:
            pass
        drained.append(count)

    monkeypatch.setattr(generation_module, "_drain", counting_drain)
    generation = tiny_engine.generate(GenerateRequest(text=endless, sampling=Sampling.greedy(1900)))
    next(iter(generation))
    generation._events.close()  # the consumer walks away (e.g. the gRPC call was cancelled)
    assert len(drained) == 1 and drained[0] < 1800  # the decode stopped: not the other 1899 tokens
    _, done = run(tiny_engine, text="Next.", sampling=GREEDY)
    assert done.decode_tokens > 0  # the engine is free again


def test_time_limit_ends_as_degraded_with_partial_text(tmp_path, endless):
    engine = LlmEngine(EngineConfig(model_path=str(TINY_MM), cache_dir=str(tmp_path), time_limit_s=0.25))
    try:
        deltas, done = run(engine, text=endless, sampling=Sampling.greedy(1900))
        assert done.finish_reason is FinishReason.DEGRADED
        assert done.text and done.text == "".join(d.text for d in deltas)
        assert done.total_s >= 0.25
    finally:
        engine.close()


def test_missing_model_is_a_clear_error(tmp_path):
    with pytest.raises(EngineError, match="model file not found"):
        LlmEngine(EngineConfig(model_path=str(tmp_path / "nope.litertlm"), cache_dir=str(tmp_path)))


def test_corrupt_model_error_carries_the_native_reason(tmp_path):
    bad = tmp_path / "bad.litertlm"
    bad.write_bytes(b"LITERTLM" + b"\0" * 4096)
    with pytest.raises(EngineError) as caught:
        LlmEngine(EngineConfig(model_path=str(bad), cache_dir=str(tmp_path)))
    assert caught.value.reason  # what the native library printed, not a bare "failed"
    assert "bad.litertlm" in str(caught.value)


def test_warmup_runs_a_real_generation(tiny_engine):
    done = tiny_engine.warmup()
    assert done.decode_tokens > 0 and done.prefill_tokens > 100  # audio and image went through


@pytest.mark.skipif(gpu.probe().usable, reason="this machine has a usable GPU: the no-GPU errors cannot be seen")
def test_an_explicit_gpu_without_one_names_the_missing_piece(tmp_path):
    with pytest.raises(EngineError) as caught:
        LlmEngine(EngineConfig(model_path=str(TINY_MM), cache_dir=str(tmp_path), backend="gpu", vision_backend="cpu"))
    assert "no usable GPU" in str(caught.value)
    assert "Vulkan" in caught.value.reason


@pytest.mark.skipif(gpu.probe().usable, reason="this machine has a usable GPU: auto picks it")
def test_auto_serves_on_the_cpu_and_says_why(tmp_path):
    engine = LlmEngine(EngineConfig(model_path=str(TINY_TEXT), cache_dir=str(tmp_path)))
    try:
        assert engine.info.backend == "cpu"
        assert engine.info.backend_reason.startswith("no GPU: ") and "Vulkan" in engine.info.backend_reason
    finally:
        engine.close()


def test_auto_falls_back_to_cpu_when_the_gpu_fails(tmp_path, monkeypatch):
    """A GPU the probe saw but the engine cannot use (driver trouble, no WebGPU adapter): serve on the CPU, say why."""
    monkeypatch.setattr(gpu, "probe", lambda: gpu.GpuProbe(True, device="Pretend GPU (Vulkan)"))
    if LIVE_GPU:
        pytest.skip("this machine's GPU would load the model: the fallback cannot be seen")
    engine = LlmEngine(EngineConfig(model_path=str(TINY_MM), cache_dir=str(tmp_path)))
    try:
        assert engine.info.backend == "cpu" and engine.info.vision_backend == "cpu"
        assert engine.info.backend_reason.startswith("the GPU (Pretend GPU (Vulkan)) failed to load the model: ")
        assert engine.warmup().decode_tokens > 0
    finally:
        engine.close()
