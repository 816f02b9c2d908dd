"""One request's run on the engine: what goes in (GenerateRequest, Sampling), what comes out (TextDelta events,
then one Finished), and the Generation that produces them.

A Generation waits for the engine (one generation at a time), reuses or rebuilds the session's conversation,
streams the decoded text, and stops early when cancelled from any thread or when the time limit runs out
(the reply then ends as `degraded`).
"""

from __future__ import annotations

import dataclasses
import enum
import itertools
import threading
import time
from typing import TYPE_CHECKING, Any, Iterator, Union

from services.llm.context import overflow
from services.llm.conversations import Turn, audio_digest, close_quietly, content
from services.llm.errors import EngineError, InvalidInput
from services.llm.native_log import StderrTap, stderr_tap

if TYPE_CHECKING:
    from services.llm.engine import LlmEngine

_LOCK_POLL_S = 0.01  # how often a generation waiting for the engine looks whether it was cancelled


class FinishReason(str, enum.Enum):
    STOP = "stop"  # the model ended its turn
    LENGTH = "length"  # max new tokens (or the context) ran out
    CANCELLED = "cancelled"  # the caller cancelled
    DEGRADED = "degraded"  # the time limit ran out; the text is partial


@dataclasses.dataclass(frozen=True)
class Sampling:
    """How tokens are picked. The service fills it from its settings (services.llm.loading.SamplingDefaults);
    top_k is always passed, since LiteRT-LM samples greedily without it."""

    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int
    seed: int | None = None

    @classmethod
    def greedy(cls, max_new_tokens: int) -> "Sampling":
        return cls(temperature=0.0, top_p=1.0, top_k=1, max_new_tokens=max_new_tokens, seed=0)


@dataclasses.dataclass(frozen=True, kw_only=True)
class GenerateRequest:
    """One user turn. `history` holds the earlier turns as (role, text); the user turns' text must
    be what was sent (a spoken turn's: its audio digest), and the assistant turns' text what was returned,
    for a session to be reused."""

    text: str = ""
    audio: tuple[bytes, ...] = ()  # WAV files
    images: tuple[bytes, ...] = ()  # JPEG or PNG files
    system_prompt: str = ""
    history: tuple[Turn, ...] = ()
    sampling: Sampling
    session_id: str | None = None


@dataclasses.dataclass(frozen=True)
class TextDelta:
    text: str


@dataclasses.dataclass(frozen=True)
class Finished:
    text: str
    finish_reason: FinishReason
    time_to_first_token_s: float | None
    prefill_tokens: int
    decode_tokens: int
    prefill_tokens_per_s: float
    decode_tokens_per_s: float
    total_s: float
    context_tokens: int  # tokens the conversation holds after this turn
    reused_conversation: bool
    history_dropped: int = 0  # the oldest history turns left out to fit the context


Event = Union[TextDelta, Finished]


@dataclasses.dataclass(frozen=True)
class _Opened:
    """A conversation that took the user turn, and its stream of messages."""

    conversation: Any
    stream: Iterator
    tokens_before: int
    reused: bool
    dropped: int


def _conversation_key(request: GenerateRequest) -> tuple:
    s = request.sampling
    return (request.system_prompt, s.temperature, s.top_p, s.top_k, s.seed)


class Generation:
    """One request's run: iterate it for events; `cancel()` from any thread, any time, idempotent."""

    def __init__(self, engine: LlmEngine, request: GenerateRequest) -> None:
        self._engine = engine
        self._request = request
        self._state_lock = threading.Lock()
        self._conversation = None
        self._stop_reason: FinishReason | None = None
        self._ended = False  # the stream has ended: a late cancel or time limit changes nothing
        self._events = self._run()

    def __iter__(self) -> Iterator[Event]:
        return self._events

    def __next__(self) -> Event:
        return next(self._events)

    def cancel(self) -> None:
        self._stop(FinishReason.CANCELLED)

    def _stop(self, reason: FinishReason) -> None:
        with self._state_lock:
            if self._stop_reason is not None or self._ended:
                return
            self._stop_reason = reason
            if self._conversation is not None:
                self._conversation.cancel_process()

    def _run(self) -> Iterator[Event]:
        engine, request = self._engine, self._request
        started = time.monotonic()
        while not engine.lock.acquire(timeout=_LOCK_POLL_S):
            if self._stop_reason is not None:
                yield self._finished("", started, None, None, 0, 0, reused=False)
                return
        timer = threading.Timer(engine.config.time_limit_s, self._stop, args=(FinishReason.DEGRADED,))
        timer.daemon = True
        conversation = None
        keep = False
        try:
            if self._stop_reason is not None:
                yield self._finished("", started, None, None, 0, 0, reused=False)
                return
            key = _conversation_key(request)
            held = engine.sessions.take(request.session_id, key, request.history)
            if held is not None and not engine.context.fits_after(held.token_count, request.text,
                                                                  request.sampling.max_new_tokens):
                close_quietly(held)  # it is full: rebuilt with the history that fits
                held = None
            timer.start()
            tap = stderr_tap()
            mark = tap.mark()
            opened = self._open(held, tap, mark)
            if opened is None:  # stopped before the prompt went in
                yield self._finished("", started, None, None, 0, 0, reused=held is not None)
                return
            conversation = opened.conversation
            parts: list[str] = []
            first_token_at = None
            try:
                for message in opened.stream:
                    text = "".join(c.text for c in message.contents.contents if hasattr(c, "text"))
                    if not text or self._stop_reason is not None:
                        continue  # after a cancel, drain what the native thread still sends
                    if first_token_at is None:
                        first_token_at = time.monotonic()
                    parts.append(text)
                    yield TextDelta(text)
            except GeneratorExit:
                # The consumer walked away: stop the native decode (it would go on otherwise).
                self._stop(FinishReason.CANCELLED)
                _drain(opened.stream)
                raise
            except RuntimeError as exc:
                raise EngineError("generation failed", tap.reason_since(mark) or str(exc)) from exc
            finally:
                timer.cancel()
                with self._state_lock:
                    self._ended = True
            reply = "".join(parts)
            finished = self._finished(reply, started, first_token_at, conversation, opened.tokens_before,
                                      conversation.token_count, reused=opened.reused, dropped=opened.dropped)
            if finished.finish_reason is FinishReason.STOP:
                user = Turn("user", request.text, audio_digest(request.audio))
                turns = request.history + (user, Turn("assistant", reply))
                engine.sessions.put(request.session_id, conversation, key, turns)
                keep = True
            yield finished
        finally:
            timer.cancel()
            with self._state_lock:
                self._conversation = None
            if conversation is not None and not keep:
                close_quietly(conversation)  # cancelled, cut short or failed: rebuild next time
            engine.lock.release()

    def _open(self, held: Any, tap: StderrTap, mark: str) -> _Opened | None:
        """Send the user turn to the held conversation, or to a new one with the history that fits (None: stopped
        first). LiteRT-LM refuses a prompt over the context before it produces anything, so the first message is
        awaited here: on that refusal the conversation is rebuilt with fewer turns (what the refusal counts beyond
        the text is the media's share), and with no turn left to drop the request is refused as invalid."""
        engine, request = self._engine, self._request
        turns = [(turn.role, content(turn)) for turn in request.history]
        conversation, dropped, counted, media_tokens = held, 0, None, 0
        while True:
            if conversation is None:
                dropped, counted = engine.context.plan(
                    turns, system_prompt=request.system_prompt, user_text=request.text,
                    reserve=request.sampling.max_new_tokens, media_tokens=media_tokens,
                    at_least=0 if counted is None else dropped + 1)
                conversation = engine.new_conversation(request, request.history[dropped:])
            with self._state_lock:
                self._conversation = conversation
                stopped = self._stop_reason is not None
            if stopped:
                close_quietly(conversation)
                return None
            tokens_before = conversation.token_count
            stream = conversation.send_message_async(engine.message(request),
                                                     max_output_tokens=request.sampling.max_new_tokens)
            try:
                first = next(stream, None)
            except RuntimeError as exc:
                with self._state_lock:
                    self._conversation = None
                close_quietly(conversation)
                too_long = overflow(str(exc))
                if too_long is None:
                    raise EngineError("generation failed", tap.reason_since(mark) or str(exc)) from exc
                if counted is not None and dropped == len(turns):
                    raise InvalidInput(too_long.describe()) from None
                if counted is not None:
                    media_tokens = max(media_tokens, too_long.prompt_tokens - counted)
                conversation = None
                continue
            rest = stream if first is None else itertools.chain([first], stream)
            return _Opened(conversation, rest, tokens_before, reused=conversation is held, dropped=dropped)

    def _finished(self, text, started, first_token_at, conversation, tokens_before, tokens_after, *, reused,
                  dropped: int = 0) -> Finished:
        request = self._request
        prefill = decode = 0
        prefill_rate = decode_rate = 0.0
        if conversation is not None and tokens_after > tokens_before:
            try:
                bench = conversation.get_benchmark_info()
                prefill, decode = bench.last_prefill_token_count, bench.last_decode_token_count
                prefill_rate, decode_rate = bench.last_prefill_tokens_per_second, bench.last_decode_tokens_per_second
            except RuntimeError:
                pass
            if prefill + decode != tokens_after - tokens_before:
                # No benchmark for this turn (e.g. cancelled in prefill): count from the KV cache.
                decode = min(decode, tokens_after - tokens_before)
                prefill = tokens_after - tokens_before - decode
        reason = self._stop_reason
        if reason is None:
            at_context_end = tokens_after >= self._engine.info.context_tokens - 1
            at_length = decode >= request.sampling.max_new_tokens or at_context_end
            reason = FinishReason.LENGTH if at_length else FinishReason.STOP
        now = time.monotonic()
        return Finished(
            text=text,
            finish_reason=reason,
            time_to_first_token_s=None if first_token_at is None else first_token_at - started,
            prefill_tokens=prefill,
            decode_tokens=decode,
            prefill_tokens_per_s=prefill_rate,
            decode_tokens_per_s=decode_rate,
            total_s=now - started,
            context_tokens=tokens_after,
            reused_conversation=reused,
            history_dropped=dropped,
        )


def _drain(stream) -> None:
    try:
        for _ in stream:
            pass
    except RuntimeError:
        pass
