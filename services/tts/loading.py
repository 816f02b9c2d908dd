"""From settings to a warmed-up Kokoro engine with the configured default voice.

Shared by the service's start-up and the benchmark's in-process path, so the two cannot drift apart.
"""

from __future__ import annotations

import logging

from services.common import config
from services.tts import models
from services.tts.engine import create_engine, default_backend

_LOGGER = logging.getLogger(__name__)


def load_engine(cfg: config.TtsConfig, common: config.CommonConfig):
    """Resolve the model, build and warm up the engine (runs on the engine's worker thread)."""
    backend = default_backend() if cfg.engine == "auto" else cfg.engine
    folder = models.model_folder(backend, cfg.model, common)
    engine = create_engine(backend, folder, memory_fraction=common.memory_budget, threads=cfg.threads or None,
                           spin_wait=cfg.spin_wait,
                           default_language=cfg.language, max_chars=cfg.max_text_chars,
                           chunk_samples=cfg.chunk_samples, max_phonemes=cfg.max_phonemes_per_run)
    if cfg.voice in engine.voices():
        engine.default_voice = cfg.voice
    else:
        _LOGGER.warning("default_voice_missing", extra={"wanted": cfg.voice, "using": engine.default_voice})
    engine.warmup()
    return engine, backend, folder
