"""The llm gRPC service (sotto.v1.LlmService): protobuf in, engine events out, nothing more.

The servicer translates a GenerateRequest into the engine's request, admits it (at most
SOTTO_LLM_MAX_CONCURRENT in flight, FIFO, the next one refused at once as RESOURCE_EXHAUSTED), and
streams the engine's events back. The blocking engine iterator runs on one engine thread, which hands
each event to the event loop; text that piles up while a message is being sent goes out as one message.
A cancelled call (client cancel, deadline) cancels the generation and waits until the engine is
free before giving up its slot. Domain errors become statuses here and only here.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextlib
import logging
import time

import grpc
from prometheus_client import Counter, Gauge, Histogram

from services.common import config, grpc_server, logs, metrics
from services.llm.admission import Admission
from services.llm.engine import FinishReason, Finished, LlmEngine, TextDelta
from services.llm.errors import Busy, EngineError, InvalidInput, MemoryBudgetError
from services.llm.loading import SamplingDefaults, engine_config, resolve_model
from services.llm.wire import done_event, to_engine_request
from sotto.v1 import llm_pb2, llm_pb2_grpc

_LOGGER = logging.getLogger(__name__)

# Time per output token: 2 ms (a small model on a GPU) to 0.5 s (a large one on a slow CPU).
TOKEN_BUCKETS = (0.002, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.03, 0.04, 0.05, 0.075, 0.1, 0.2, 0.5)

QUEUE_DEPTH = Gauge("sotto_llm_queue_depth", "Admitted requests waiting for the engine.")
ACTIVE = Gauge("sotto_llm_active_requests", "Requests holding the engine (generating, or winding down a cancel).")
TTFT_SECONDS = Histogram(
    "sotto_llm_time_to_first_token_seconds", "Time from admission to the first streamed text.",
    buckets=metrics.LATENCY_BUCKETS,
)
TOKEN_SECONDS = Histogram(
    "sotto_llm_time_per_output_token_seconds", "Decode time per token, one observation per reply.",
    buckets=TOKEN_BUCKETS,
)
PREFILL_TOKENS = Counter("sotto_llm_prefill_tokens_total", "Prompt tokens prefilled, cancelled generations included.")
DECODE_TOKENS = Counter("sotto_llm_decode_tokens_total", "Tokens decoded, cancelled generations included.")
FINISHED = Counter("sotto_llm_finished_total", "Replies sent to the end, by finish reason.", ["reason"])
CANCELLED = Counter("sotto_llm_cancelled_total", "Requests the caller cancelled, by phase.", ["phase"])
# Milliseconds where it matters: a barge-in must free the engine for the next turn within about 100 ms.
CANCEL_BUCKETS = (0.005, 0.01, 0.02, 0.035, 0.05, 0.075, 0.1, 0.15, 0.25, 0.5, 1, 2, 5)
CANCEL_SECONDS = Histogram("sotto_llm_cancel_seconds", "Cancel (call gone) to engine free, per cancelled generation.",
                           buckets=CANCEL_BUCKETS)
DEGRADED_ROUTED = Counter("sotto_llm_fallback_requests_total",
                          "Requests sent to SOTTO_LLM_FALLBACK_MODEL because their session degraded before.")
REFUSED = Counter("sotto_llm_refused_total", "Requests refused before generation, by cause.", ["cause"])
# Known label values start at 0, so rate() and increase() work before the first event.
for _reason in ("stop", "length", "degraded"):
    FINISHED.labels(_reason)
for _phase in ("queued", "prefill", "decode"):
    CANCELLED.labels(_phase)
for _cause in ("busy", "invalid"):
    REFUSED.labels(_cause)

def _count_tokens(finished: Finished) -> None:
    PREFILL_TOKENS.inc(finished.prefill_tokens)
    DECODE_TOKENS.inc(finished.decode_tokens)


_END = object()  # the engine thread's last word: the generation is over (or failed)


class _Inbox:
    """Engine events handed from the engine thread to the event loop.

    The loop takes everything that arrived since its last look in one go, so text decoded while the previous
    message was still being sent goes out as one message: a fast model (the tiny fixture decodes a token in
    under a millisecond) no longer pays a gRPC message and the gateway's relay per token, and each token costs
    one loop wake-up instead of an executor round trip.
    asyncio.Queue has no "take all", hence a deque and an Event.
    """

    def __init__(self) -> None:
        self._items: collections.deque = collections.deque()
        self._ready = asyncio.Event()

    def put(self, item: object) -> None:
        self._items.append(item)
        self._ready.set()

    async def take_all(self) -> list:
        await self._ready.wait()
        self._ready.clear()
        items = list(self._items)
        self._items.clear()
        return items


def _pump(generation, loop: asyncio.AbstractEventLoop, inbox: _Inbox) -> Finished | None:
    """Run a whole generation on the engine thread, handing each event to the loop as it comes.

    Returns its Finished (None if it never got that far), so a cancelled generation's tokens still count."""
    last = None
    try:
        for last in generation:
            _deliver(loop, inbox, last)
    finally:
        _deliver(loop, inbox, _END)
    return last if isinstance(last, Finished) else None


async def _wind_down(pump: asyncio.Future, count: bool) -> None:
    """Wait for a cancelled generation's thread to finish; count its tokens unless its reply was counted."""
    try:
        last = await pump
    except Exception:  # noqa: BLE001 - the call is already gone: a late engine error has nobody to go to
        _LOGGER.exception("cancelled_generation_failed")
        return
    if count and last is not None:
        _count_tokens(last)


def _deliver(loop: asyncio.AbstractEventLoop, inbox: _Inbox, item: object) -> None:
    try:
        loop.call_soon_threadsafe(inbox.put, item)
    except RuntimeError:
        pass  # the loop is closed (process stopping): nobody is left to read


class LlmServicer(llm_pb2_grpc.LlmServiceServicer):
    def __init__(self, engine: LlmEngine, admission: Admission, defaults: SamplingDefaults, *,
                 fallback: bool = False, note: str = "", smaller: LlmEngine | None = None):
        self._engine = engine
        # SOTTO_LLM_FALLBACK_MODEL: once a session's reply degraded (time limit), its later turns go to this
        # smaller model, unless they carry media it cannot take.
        self._smaller = smaller
        self._degraded_sessions: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._admission = admission
        # The gauges read the admission at scrape time (the last servicer built wins; a process has one).
        QUEUE_DEPTH.set_function(lambda: admission.waiting)
        ACTIVE.set_function(lambda: admission.running)
        self._defaults = defaults
        self._fallback = fallback
        self._note = note
        # One thread per model: the engine runs one generation at a time anyway.
        self._executor = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="llm-engine")
        self._draining: set[asyncio.Future] = set()

    async def GetModelInfo(self, request, context):
        info = self._engine.info
        return llm_pb2.ModelInfo(
            model=info.name,
            backend=info.backend,
            audio_input=info.audio,
            image_input=info.vision,
            context_tokens=info.context_tokens,
            fallback=self._fallback,
            note=self._note,
        )

    async def Generate(self, request, context):
        grpc_server.rpc_context_ids(context)
        started = time.monotonic()
        code = grpc.StatusCode.OK
        admitted = False
        _LOGGER.info("generate_request", extra={
            "history_turns": len(request.history), "audio_bytes": len(request.user.audio_wav),
            "images": len(request.user.images), "text_chars": len(request.user.text)})
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
            code = grpc.StatusCode.INVALID_ARGUMENT
            REFUSED.labels("invalid").inc()
            await context.abort(code, str(exc))
        except Busy as exc:
            code = grpc.StatusCode.RESOURCE_EXHAUSTED
            REFUSED.labels("busy").inc()
            await context.abort(code, str(exc))
        except EngineError as exc:
            code = grpc.StatusCode.UNAVAILABLE
            _LOGGER.error("engine_error", extra={"error": str(exc)})
            await context.abort(code, str(exc))
        except (asyncio.CancelledError, GeneratorExit):
            # GeneratorExit: the call ended while this generator waited at `yield` (see _stream).
            code = grpc.StatusCode.CANCELLED
            if not admitted:
                CANCELLED.labels("queued").inc()
            raise
        finally:
            metrics.RPC_TOTAL.labels("Generate", code.name).inc()
            metrics.RPC_SECONDS.labels("Generate").observe(time.monotonic() - started)

    async def _stream(self, generation, queue_wait: float, session_id: str):
        loop = asyncio.get_running_loop()
        inbox = _Inbox()
        pump = loop.run_in_executor(self._executor, _pump, generation, loop, inbox)
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
                if events[-1] is _END:
                    await pump  # raises what the engine raised
                    return
        except (asyncio.CancelledError, GeneratorExit):
            # The call is gone (cancelled, deadline, server stopping): stop decoding, and hold the
            # admission slot until the engine thread has wound the generation down.
            cancelled_at = time.monotonic()
            generation.cancel()
            if phase is not None:
                CANCELLED.labels(phase).inc()
            drain = asyncio.ensure_future(_wind_down(pump, count=phase is not None))
            drain.add_done_callback(lambda _: CANCEL_SECONDS.observe(time.monotonic() - cancelled_at))
            self._draining.add(drain)
            drain.add_done_callback(self._draining.discard)
            await asyncio.shield(drain)
            raise

    @staticmethod
    def _observe(finished: Finished) -> None:
        FINISHED.labels(finished.finish_reason.value).inc()
        if finished.time_to_first_token_s is not None:
            TTFT_SECONDS.observe(finished.time_to_first_token_s)
        if finished.decode_tokens_per_s > 0:
            TOKEN_SECONDS.observe(1 / finished.decode_tokens_per_s)
        _count_tokens(finished)
        _LOGGER.info("generated", extra={
            "finish": finished.finish_reason.value, "prefill_tokens": finished.prefill_tokens,
            "decode_tokens": finished.decode_tokens, "ttft_ms": round((finished.time_to_first_token_s or 0) * 1000),
            "total_ms": round(finished.total_s * 1000), "reused": finished.reused_conversation,
        })

    def _engine_for(self, request) -> LlmEngine:
        if self._smaller is None or request.session_id not in self._degraded_sessions:
            return self._engine
        info = self._smaller.info
        if (request.user.audio_wav and not info.audio) or (request.user.images and not info.vision):
            return self._engine
        DEGRADED_ROUTED.inc()
        return self._smaller

    def _note_degraded(self, session_id: str, finished: Finished) -> None:
        if self._smaller is not None and session_id and finished.finish_reason is FinishReason.DEGRADED:
            self._degraded_sessions[session_id] = None
            while len(self._degraded_sessions) > 1024:
                self._degraded_sessions.popitem(last=False)

    async def close(self) -> None:
        """Wait for cancelled generations to wind down, then free the engine."""
        if self._draining:
            await asyncio.wait(set(self._draining))
        await asyncio.to_thread(self._executor.shutdown, wait=True, cancel_futures=True)
        await asyncio.to_thread(self._engine.close)
        if self._smaller is not None:
            await asyncio.to_thread(self._smaller.close)


def build() -> tuple[grpc_server.ServiceSpec, config.CommonConfig]:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    cfg = config.exit_on_error(lambda: config.load(config.LlmConfig))
    logs.setup("llm", common.log_level)
    defaults = SamplingDefaults(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens)
    servicers: list[LlmServicer] = []

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
        servicer = LlmServicer(engine, Admission(cfg.max_concurrent), defaults, fallback=fallback, note=note,
                               smaller=smaller)
        servicers.append(servicer)
        info = engine.info
        return {"model": info.name, "backend": info.backend, "audio": str(info.audio), "vision": str(info.vision),
                "context_tokens": str(info.context_tokens), "fallback": str(fallback),
                "warmup_ms": str(round(warm.total_s * 1000))}

    async def close() -> None:
        for servicer in servicers:
            await servicer.close()

    spec = grpc_server.ServiceSpec("llm", ["sotto.v1.LlmService"], cfg.port, cfg.metrics_port,
                                   _late_register(servicers), load, close)
    return spec, common


def _late_register(servicers: list[LlmServicer]):
    """The server listens (health NOT_SERVING) before the model loads, so the servicer is added
    at start with a proxy that forwards to the real one once `load` has built it."""

    def register(server: grpc.aio.Server) -> None:
        llm_pb2_grpc.add_LlmServiceServicer_to_server(_Proxy(servicers), server)

    return register


class _Proxy(llm_pb2_grpc.LlmServiceServicer):
    def __init__(self, servicers: list[LlmServicer]):
        self._servicers = servicers

    async def _target(self, context) -> LlmServicer:
        if not self._servicers:
            await context.abort(grpc.StatusCode.UNAVAILABLE, "the model is still loading; check health")
        return self._servicers[0]

    async def GetModelInfo(self, request, context):
        return await (await self._target(context)).GetModelInfo(request, context)

    async def Generate(self, request, context):
        async for event in (await self._target(context)).Generate(request, context):
            yield event


if __name__ == "__main__":
    grpc_server.main(build)
