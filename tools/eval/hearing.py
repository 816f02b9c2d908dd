"""`python -m tools.eval.hearing` (`make eval`): how well Sotto hears, and what hearing costs.

Parts (all by default; `--parts` picks some):
- asr: the word error rate of the asr service on the spoken test set (tools.eval.corpus), and end of speech →
  words with recognition while the user speaks against recognising the whole clip at the end;
- roundtrip: ASR(TTS(text)) for each `--tts-engine` (a SOTTO_TTS_ENGINE value): can the recogniser understand the
  voice (an intelligibility check of the voice, bounded by the recogniser's own error rate above);
- cascade: spoken turns with the offline text-only SmolLM2 through the real stack: time to first audio and its
  stages, with and without recognition while the user speaks;
- beside: spoken turns with a model that hears the audio, with and without the asr service: what recognition
  costs the first audio there.
The results are saved as bench/results/hearing-<time>.json; docs/performance.md summarises them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from scipy.signal import resample_poly

from services.asr.engine import WhisperEngine
from services.asr.loading import load_engine as load_recogniser
from services.common import config
from services.tts.loading import load_engine as load_voice
from tools.bench.stats import commit, machine
from tools.eval import cascade, corpus, recognition

PARTS = ("asr", "roundtrip", "cascade", "beside")


def round_trip(recogniser: WhisperEngine, engine_name: str, voice: str) -> dict:
    """Speak every sentence with the tts engine, hear it back; the word error rate of what came back."""
    environ = {**os.environ, "SOTTO_TTS_ENGINE": engine_name, "SOTTO_OFFLINE": "true",
               **({"SOTTO_TTS_VOICE": voice} if voice else {})}
    loaded = load_voice(config.load(config.TtsConfig, environ), config.load(config.CommonConfig, environ))
    tts, folder = loaded.engine, loaded.model
    heard, seconds = [], 0.0
    for text in corpus.SENTENCES:
        pcm = b"".join(chunk.pcm for chunk in tts.synthesize(text))
        samples = np.frombuffer(pcm, dtype="<i2").astype(np.float32) / 32768.0
        seconds += len(samples) / tts.sample_rate
        divisor = np.gcd(corpus.SAMPLE_RATE, tts.sample_rate)
        at_16k = resample_poly(samples, corpus.SAMPLE_RATE // divisor, tts.sample_rate // divisor).astype(np.float32)
        heard.append(recogniser.transcribe(at_16k).text)
        print(f"  {heard[-1]!r}", flush=True)
    return {"engine": engine_name, "voice": tts.default_voice, "model": str(folder), "sample_rate": tts.sample_rate,
            "sentences": len(heard), "audio_s": round(seconds, 1),
            "wer": corpus.wer(list(corpus.SENTENCES), heard), "heard": heard}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated, of {', '.join(PARTS)}")
    parser.add_argument("--tts-engine", action="append", default=None,
                        help="a SOTTO_TTS_ENGINE value for the round trip (repeatable; default: onnx)")
    parser.add_argument("--tts-voice", default="", help="voice for the round trip (default: the engine's)")
    parser.add_argument("--turns", type=int, default=12, help="spoken turns per stack run (cascade, beside)")
    parser.add_argument("--out", type=Path, default=Path("bench/results"))
    args = parser.parse_args()
    parts = [p for p in args.parts.split(",") if p]
    unknown = set(parts) - set(PARTS)
    if unknown:
        parser.error(f"unknown parts {sorted(unknown)}; choose from {', '.join(PARTS)}")
    results: dict = {"machine": machine(), "commit": commit()}
    args.out.mkdir(parents=True, exist_ok=True)
    path = args.out / f"hearing-{time.strftime('%Y%m%d-%H%M%S')}.json"

    def save() -> None:  # after each part: a later part's failure keeps the earlier figures
        path.write_text(json.dumps(results, indent=1))

    workdir = Path(tempfile.mkdtemp(prefix="sotto-eval-speech-"))
    clips = corpus.clips(workdir)
    if "asr" in parts or "roundtrip" in parts:
        environ = {**os.environ, "SOTTO_OFFLINE": os.environ.get("SOTTO_OFFLINE", "true")}
        asr_cfg = config.load(config.AsrConfig, environ)
        recogniser, _ = load_recogniser(asr_cfg, config.load(config.CommonConfig, environ))
        if "asr" in parts:
            print(f"asr: {len(clips)} clips, streamed in real time, then whole", flush=True)
            results["asr"] = asyncio.run(recognition.measure(clips, asr_cfg.partial_interval_ms or 4000, workdir))
            save()
        if "roundtrip" in parts:
            results["roundtrip"] = []
            for engine in args.tts_engine or ["onnx"]:
                print(f"roundtrip: {engine}", flush=True)
                results["roundtrip"].append(round_trip(recogniser, engine, args.tts_voice))
                save()
    turns = clips[: args.turns]
    if "cascade" in parts:
        results["cascade"] = []
        for partials in (True, False):
            print(f"cascade: SmolLM2, recognition while speaking {'on' if partials else 'off'}", flush=True)
            results["cascade"].append(cascade.cascade(turns, partials))
            save()
    if "beside" in parts:
        results["beside"] = []
        for on in (True, False):
            print(f"beside: a model that hears, asr {'on' if on else 'off'}", flush=True)
            results["beside"].append(cascade.beside(turns, on))
            save()
    print_summary(results)
    print(f"saved {path}")


def print_summary(results: dict) -> None:
    if asr := results.get("asr"):
        e2w = asr["end_to_words_ms"]
        print(f"\nasr: WER {asr['wer_whole']:.3f} whole clip, {asr['wer_streamed']:.3f} streamed "
              f"(clean {asr['wer_clean']:.3f}, noisy {asr['wer_noisy']:.3f}) on {asr['clips']} clips")
        print(f"  end of speech -> words p50/p95: whole clip {e2w['whole']['p50']}/{e2w['whole']['p95']} ms, "
              f"streamed {e2w['streamed']['p50']}/{e2w['streamed']['p95']} ms; covered by a partial run: "
              f"{asr['covered_by_a_partial']}/{asr['clips']}")
    for rt in results.get("roundtrip", []):
        print(f"roundtrip {rt['engine']} ({rt['voice']}): WER {rt['wer']:.3f} on {rt['sentences']} sentences")
    for run in results.get("cascade", []) + results.get("beside", []):
        label = (f"cascade {run['model']} partials {'on' if run['partials'] else 'off'}" if "partials" in run
                 else f"beside {run['model']} asr {'on' if run['recognition'] else 'off'}")
        stages = ", ".join(f"{k[:-3]} {v['p50']}/{v['p95']}" for k, v in run["stages"].items() if v["n"])
        print(f"{label}: {run['answered']}/{run['turns']} answered; p50/p95 ms: {stages}")


if __name__ == "__main__":
    main()
