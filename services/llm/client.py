"""Command-line client of the llm service: ask a question, with an image or a WAV if you like.

    python -m services.llm.client "What is the capital of France?"
    python -m services.llm.client "What do you see and hear?" --image cam.jpg --audio question.wav
    python -m services.llm.client --info

The reply streams to stdout as it decodes; the timings go to stderr. Every call carries a deadline,
Ctrl-C cancels the call (the service stops decoding), and errors exit non-zero with the service's
message: INVALID_ARGUMENT (bad input), RESOURCE_EXHAUSTED (busy), UNAVAILABLE (engine failure or
still loading), DEADLINE_EXCEEDED.
"""

from __future__ import annotations

import argparse
import mimetypes
import sys
from pathlib import Path

import grpc

from services.common import config
from sotto.v1 import llm_pb2, llm_pb2_grpc

_FINISH_NAMES = {v: k.lower() for k, v in llm_pb2.FinishReason.items()}


def default_address() -> str:
    """The address the gateway would use: the shared configuration, not a second reading of the environment."""
    settings = config.exit_on_error(config.load_all)
    return config.grpc_address(settings.gateway.llm_addr, settings.common.host, settings.llm.port)


def build_request(question: str, *, image: Path | None = None, audio: Path | None = None, system: str = "",
                  session_id: str = "", max_new_tokens: int | None = None, temperature: float | None = None,
                  seed: int | None = None) -> llm_pb2.GenerateRequest:
    user = llm_pb2.UserContent(text=question)
    if audio is not None:
        user.audio_wav = audio.read_bytes()
    if image is not None:
        mime = mimetypes.guess_type(image.name)[0] or "image/jpeg"
        user.images.append(llm_pb2.Image(data=image.read_bytes(), mime_type=mime))
    sampling = llm_pb2.Sampling()
    if max_new_tokens is not None:
        sampling.max_new_tokens = max_new_tokens
    if temperature is not None:
        sampling.temperature = temperature
    if seed is not None:
        sampling.seed = seed
    return llm_pb2.GenerateRequest(session_id=session_id, system_prompt=system, user=user, sampling=sampling)


def ask(stub: llm_pb2_grpc.LlmServiceStub, request: llm_pb2.GenerateRequest, timeout: float, out=sys.stdout):
    """Stream the reply to `out`; return the final GenerateDone."""
    call = stub.Generate(request, timeout=timeout)
    try:
        for event in call:
            if event.HasField("text_delta"):
                out.write(event.text_delta)
                out.flush()
            else:
                return event.done
    except KeyboardInterrupt:
        call.cancel()  # leaving the loop alone would let the service decode on
        raise
    raise RuntimeError("the stream ended without a done event")


def describe(done: llm_pb2.GenerateDone) -> str:
    t = done.timings
    return (f"[{_FINISH_NAMES.get(done.finish_reason, '?')}] queue {t.queue_wait_ms:.0f} ms, "
            f"first token {t.time_to_first_token_ms:.0f} ms, prefill {t.prefill_tokens} tokens "
            f"({t.prefill_tokens_per_s:.0f}/s), decode {t.decode_tokens} tokens ({t.decode_tokens_per_s:.1f}/s), "
            f"total {t.total_ms:.0f} ms{', reused conversation' if t.reused_conversation else ''}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Ask the Sotto llm service a question.")
    parser.add_argument("question", nargs="?", default="", help="the text of the question")
    parser.add_argument("--image", type=Path, help="a JPEG or PNG file to show")
    parser.add_argument("--audio", type=Path, help="a WAV file (PCM 16-bit mono) to say")
    parser.add_argument("--system", default="", help="system prompt")
    parser.add_argument("--session", default="", help="session id (reuses the conversation across calls)")
    parser.add_argument("--max-new-tokens", type=int)
    parser.add_argument("--temperature", type=float)
    parser.add_argument("--seed", type=int)
    parser.add_argument("--addr", default=default_address(), help="service address (default %(default)s)")
    parser.add_argument("--timeout", type=float, default=60.0, help="deadline in seconds (default %(default)s)")
    parser.add_argument("--info", action="store_true", help="print the model info and exit")
    args = parser.parse_args(argv)
    if not args.info and not (args.question or args.image or args.audio):
        parser.error("give a question, an --image or an --audio file (or --info)")

    with grpc.insecure_channel(args.addr) as channel:
        stub = llm_pb2_grpc.LlmServiceStub(channel)
        try:
            if args.info:
                print(stub.GetModelInfo(llm_pb2.GetModelInfoRequest(), timeout=args.timeout))
                return 0
            request = build_request(
                args.question, image=args.image, audio=args.audio, system=args.system, session_id=args.session,
                max_new_tokens=args.max_new_tokens, temperature=args.temperature, seed=args.seed,
            )
            done = ask(stub, request, args.timeout)
        except grpc.RpcError as exc:
            print(f"\nerror: {exc.code().name}: {exc.details()}", file=sys.stderr)
            return 2
        except KeyboardInterrupt:
            print("\ncancelled", file=sys.stderr)
            return 130
    print(file=sys.stdout)
    print(describe(done), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
