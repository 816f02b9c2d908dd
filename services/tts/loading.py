"""From settings to a warmed-up engine with the configured default voice.

Which engine: ``SOTTO_TTS_ENGINE`` names one, or ``auto`` picks Kokoro (MLX on Apple Silicon, else ONNX) wherever
its model is at hand with an English voice or with the voice asked for. Where it is not (no Kokoro model, or only
the offline kit, whose voices are Japanese) and a Piper voice is installed, ``auto`` picks Piper, so an offline
machine still answers in an English voice; the reason goes to the service's info and log.

Shared by the service's start-up and the benchmark's in-process path, so the two cannot drift apart.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from services.common import config
from services.common.models import ModelUnavailable
from services.tts import models
from services.tts.engine import create_engine, default_backend

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Choice:
    backend: str  # 'onnx', 'mlx' or 'piper'
    model: Path  # Kokoro's folder, or Piper's first voice
    voices: dict[str, Path] | None = None  # Piper's voices
    reason: str = ""  # why auto chose this engine, when it is not the platform's Kokoro


@dataclass(frozen=True)
class Loaded:
    engine: object
    backend: str
    model: Path
    reason: str


def _piper(explicit: Path | None, reason: str) -> Choice:
    voices = models.piper_voices(explicit)
    return Choice("piper", next(iter(voices.values())), voices, reason)


def choose(cfg: config.TtsConfig, common: config.CommonConfig) -> Choice:
    """The engine and model the settings ask for; raises ModelUnavailable saying how to fix it."""
    if cfg.engine == "piper":
        return _piper(cfg.model, "")
    backend = default_backend() if cfg.engine == "auto" else cfg.engine
    try:
        folder = models.model_folder(backend, cfg.model, common)
    except ModelUnavailable as exc:
        if cfg.engine != "auto" or cfg.model is not None:
            raise
        try:
            return _piper(None, f"no Kokoro model ({str(exc).split('. Provide')[0]}); Piper's English voice speaks")
        except ModelUnavailable:
            raise exc from None
    voices = models.kokoro_voices(backend, folder)
    if cfg.engine == "auto" and cfg.voice not in voices and not models.speaks_english(voices):
        try:
            return _piper(None, f"Kokoro's model here ({folder}) has no English voice (it has "
                                f"{', '.join(voices)}) and SOTTO_TTS_VOICE={cfg.voice} is none of them: "
                                f"Piper's English voice speaks")
        except ModelUnavailable as exc:
            _LOGGER.warning("no_english_voice", extra={"model": str(folder), "reason": str(exc)})
    return Choice(backend, folder)


def load_engine(cfg: config.TtsConfig, common: config.CommonConfig) -> Loaded:
    """Choose, build and warm up the engine (runs on the engine's worker thread)."""
    choice = choose(cfg, common)
    if choice.reason:
        _LOGGER.warning("tts_engine_chosen", extra={"engine": choice.backend, "reason": choice.reason})
    engine = create_engine(choice.backend, choice.voices or choice.model, memory_fraction=common.memory_budget,
                           threads=cfg.threads or None, spin_wait=cfg.spin_wait,
                           default_language=cfg.language, max_chars=cfg.max_text_chars,
                           chunk_samples=cfg.chunk_samples, max_phonemes=cfg.max_phonemes_per_run,
                           first_unit_words=cfg.first_unit_words)
    if cfg.voice in engine.voices():
        engine.default_voice = cfg.voice
    elif not choice.reason:  # a chosen fallback says why already
        _LOGGER.warning("default_voice_missing", extra={"wanted": cfg.voice, "using": engine.default_voice})
    engine.warmup()
    return Loaded(engine, choice.backend, choice.model, choice.reason)
