"""The llm gRPC service (sotto.v1.LlmService): protobuf in, engine events out, nothing more.

The servicer translates a GenerateRequest into the engine's request, admits it (at most
SOTTO_LLM_MAX_CONCURRENT in flight, FIFO, the next one refused at once as RESOURCE_EXHAUSTED), and
streams the engine's events back (the hand-off from the engine thread is streaming.py). A cancelled call
(client cancel, deadline) cancels the generation and waits until the engine is free before giving up its
slot. Domain errors become statuses here and only here; RPC counts, log ids and the refusal while the model
loads are the shared interceptor's (services.common.interceptor).
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import dataclasses
import logging
import time

import grpc

from services.common import config, grpc_server, logs
from services.llm.admission import Admission
from services.llm.engine import FinishReason, Finished, LlmEngine, TextDelta
from services.llm.errors import Busy, EngineError, InvalidInput, MemoryBudgetError
from services.llm.loading import SamplingDefaults, engine_config, resolve_model
from services.llm.metrics import (
    ACTIVE,
    CANCEL_SECONDS,
    CANCELLED,
    DEGRADED_ROUTED,
    QUEUE_DEPTH,
    REFUSED,
    count_tokens,
    observe_reply,
)
from services.llm.streaming import END, Inbox, pump
from services.llm.wire import done_event, to_engine_request
from sotto.v1 import llm_pb2, llm_pb2_grpc

_LOGGER = logging.getLogger(__name__)
_DEGRADED_SESSIONS_KEPT = 1024


@dataclasses.dataclass(frozen=True)
class Models:
    """What the service's load step built."""

    engine: LlmEngine
    fallback: bool = False  # the offline stand-in serves instead of the configured model
    note: str = ""  # why, for GetModelInfo
    smaller: LlmEngine | None = None  # SOTTO_LLM_FALLBACK_MODEL, for sessions whose reply degraded


async def _wind_down(drain: asyncio.Future, count: bool) -> None:
    """Wait for a cancelled generation's thread to finish; count its tokens unless its reply was counted."""
    try:
        last = await drain
    except Exception:  # noqa: BLE001 - the call is already gone: a late engine error has nobody to go to
        _LOGGER.exception("cancelled_generation_failed")
        return
    if count and last is not None:
        count_tokens(last)


class LlmServicer(llm_pb2_grpc.LlmServiceServicer):
    def __init__(self, admission: Admission, defaults: SamplingDefaults, models: Models | None = None,
                 log_content: bool = False) -> None:
        self.models = models
        self._log_content = log_content  # SOTTO_LOG_CONTENT: the message and the history's text may be logged
        # Once a session's reply degraded (time limit), its later turns go to the smaller model, unless they
        # carry media it cannot take.
        self._degraded_sessions: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._admission = admission
        # The gauges read the admission at scrape time (the last servicer built wins; a process has one).
        QUEUE_DEPTH.set_function(lambda: admission.waiting)
        ACTIVE.set_function(lambda: admission.running)
        self._defaults = defaults
        # One thread per model: the engine runs one generation at a time anyway.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llm-engine")
        self._draining: set[asyncio.Future] = set()

    async def GetModelInfo(self, request, context):
        info = self.models.engine.info
        return llm_pb2.ModelInfo(
            model=info.name,
            backend=info.backend,
            backend_reason=info.backend_reason,
            audio_input=info.audio,
            image_input=info.vision,
            context_tokens=info.context_tokens,
            fallback=self.models.fallback,
            note=self.models.note,
        )

    async def Generate(self, request, context):
        started = time.monotonic()
        admitted = False
        _LOGGER.info("generate_request", extra={
            "history_turns": len(request.history), "audio_bytes": len(request.user.audio_wav),
            "images": len(request.user.images), "text_chars": len(request.user.text),
            **logs.content(self._log_content, text=request.user.text,
                           history=" | ".join(t.text for t in request.history))})
        try:
            engine = self._engine_for(request)
            generation = engine.generate(to_engine_request(request, self._defaults))
            async with self._admission.admit():
                admitted = True
                queue_wait = time.monotonic() - started
                # aclosing: if the call ends while we wait at `yield`, the inner stream is closed
                # here and now (cancel + drain), not whenever the garbage collector gets to it.
                async with contextlib.aclosing(self._stream(generation, queue_wait, request.session_id)) as events:
                    async for event in events:
                        yield event
        except InvalidInput as exc:
            REFUSED.labels("invalid").inc()
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(exc))
        except Busy as exc:
            REFUSED.labels("busy").inc()
            await context.abort(grpc.StatusCode.RESOURCE_EXHAUSTED, str(exc))
        except EngineError as exc:
            _LOGGER.error("engine_error", extra={"error": str(exc)})
            await context.abort(grpc.StatusCode.UNAVAILABLE, str(exc))
        except (asyncio.CancelledError, GeneratorExit):
            # GeneratorExit: the call ended while this generator waited at `yield` (see _stream).
            if not admitted:
                CANCELLED.labels("queued").inc()
            raise

    async def _stream(self, generation, queue_wait: float, session_id: str):
        loop = asyncio.get_running_loop()
        inbox = Inbox()
        running = loop.run_in_executor(self._executor, pump, generation, loop, inbox)
        phase = "prefill"  # what a cancel cuts short; None once the reply is complete
        try:
            while True:
                events = await inbox.take_all()
                text = "".join(event.text for event in events if isinstance(event, TextDelta))
                if text:
                    phase = "decode"
                    yield llm_pb2.GenerateEvent(text_delta=text)
                for event in events:
                    if isinstance(event, Finished):
                        phase = None
                        self._observe(event)
                        self._note_degraded(session_id, event)
                        yield done_event(event, queue_wait)
                if events[-1] is END:
                    await running  # raises what the engine raised
                    return
        except (asyncio.CancelledError, GeneratorExit):
            # The call is gone (cancelled, deadline, server stopping): stop decoding, and hold the
            # admission slot until the engine thread has wound the generation down.
            cancelled_at = time.monotonic()
            generation.cancel()
            if phase is not None:
                CANCELLED.labels(phase).inc()
            drain = asyncio.ensure_future(_wind_down(running, count=phase is not None))
            drain.add_done_callback(lambda _: CANCEL_SECONDS.observe(time.monotonic() - cancelled_at))
            self._draining.add(drain)
            drain.add_done_callback(self._draining.discard)
            await asyncio.shield(drain)
            raise

    @staticmethod
    def _observe(finished: Finished) -> None:
        observe_reply(finished)
        _LOGGER.info("generated", extra={
            "finish": finished.finish_reason.value, "prefill_tokens": finished.prefill_tokens,
            "decode_tokens": finished.decode_tokens, "ttft_ms": round((finished.time_to_first_token_s or 0) * 1000),
            "total_ms": round(finished.total_s * 1000), "reused": finished.reused_conversation,
            "history_dropped": finished.history_dropped,
        })

    def _engine_for(self, request) -> LlmEngine:
        main, smaller = self.models.engine, self.models.smaller
        if smaller is None or request.session_id not in self._degraded_sessions:
            return main
        info = smaller.info
        if (request.user.audio_wav and not info.audio) or (request.user.images and not info.vision):
            return main
        DEGRADED_ROUTED.inc()
        return smaller

    def _note_degraded(self, session_id: str, finished: Finished) -> None:
        if self.models.smaller is not None and session_id and finished.finish_reason is FinishReason.DEGRADED:
            self._degraded_sessions[session_id] = None
            while len(self._degraded_sessions) > _DEGRADED_SESSIONS_KEPT:
                self._degraded_sessions.popitem(last=False)

    async def close(self) -> None:
        """Wait for cancelled generations to wind down, then free the engine."""
        if self._draining:
            await asyncio.wait(set(self._draining))
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        if self.models is None:
            return
        for engine in (self.models.engine, self.models.smaller):
            if engine is not None:
                await asyncio.to_thread(engine.close)


def build() -> tuple[grpc_server.ServiceSpec, config.CommonConfig]:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    cfg = config.exit_on_error(lambda: config.load(config.LlmConfig))
    logs.setup("llm", common.log_level)
    servicer = LlmServicer(Admission(cfg.max_concurrent), SamplingDefaults.from_config(cfg),
                           log_content=common.log_content)

    def register(server: grpc.aio.Server) -> None:
        llm_pb2_grpc.add_LlmServiceServicer_to_server(servicer, server)

    async def load() -> dict[str, str]:
        model, fallback, note = await asyncio.to_thread(resolve_model, cfg, common)
        try:
            engine = await asyncio.to_thread(LlmEngine, engine_config(cfg, common, model))
        except (EngineError, MemoryBudgetError) as exc:
            raise SystemExit(f"llm: {exc}") from exc
        warm = await asyncio.to_thread(engine.warmup)
        smaller = None
        if cfg.fallback_model is not None:
            if not cfg.fallback_model.exists():
                raise SystemExit(f"llm: SOTTO_LLM_FALLBACK_MODEL={cfg.fallback_model} does not exist")
            smaller = await asyncio.to_thread(LlmEngine, engine_config(cfg, common, cfg.fallback_model))
            await asyncio.to_thread(smaller.warmup)
        servicer.models = Models(engine, fallback=fallback, note=note, smaller=smaller)
        info = engine.info
        return {"model": info.name, "backend": info.backend, "backend_reason": info.backend_reason,
                "audio": str(info.audio), "vision": str(info.vision),
                "context_tokens": str(info.context_tokens), "fallback": str(fallback),
                "warmup_ms": str(round(warm.total_s * 1000))}

    spec = grpc_server.ServiceSpec("llm", ["sotto.v1.LlmService"], cfg.port, cfg.metrics_port, register, load,
                                   servicer.close)
    return spec, common


if __name__ == "__main__":
    grpc_server.main(build)
