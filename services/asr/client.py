"""Client of the asr service: print the words of a WAV file.

    python -m services.asr.client FILE.wav [--addr 127.0.0.1:50054] [--stream [--realtime]]

Without --stream the clip goes in one Transcribe call. With --stream it is sent in 20 ms chunks as an utterance
(paced like a live microphone with --realtime), stable words are printed as they come, then the final words.
``stream_utterance`` is the reusable part; every call carries a deadline and is cancelled if the caller leaves.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import grpc

from services.common import audio, config
from sotto.v1 import asr_pb2, asr_pb2_grpc

SAMPLE_RATE = audio.SPEECH_RATE  # what the asr service takes


async def stream_utterance(stub: asr_pb2_grpc.AsrServiceStub, pcm: bytes, *, chunk_ms: float = 20.0,
                           realtime: bool = False, partials: bool = False, language: str = "",
                           on_sent: Callable[[], None] | None = None, utterance_samples: int = 0,
                           timeout: float | None = None) -> AsyncIterator[asr_pb2.AsrEvent]:
    """Send `pcm` (PCM16 mono, 16 kHz) as an utterance, then `end`; yield the service's events.
    `on_sent` is called as the `end` message is handed to gRPC (the end of speech, for latency);
    `utterance_samples`: the utterance is that much of `pcm` (0: all of it)."""
    chunk_bytes = int(SAMPLE_RATE * chunk_ms / 1000) * 2
    duration_s = len(pcm) / 2 / SAMPLE_RATE

    async def requests() -> AsyncIterator[asr_pb2.AsrRequest]:
        yield asr_pb2.AsrRequest(settings=asr_pb2.AsrSettings(sample_rate=SAMPLE_RATE, language=language,
                                                              partials=partials))
        for offset in range(0, len(pcm), chunk_bytes):
            yield asr_pb2.AsrRequest(pcm16=pcm[offset: offset + chunk_bytes])
            if realtime:
                await asyncio.sleep(chunk_ms / 1000)
        if on_sent is not None:
            on_sent()
        yield asr_pb2.AsrRequest(end=True, utterance_samples=utterance_samples)

    call = stub.StreamTranscribe(requests(), timeout=timeout or 30.0 + duration_s)
    try:
        async for event in call:
            yield event
    finally:
        call.cancel()  # a no-op once the call is done; frees the server's stream if the caller left early


def read_pcm(path: Path) -> bytes:
    wav = audio.read_wav(path.read_bytes())
    if wav.channels != 1 or wav.sample_width != 2 or wav.sample_rate != SAMPLE_RATE:
        raise ValueError(f"{path}: need 16-bit mono WAV at {SAMPLE_RATE} Hz, got {wav.sample_width * 8}-bit, "
                         f"{wav.channels} channel(s), {wav.sample_rate} Hz; convert with "
                         f"`sox {path} -r {SAMPLE_RATE} -c 1 -b 16 out.wav`")
    return wav.pcm


async def _main(args: argparse.Namespace) -> int:
    async with grpc.aio.insecure_channel(args.addr) as channel:
        stub = asr_pb2_grpc.AsrServiceStub(channel)
        try:
            if not args.stream:
                reply = await stub.Transcribe(asr_pb2.TranscribeRequest(wav=Path(args.file).read_bytes()),
                                              timeout=60.0)
                print(reply.text)
                print(f"({reply.audio_ms / 1000:.1f} s of audio in {reply.recognition_ms:.0f} ms)", file=sys.stderr)
                return 0
            pcm = read_pcm(Path(args.file))
            async for event in stream_utterance(stub, pcm, realtime=args.realtime, partials=True):
                if event.HasField("final"):
                    final = event.final
                    print(final.text)
                    print(f"(end -> words {final.recognition_ms:.0f} ms; {final.stable_chars} characters stable "
                          f"before the end; {final.partial_runs} partial runs)", file=sys.stderr)
                else:
                    print(f"  stable: {event.stable}", file=sys.stderr)
        except grpc.RpcError as exc:
            print(f"asr service at {args.addr}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
        except ValueError as exc:
            print(exc, file=sys.stderr)
            return 2
    return 0


def main() -> None:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    asr = config.exit_on_error(lambda: config.load(config.AsrConfig))
    parser = argparse.ArgumentParser(description="Print the words the asr service hears in a WAV file.")
    parser.add_argument("file", help="16-bit WAV at 16000 Hz")
    parser.add_argument("--addr", default=f"{common.host}:{asr.port}", help="asr service address")
    parser.add_argument("--stream", action="store_true", help="send it as a streamed utterance")
    parser.add_argument("--realtime", action="store_true", help="with --stream: pace it like a live microphone")
    sys.exit(asyncio.run(_main(parser.parse_args())))


if __name__ == "__main__":
    main()
