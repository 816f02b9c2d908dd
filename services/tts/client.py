"""Command-line client for the tts service: speak text into a WAV file.

    python -m services.tts.client "Hello there. How are you?" -o out.wav [--voice jf_alpha]
        [--speed 1.0] [--language en-us] [--stream] [--addr 127.0.0.1:50053] [--timeout 60]
    python -m services.tts.client --list-voices

--stream sends the text word by word through SynthesizeStream, as an LLM would, and reports when
the first audio arrived relative to the last word sent.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Iterator

import grpc

from services.common import audio, config
from sotto.v1 import tts_pb2, tts_pb2_grpc


def _stream_requests(text: str, voice_config: tts_pb2.VoiceConfig, sent: list[float]) -> Iterator:
    yield tts_pb2.SynthesizeStreamRequest(config=voice_config)
    for piece in re.findall(r"\s*\S+", text):
        sent.append(time.perf_counter())
        yield tts_pb2.SynthesizeStreamRequest(text=piece)


def main(argv: list[str] | None = None) -> int:
    common = config.load(config.CommonConfig)
    tts = config.load(config.TtsConfig)
    parser = argparse.ArgumentParser(description="Speak text with the sotto tts service.")
    parser.add_argument("text", nargs="?", help="text to speak")
    parser.add_argument("-o", "--output", default="out.wav", help="WAV file to write")
    parser.add_argument("--addr", default=f"{common.host}:{tts.port}")
    parser.add_argument("--voice", default="")
    parser.add_argument("--speed", type=float, default=0.0)
    parser.add_argument("--language", default="")
    parser.add_argument("--stream", action="store_true", help="send the text word by word")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds for the whole call")
    parser.add_argument("--list-voices", action="store_true")
    args = parser.parse_args(argv)

    with grpc.insecure_channel(args.addr) as channel:
        stub = tts_pb2_grpc.TtsServiceStub(channel)
        try:
            if args.list_voices:
                reply = stub.ListVoices(tts_pb2.ListVoicesRequest(), timeout=args.timeout)
                for voice in reply.voices:
                    mark = " (default)" if voice.name == reply.default_voice else ""
                    print(f"{voice.name}\t{voice.language}{mark}")
                return 0
            if not args.text:
                parser.error("give the text to speak (or --list-voices)")
            voice_config = tts_pb2.VoiceConfig(voice=args.voice, speed=args.speed, language=args.language)
            sent: list[float] = []
            started = time.perf_counter()
            if args.stream:
                call = stub.SynthesizeStream(_stream_requests(args.text, voice_config, sent), timeout=args.timeout)
            else:
                call = stub.Synthesize(tts_pb2.SynthesizeRequest(text=args.text, config=voice_config),
                                       timeout=args.timeout)
            pcm, rate, first = bytearray(), 24000, None
            for out in call:
                if first is None:
                    first = time.perf_counter()
                pcm += out.pcm16
                rate = out.sample_rate or rate
        except grpc.RpcError as exc:
            print(f"tts error: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 2 if exc.code() == grpc.StatusCode.INVALID_ARGUMENT else 1
    with open(args.output, "wb") as f:
        f.write(audio.wav_bytes(bytes(pcm), rate))
    total = time.perf_counter() - started
    seconds = len(pcm) / 2 / rate
    when = f"{(first or started) - started:.3f} s after the request"
    if args.stream and sent and first:
        when += f" ({'before' if first < sent[-1] else 'after'} the last word was sent)"
    print(f"wrote {args.output}: {seconds:.2f} s of audio in {total:.2f} s; first audio {when}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
