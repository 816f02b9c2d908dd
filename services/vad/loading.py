"""From settings to a warmed-up Silero model and the default endpointing settings.

Shared by the service's start-up and the benchmark's in-process path, so the two cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path

from services.common import config
from services.vad.engine import SileroVad, VadSettings


def load_model(model_path: Path | None) -> SileroVad:
    model = SileroVad(model_path)
    model.warm_up()
    return model



def default_settings(cfg: config.VadConfig) -> VadSettings:
    try:
        return VadSettings(threshold=cfg.threshold, min_speech_ms=cfg.min_speech_ms,
                           min_silence_ms=cfg.min_silence_ms, speech_pad_ms=cfg.speech_pad_ms)
    except ValueError as exc:
        raise config.ConfigError(f"SOTTO_VAD_* settings: {exc}") from None
