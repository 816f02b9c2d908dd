"""Client of the vad service: stream a WAV file, print the speech segments the service finds.

    python -m services.vad.client FILE.wav [--addr 127.0.0.1:50051] [--chunk-ms 20] [--realtime]

``stream_pcm`` is the reusable part: it sends PCM16 in capture-timestamped chunks and yields
the service's events; every call carries a deadline and is cancelled if the caller stops early.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import grpc

from services.common import audio, config
from sotto.v1 import vad_pb2, vad_pb2_grpc


async def stream_pcm(stub: vad_pb2_grpc.VadServiceStub, pcm: bytes, sample_rate: int, *,
                     settings: vad_pb2.VadSettings | None = None, chunk_ms: float = 20.0,
                     realtime: bool = False, start_ts_ms: int = 0, timeout: float | None = None,
                     ) -> AsyncIterator[vad_pb2.VadEvent]:
    """Send ``pcm`` (PCM16 mono) as chunks of ``chunk_ms``; yield the service's events as they come."""
    chunk_bytes = max(2, int(sample_rate * chunk_ms / 1000) * 2)
    duration_s = len(pcm) / 2 / sample_rate
    deadline = timeout if timeout is not None else 10.0 + (duration_s if realtime else duration_s / 10)

    async def requests() -> AsyncIterator[vad_pb2.VadRequest]:
        yield vad_pb2.VadRequest(settings=settings or vad_pb2.VadSettings())
        for sequence, offset in enumerate(range(0, len(pcm), chunk_bytes)):
            capture_ms = start_ts_ms + round(offset / 2 * 1000 / sample_rate)
            yield vad_pb2.VadRequest(audio=vad_pb2.AudioChunk(
                pcm16=pcm[offset : offset + chunk_bytes], sample_rate=sample_rate,
                sequence=sequence, capture_ts_ms=capture_ms))
            if realtime:
                await asyncio.sleep(chunk_ms / 1000)

    call = stub.StreamAudio(requests(), timeout=deadline)
    try:
        async for event in call:
            yield event
    finally:
        call.cancel()  # a no-op once the call is done; stops the server if the caller left early


def describe(event: vad_pb2.VadEvent) -> str:
    if event.kind == vad_pb2.VadEvent.SPEECH_ENDED:
        return (f"speech {event.start_ts_ms / 1000:7.3f} s - {event.end_ts_ms / 1000:7.3f} s "
                f"(samples {event.start_sample}-{event.end_sample})")
    if event.kind == vad_pb2.VadEvent.SPEECH_STARTED:
        return f"  started at {event.start_ts_ms / 1000:.3f} s (p={event.probability:.2f})"
    return f"  p={event.probability:.2f} at {event.start_ts_ms / 1000:.3f} s"


async def _main(args: argparse.Namespace) -> int:
    wav = audio.read_wav(Path(args.file).read_bytes())
    if wav.channels != 1 or wav.sample_width != 2 or wav.sample_rate not in (16000, 8000):
        print(f"{args.file}: need 16-bit mono WAV at 16000 or 8000 Hz, got {wav.sample_width * 8}-bit, "
              f"{wav.channels} channel(s), {wav.sample_rate} Hz; convert with "
              f"`sox {args.file} -r 16000 -c 1 -b 16 out.wav`", file=sys.stderr)
        return 2
    settings = vad_pb2.VadSettings(min_silence_ms=args.min_silence_ms)
    async with grpc.aio.insecure_channel(args.addr) as channel:
        stub = vad_pb2_grpc.VadServiceStub(channel)
        try:
            async for event in stream_pcm(stub, wav.pcm, wav.sample_rate, settings=settings,
                                          chunk_ms=args.chunk_ms, realtime=args.realtime):
                if args.verbose or event.kind == vad_pb2.VadEvent.SPEECH_ENDED:
                    print(describe(event), flush=True)
        except grpc.RpcError as exc:
            print(f"vad service at {args.addr}: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 1
    return 0


def main() -> None:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    vad = config.exit_on_error(lambda: config.load(config.VadConfig))
    parser = argparse.ArgumentParser(description="Print the speech segments the vad service finds in a WAV file.")
    parser.add_argument("file", help="16-bit mono WAV, 16000 or 8000 Hz")
    parser.add_argument("--addr", default=f"{common.host}:{vad.port}", help="vad service address")
    parser.add_argument("--chunk-ms", type=float, default=20.0, help="audio per message")
    parser.add_argument("--realtime", action="store_true", help="pace the chunks like a live microphone")
    parser.add_argument("--min-silence-ms", type=int, default=0, help="end-of-turn silence (0: server default)")
    parser.add_argument("-v", "--verbose", action="store_true", help="also print speech starts")
    sys.exit(asyncio.run(_main(parser.parse_args())))


if __name__ == "__main__":
    main()
