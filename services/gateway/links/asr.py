"""A session's link to the asr service: the words of each utterance, for the page, the history and text-only models.

Two ways in, chosen by what the model takes:
- a model that takes text only (the cascade): the words ARE the user's message and every millisecond of their
  recognition is on the way to the first audio, so the utterance is streamed to the asr service while it is spoken
  (`begin` at the vad's speech start, `feed` per audio chunk, `finish` at its end): at the end little or nothing is
  left to recognise;
- a model that hears the audio itself: the words are for the page and the history only, so the whole clip is sent
  in one call once the reply's first audio is out (`clip`), and its recognition never competes with the reply's
  first sentence for the CPU.

Every call has a deadline and is cancelled explicitly when no longer wanted. The words of an utterance are waited for
in proportion to its length, at most the turn's deadline (`SessionSettings.words_deadline_s`): a recogniser slowed by a
busy machine means later words, not an error. A failure is reported once per outage (`outage_reason`),
never per utterance.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable

import grpc

from services.common import audio, logs
from services.gateway.conversation import events
from services.gateway.conversation.settings import SessionSettings
from sotto.v1 import asr_pb2, asr_pb2_grpc

_LOGGER = logging.getLogger(__name__)
SAMPLE_RATE = audio.SPEECH_RATE
_WAV_HEADER_BYTES = 44  # services.common.audio.wav_bytes writes the plain 44-byte header


class NoWords(Exception):
    """The asr stream ended without its final words."""


class Unheard(Exception):
    """A text-only model's spoken turn has no words to send: `code` and `message` are the turn's error event."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


class Words:
    """The words of one utterance, on their way: `await words.text()` -> the text, or None when they could not be
    had (the reason is in `failure`). Awaiting is safe from several places and never raises."""

    def __init__(self, task: asyncio.Task[asr_pb2.Transcript], timeout_s: float, on_cancel=None) -> None:
        self._task = task
        self.timeout_s = timeout_s
        self._on_cancel = on_cancel
        self.failure = ""
        self.late = False  # the failure is the deadline (a hung or very slow recogniser), not the service's absence
        self.recognition_ms: float | None = None  # from the end of the audio to the words, as the gateway saw it
        self._started = time.monotonic()

    @property
    def done(self) -> bool:
        """The recognition is over (its words, or its failure, are in)."""
        return self._task.done()

    async def text(self) -> str | None:
        try:
            async with asyncio.timeout(self.timeout_s):
                transcript = await asyncio.shield(self._task)
        except TimeoutError:
            self.failure, self.late = f"it gave no words within {self.timeout_s:.1f} s", True
            self.cancel()
            return None
        except grpc.aio.AioRpcError as exc:
            self.failure = f"{exc.code().name}: {exc.details()}"
            self.late = exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            return None
        except NoWords as exc:
            self.failure = str(exc)
            return None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._task.cancelled() and not (current is not None and current.cancelling()):
                self.failure = "cancelled"
                return None
            self.cancel()  # our caller went away: so does the call
            raise
        if self.recognition_ms is None:
            self.recognition_ms = round((time.monotonic() - self._started) * 1000, 1)
        return transcript.text

    async def settled_text(self) -> str | None:
        """The words once the recognition ends (None: none came), with no deadline of its own: a caller that gives
        up (its own timeout, its cancellation) leaves the recognition running for `text`."""
        try:
            transcript = await asyncio.shield(self._task)
        except (grpc.aio.AioRpcError, NoWords):
            return None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if self._task.cancelled() and not (current is not None and current.cancelling()):
                return None
            raise
        return transcript.text

    def cancel(self) -> None:
        self._task.cancel()
        if self._on_cancel is not None:
            self._on_cancel()


class _UtteranceStream:
    """One StreamTranscribe call: audio in as it comes, the final words out; with `on_stable`, the stable words so
    far as the service sends them (read as they come, not at the end)."""

    def __init__(self, stub: asr_pb2_grpc.AsrServiceStub, deadline_s: float,
                 metadata: tuple[tuple[str, str], ...], on_stable: Callable[[str], None] | None = None) -> None:
        self._queue: asyncio.Queue[asr_pb2.AsrRequest | None] = asyncio.Queue()
        self._partials = on_stable is not None
        self._call = stub.StreamTranscribe(self._requests(), timeout=deadline_s, metadata=metadata)
        self._reader = asyncio.ensure_future(self._read(on_stable)) if on_stable is not None else None
        if self._reader is not None:  # a stream dropped after a failure is never awaited: its error is not news
            self._reader.add_done_callback(lambda t: t.cancelled() or t.exception())
        self.samples = 0

    async def _requests(self) -> AsyncIterator[asr_pb2.AsrRequest]:
        yield asr_pb2.AsrRequest(settings=asr_pb2.AsrSettings(sample_rate=SAMPLE_RATE, partials=self._partials))
        while (request := await self._queue.get()) is not None:
            yield request

    async def _read(self, on_stable: Callable[[str], None] | None) -> asr_pb2.Transcript:
        async for event in self._call:
            if event.HasField("final"):
                return event.final
            if on_stable is not None and event.stable:
                on_stable(event.stable)
        raise NoWords("the asr stream ended without final words")

    def feed(self, pcm: bytes) -> None:
        self.samples += len(pcm) // 2
        self._queue.put_nowait(asr_pb2.AsrRequest(pcm16=pcm))

    async def final(self, utterance_samples: int) -> asr_pb2.Transcript:
        self._queue.put_nowait(asr_pb2.AsrRequest(end=True, utterance_samples=utterance_samples))
        self._queue.put_nowait(None)
        try:
            return await (self._reader if self._reader is not None else self._read(None))
        finally:
            self._call.cancel()  # a no-op once done; frees the service's stream if we stopped early

    def cancel(self) -> None:
        self._call.cancel()
        if self._reader is not None:
            self._reader.cancel()
        self._queue.put_nowait(None)


class Hearing:
    def __init__(self, *, stub: asr_pb2_grpc.AsrServiceStub, settings: SessionSettings, max_audio_s: float) -> None:
        self._stub = stub
        self._settings = settings
        self._timeout_s = settings.request_timeout_s
        self._max_audio_s = max_audio_s
        self._stream: _UtteranceStream | None = None
        self._told = False  # an outage was reported; cleared by words that come or by the service coming back

    # -- streamed utterances (text-only models) ---------------------------------------------------------------
    def begin(self, pcm_so_far: bytes, turn_id: str, on_stable: Callable[[str], None] | None = None) -> None:
        """The vad heard speech start: open a stream with the utterance's audio so far (pre-roll included);
        `on_stable`: have the service send the stable words while the user speaks, and take them."""
        self.drop()
        metadata = (*logs.grpc_metadata()[:1], (logs.TURN_METADATA_KEY, turn_id))
        self._stream = _UtteranceStream(self._stub, self._max_audio_s + 2 * self._timeout_s, metadata, on_stable)
        if pcm_so_far:
            self._stream.feed(pcm_so_far)

    def feed(self, pcm: bytes) -> None:
        if self._stream is not None:
            self._stream.feed(pcm)

    @property
    def streaming(self) -> bool:
        return self._stream is not None

    def finish(self, utterance_samples: int, earlier_audio_s: float = 0.0) -> Words | None:
        """The utterance ended after `utterance_samples` of the streamed audio: its words (None: none streamed).
        `earlier_audio_s`: an earlier part of the same utterance still being recognised (conversation/resumption.py),
        which the service finishes first: its length counts toward the deadline too."""
        stream, self._stream = self._stream, None
        if stream is None:
            return None
        return Words(asyncio.create_task(stream.final(utterance_samples), name="asr::final"),
                     self._deadline_s(utterance_samples / SAMPLE_RATE + earlier_audio_s), on_cancel=stream.cancel)

    def drop(self) -> None:
        """The utterance was given up (too long, stalled, the vad failed): free the service's stream now."""
        stream, self._stream = self._stream, None
        if stream is not None:
            stream.cancel()

    # -- whole clips (models that hear the audio) -------------------------------------------------------------
    def _deadline_s(self, audio_s: float) -> float:
        return self._settings.words_deadline_s(audio_s)

    def clip(self, wav: bytes) -> Words:
        deadline_s = self._deadline_s(max(0, len(wav) - _WAV_HEADER_BYTES) / 2 / SAMPLE_RATE)
        call = self._stub.Transcribe(asr_pb2.TranscribeRequest(wav=wav), timeout=deadline_s,
                                     metadata=logs.grpc_metadata())

        async def run() -> asr_pb2.Transcript:
            try:
                return await call
            finally:
                call.cancel()

        return Words(asyncio.ensure_future(run()), deadline_s)

    # -- outages ----------------------------------------------------------------------------------------------
    def outage_reason(self, words: Words) -> str | None:
        """The reason to tell the user, the first time words fail in an outage; None otherwise."""
        if self._told:
            return None
        self._told = True
        _LOGGER.info("asr_unavailable", extra={"reason": words.failure})
        return words.failure

    def heard(self) -> None:
        """Words came (or the service is back): the next failure is a new outage, worth telling."""
        self._told = False


class SpokenWords:
    """The words of one spoken turn and where they go: a `transcript` event to the page, the history, and for a
    model that takes text only, the message itself. The Turn calls `message` before asking the llm (cascade),
    `reply_started` when the reply's first audio is out, and `settle` at its end."""

    def __init__(self, *, hearing: Hearing, turn_id: str, wav: bytes, streamed: Words | None, cascade: bool,
                 model_name: str, send: Callable[[events.Transcript], None]) -> None:
        self._hearing = hearing
        self._turn_id = turn_id
        self._wav = wav
        # A text-only model needs the words now: the streamed ones, or (the model changed mid-utterance) the clip's.
        # Words already recognised (speech over an answer is streamed for every model: conversation/ducking.py) serve.
        self._words = (streamed or hearing.clip(wav)) if cascade else streamed if streamed and streamed.done else None
        if streamed is not None and self._words is None:
            streamed.cancel()  # the model changed to one that hears audio while the utterance was streamed
        self.cascade = cascade
        self._model_name = model_name
        self._send = send
        self._text: str | None = None
        self._settled = False
        # The words of an earlier part of the same utterance, on their way (conversation/resumption.py)
        self.prefix: asyncio.Future[str | None] | None = None

    async def message(self) -> str:
        """The cascade's user message; raises Unheard when there is none."""
        text = await self._await()
        if text is None:
            words = self._words
            reason = words.failure if words is not None else ""
            if words is not None and words.late:
                raise Unheard("timeout", f"speech recognition failed on that utterance ({reason}); the model "
                                         f"{self._model_name} takes text only, so it was not answered: please say "
                                         "it again")
            raise Unheard("unavailable", f"the speech recognition service is unavailable ({reason}), so what you "
                                         f"said could not be heard; the model {self._model_name} takes text only: "
                                         "speech is answered again once it is back, typed messages work meanwhile")
        if not text.strip():
            raise Unheard("not_heard", "no words were recognised in that utterance; please say it again")
        return text

    async def peek(self) -> str | None:
        """The streamed words as soon as they come, told to no one (None: none could be had): the end-of-turn
        rule reads them before the turn begins, for as long as it cares to wait; `message` then returns the same
        words under the usual deadline."""
        return await self._words.settled_text() if self._words is not None and not self._settled else self._text

    async def _first_part(self) -> str:
        """The earlier part's words, waited for as long as this part's own ("" if they do not come)."""
        assert self.prefix is not None and self._words is not None
        try:
            async with asyncio.timeout(self._words.timeout_s):
                return ((await asyncio.shield(self.prefix)) or "").strip()
        except TimeoutError:
            return ""

    def reply_started(self) -> None:
        if self._words is None:
            self._words = self._hearing.clip(self._wav)

    async def settle(self, start: bool = True) -> str:
        """The words for the history ("" when none), once the reply is over (or cut); `start`: recognise the clip
        now if that has not begun."""
        if start:
            self.reply_started()
        text = await self._await()
        return text or ""

    def cancel(self) -> None:
        if self._words is not None and not self._settled:
            self._words.cancel()

    @property
    def recognition_ms(self) -> float | None:
        return self._words.recognition_ms if self._words is not None else None

    async def _await(self) -> str | None:
        if self._settled or self._words is None:
            return self._text
        self._text = await self._words.text()
        if self._text is not None and self.prefix is not None:
            self._text = f"{await self._first_part()} {self._text.strip()}".strip()
        self._settled = True
        if self._text is not None:
            self._hearing.heard()
            self._send(events.Transcript(turn_id=self._turn_id, text=self._text,
                                         recognition_ms=self._words.recognition_ms))
        elif not self.cascade and (reason := self._hearing.outage_reason(self._words)) is not None:
            what = "gave no words in time" if self._words.late else "is unavailable"
            self._send(events.Transcript(turn_id=self._turn_id, text=None,
                                         error=f"speech recognition {what} ({reason}); spoken words are not "
                                               "shown or remembered as text until it is back"))
        return self._text
