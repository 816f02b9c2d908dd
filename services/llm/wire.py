"""Protobuf <-> engine: the llm service's requests and replies translated, and nothing else.

Kept apart from the servicer so that other in-process callers (the benchmark's direct path) build exactly the
engine request the service would.
"""

from __future__ import annotations

from services.llm.conversations import Turn
from services.llm.engine import FinishReason, Finished, GenerateRequest, Sampling
from services.llm.errors import InvalidInput
from services.llm.loading import SamplingDefaults
from sotto.v1 import common_pb2, llm_pb2

_FINISH = {
    FinishReason.STOP: llm_pb2.STOP,
    FinishReason.LENGTH: llm_pb2.LENGTH,
    FinishReason.CANCELLED: llm_pb2.CANCELLED,
    FinishReason.DEGRADED: llm_pb2.DEGRADED,
}
_ROLES = {common_pb2.Turn.ROLE_USER: "user", common_pb2.Turn.ROLE_ASSISTANT: "assistant"}


def to_engine_request(request: llm_pb2.GenerateRequest, defaults: SamplingDefaults) -> GenerateRequest:
    """Protobuf -> engine request; unset sampling fields take the service defaults."""
    s = request.sampling
    sampling = Sampling(
        temperature=s.temperature if s.HasField("temperature") else defaults.temperature,
        top_p=s.top_p if s.HasField("top_p") else defaults.top_p,
        top_k=s.top_k if s.HasField("top_k") else defaults.top_k,
        seed=s.seed if s.HasField("seed") else None,
        max_new_tokens=s.max_new_tokens if s.HasField("max_new_tokens") else defaults.max_new_tokens,
    )
    history = []
    for turn in request.history:
        if turn.role not in _ROLES:
            raise InvalidInput("history turn has no role: set ROLE_USER or ROLE_ASSISTANT")
        history.append(Turn(_ROLES[turn.role], turn.text, turn.audio_sha256))
    user = request.user
    return GenerateRequest(
        text=user.text,
        audio=(user.audio_wav,) if user.audio_wav else (),
        images=tuple(image.data for image in user.images),
        system_prompt=request.system_prompt,
        history=tuple(history),
        sampling=sampling,
        session_id=request.session_id or None,
    )


def done_event(finished: Finished, queue_wait_s: float) -> llm_pb2.GenerateEvent:
    ttft = finished.time_to_first_token_s
    return llm_pb2.GenerateEvent(
        done=llm_pb2.GenerateDone(
            finish_reason=_FINISH[finished.finish_reason],
            text=finished.text,
            timings=llm_pb2.GenerateTimings(
                queue_wait_ms=queue_wait_s * 1000,
                time_to_first_token_ms=0.0 if ttft is None else ttft * 1000,
                prefill_tokens=finished.prefill_tokens,
                decode_tokens=finished.decode_tokens,
                prefill_tokens_per_s=finished.prefill_tokens_per_s,
                decode_tokens_per_s=finished.decode_tokens_per_s,
                total_ms=finished.total_s * 1000,
                reused_conversation=finished.reused_conversation,
            ),
        )
    )
