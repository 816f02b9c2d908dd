"""Each component alone, in this process, with no stack running: the VAD's cost per window (bare model,
batched, and through VadStream) and the TTS's first chunk and real-time factor (Kokoro ONNX as the service
runs it; Kokoro MLX where it can run at all; any engines side by side with `python -m tools.bench tts`).

CPU figures count the CPU of one thread (VAD) or of this process (TTS), so they hold on a busy machine where
wall times say little.
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import sys
import time

import numpy as np

from services.vad.engine import SileroVad
from services.vad.loading import load_model

RATE = 16000
WINDOW = 512
WINDOW_MS = WINDOW * 1000 / RATE
ANSWERS = {
    "short": "Sure, I can help with that.",
    "medium": ("The capital of France is Paris. It sits on the Seine, and about two million people "
               "live in the city itself."),
}
MLX_SENTENCE = "Hi there."
SAMPLE_RATE_OUT = 24000


def _speech_like(seconds: float, seed: int) -> np.ndarray:
    """A voiced tone with noise, amplitude-modulated like syllables: the VAD does its full work on it."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * RATE)) / RATE
    envelope = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * t + seed)
    signal = envelope * (0.3 * np.sin(2 * np.pi * 180 * t) + 0.05 * rng.standard_normal(len(t)))
    return (signal * 32767).astype(np.int16)


def vad_model_ms(model: SileroVad, batch: int, calls: int) -> float:
    """CPU ms per window of bare inference calls on `batch` windows at once."""
    frames = (np.random.default_rng(0).standard_normal((batch, 64 + WINDOW)) * 0.1).astype(np.float32)
    state = np.zeros((2, batch, 128), dtype=np.float32)
    for _ in range(20):
        _, state = model.infer(frames, state, RATE)
    calls = max(100, calls // batch)
    began = time.thread_time()
    for _ in range(calls):
        _, state = model.infer(frames, state, RATE)
    return (time.thread_time() - began) * 1000 / (calls * batch)


def vad_stream_ms(model: SileroVad, streams: int, seconds: float, chunk_ms: float = 20.0) -> float:
    """CPU ms per window through VadStream.push, framing and endpointing included."""
    audio = [_speech_like(seconds, seed) for seed in range(streams)]
    chunk = int(RATE * chunk_ms / 1000)
    vads = [model.open_stream() for _ in range(streams)]
    began = time.thread_time()
    for offset in range(0, len(audio[0]), chunk):
        for vad, samples in zip(vads, audio):
            vad.push(samples[offset:offset + chunk], capture_ms=offset / 16)
    elapsed = time.thread_time() - began
    for vad in vads:
        vad.close()
    return elapsed * 1000 / (streams * (len(audio[0]) // WINDOW))


def vad(calls: int = 2000, streams: int = 20, seconds: float = 3.0) -> dict:
    """A real-time stream needs one window every 32 ms, hence streams per core = 32 ms / cost per window."""
    model = load_model(None)
    stream = vad_stream_ms(model, streams, seconds)
    return {"model_ms_per_window": round(vad_model_ms(model, 1, calls), 4),
            "model_batch8_ms_per_window": round(vad_model_ms(model, 8, calls), 4),
            "stream_ms_per_window": round(stream, 4), "window_ms": WINDOW_MS,
            "realtime_streams_per_core": round(WINDOW_MS / stream) if stream else None}


def _synthesis(engine, text: str, voice: str) -> tuple[float, float, float, float]:
    """(first chunk s, total s, audio s, CPU s of this process) for one synthesis."""
    started, cpu_started = time.perf_counter(), time.process_time()
    first, samples = None, 0
    for chunk in engine.synthesize(text, voice):
        first = first or time.perf_counter() - started
        samples += chunk.samples
    return first or 0.0, time.perf_counter() - started, samples / engine.sample_rate, time.process_time() - cpu_started


def tts_answers(engine, voice: str, repeat: int = 2, answers: tuple[str, ...] = tuple(ANSWERS)) -> dict:
    """First chunk, RTF and CPU RTF of `engine` on each answer (median of `repeat` runs)."""
    rows = {}
    for name in answers:
        runs = [_synthesis(engine, ANSWERS[name], voice) for _ in range(repeat)]
        first, total, cpu = (statistics.median(r[i] for r in runs) for i in (0, 1, 3))
        audio = runs[0][2]
        rows[name] = {"chars": len(ANSWERS[name]), "first_chunk_s": round(first, 3), "total_s": round(total, 3),
                      "audio_s": round(audio, 3), "rtf": round(total / audio, 3), "cpu_rtf": round(cpu / audio, 3)}
    return rows


def tts(engine, voice: str, repeat: int = 2, answers: tuple[str, ...] = tuple(ANSWERS)) -> dict:
    """`engine`: the one the direct path built with the tts service's own loader (services.tts.loading), so
    this measures what the service runs. RTF = synthesis time / audio duration (below 1: faster than real time)."""
    return {"engine": engine.name, "answers": tts_answers(engine, voice, repeat, answers), "mlx": _mlx()}


def tts_engines(names: tuple[str, ...], repeat: int = 5, answers: tuple[str, ...] = tuple(ANSWERS)) -> dict:
    """Each named engine (SOTTO_TTS_ENGINE values) built by the service's own loader, offline, with the models a
    fresh `make test` has (Kokoro: the offline kit; Piper: the voice the `tts` extra installs), on the same
    answers, one engine at a time."""
    from services.common import config
    from services.tts.loading import load_engine
    from tools.stack import model_dir

    env = {"SOTTO_OFFLINE": "true", "SOTTO_MODEL_DIR": str(model_dir())}
    common = config.load(config.CommonConfig, env)
    rows = {}
    for name in names:
        started = time.perf_counter()
        loaded = load_engine(config.load(config.TtsConfig, {**env, "SOTTO_TTS_ENGINE": name}), common)
        load_s = time.perf_counter() - started
        rows[name] = {"engine": loaded.engine.name, "voice": loaded.engine.default_voice,
                      "load_and_warmup_s": round(load_s, 2),
                      "answers": tts_answers(loaded.engine, loaded.engine.default_voice, repeat, answers)}
    return rows


def print_tts_engines(rows: dict) -> None:
    print(f"{'engine':<12}{'voice':<18}{'answer':<8}{'audio s':>8}{'1st chunk ms':>13}{'RTF':>7}{'CPU RTF':>9}")
    for row in rows.values():
        for answer, a in row["answers"].items():
            print(f"{row['engine']:<12}{row['voice']:<18}{answer:<8}{a['audio_s']:>8.2f}"
                  f"{a['first_chunk_s'] * 1000:>13.0f}{a['rtf']:>7.3f}{a['cpu_rtf']:>9.3f}")


def mlx_once() -> None:
    """One tiny sentence on Kokoro MLX; prints wall seconds and audio seconds (run by `_mlx` in a subprocess)."""
    from services.tts.kokoro_mlx import KokoroMlx
    from tools.stack import model_dir

    engine = KokoroMlx(model_dir() / "kokoro-kit" / "mlx")
    started = time.perf_counter()
    samples = sum(chunk.samples for chunk in engine.synthesize(MLX_SENTENCE, "jf_alpha"))
    print(time.perf_counter() - started, samples / engine.sample_rate)


def _mlx(timeout_s: float = 120.0) -> dict:
    """MLX is for Apple Silicon; on a Linux CPU it is far slower than real time, so: one tiny sentence at most,
    in a subprocess that a time bound can stop."""
    if importlib.util.find_spec("mlx") is None or importlib.util.find_spec("kokoro_mlx") is None:
        return {"skipped": "mlx / kokoro-mlx are not installed here (the tts-mlx extra)"}
    code = "from tools.bench.components import mlx_once; mlx_once()"
    try:
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout_s)
        wall, audio = map(float, done.stdout.split()[-2:])
    except subprocess.TimeoutExpired:
        return {"skipped": f"a tiny sentence did not finish within {timeout_s:.0f} s on this CPU"}
    except ValueError:
        return {"skipped": "kokoro-mlx failed: " + (done.stderr.strip().splitlines() or ["?"])[-1]}
    return {"text": MLX_SENTENCE, "total_s": round(wall, 2), "audio_s": round(audio, 2), "rtf": round(wall / audio, 2)}


UNIT_SENTENCE = "The capital of France is Paris, a city on the Seine where about two million people live today."


def _silence_at_seam(chunks: list, first: int) -> float:
    """ms of silence from unit `first`'s last loud sample to the next unit's first one (level above 1 %)."""
    def pcm(index: int) -> np.ndarray:
        return np.frombuffer(b"".join(c.pcm for c in chunks if c.sentence_index == index), np.int16)
    before, after = pcm(first), pcm(first + 1)
    loud_before, loud_after = np.flatnonzero(np.abs(before) > 328), np.flatnonzero(np.abs(after) > 328)
    return round((len(before) - 1 - loud_before[-1] + loud_after[0]) * 1000 / SAMPLE_RATE_OUT, 1)


def opening_units(name: str, repeat: int = 5, words: tuple[int, ...] = (1, 2, 3, 4, 6, 8, 12)) -> dict:
    """How long the first unit of speech may be: the engine's first chunk for an opening of n words, and the
    silence a listener hears where one phrase is spoken as two units (cut between words) against a cut at a
    clause (the comma) and between sentences. A listening-free proxy for how natural the seams sound."""
    from services.common import config
    from services.tts.loading import load_engine
    from services.tts.text import Sentence
    from tools.stack import model_dir

    env = {"SOTTO_OFFLINE": "true", "SOTTO_MODEL_DIR": str(model_dir()), "SOTTO_TTS_ENGINE": name}
    engine = load_engine(config.load(config.TtsConfig, env), config.load(config.CommonConfig, env)).engine
    split = UNIT_SENTENCE.split()
    first = {}
    for n in words:
        opening = " ".join(split[:n])
        unit = [Sentence(0, opening, 0, len(opening), True)]
        runs = [_synthesis_of(engine, unit) for _ in range(repeat)]
        first[n] = {"chars": len(opening), "first_chunk_ms": round(statistics.median(runs), 1)}
    cuts = {"between words (trimmed, no pause)": ("The capital of France", "is Paris, a city on the Seine.", True),
            "at a clause": ("The capital of France is Paris,", "a city on the Seine.", False),
            "between sentences": ("The capital of France is Paris.", "It is on the Seine.", False)}
    seams = {}
    for label, (head, tail, continues) in cuts.items():
        units = [Sentence(0, head, 0, len(head), continues),
                 Sentence(1, tail, len(head) + 1, len(head) + 1 + len(tail))]
        seams[label] = _silence_at_seam(list(engine.synthesize_sentences(units)), 0)
    return {"engine": engine.name, "voice": engine.default_voice, "opening_words": first, "seam_silence_ms": seams}


def _synthesis_of(engine, sentences: list) -> float:
    started = time.perf_counter()
    next(iter(engine.synthesize_sentences(sentences)))
    return (time.perf_counter() - started) * 1000


def print_opening_units(r: dict) -> None:
    print(f"{r['engine']} ({r['voice']}): first chunk of an opening of n words")
    for n, row in r["opening_words"].items():
        print(f"  {n:>3} words ({row['chars']:>3} chars): {row['first_chunk_ms']:>7.1f} ms")
    for label, ms in r["seam_silence_ms"].items():
        print(f"  silence heard at a seam {label}: {ms:.0f} ms")
