"""From settings to warmed-up models (Silero, and the smart-turn model unless turned off) and the default
endpointing settings.

Shared by the service's start-up and the evaluation's in-process path, so the two cannot drift apart.
"""

from __future__ import annotations

from pathlib import Path

from services.common import config
from services.vad.engine import SileroVad, VadSettings
from services.vad.smart_turn import SmartTurn, default_model_path


def load_model(model_path: Path | None) -> SileroVad:
    model = SileroVad(model_path)
    model.warm_up()
    return model


def load_turn_model(cfg: config.VadConfig, common: config.CommonConfig) -> SmartTurn | None:
    """The warmed-up turn model, or None when SOTTO_VAD_SEMANTIC_TURN is off; FileNotFoundError says how to get it."""
    if not cfg.semantic_turn:
        return None
    model = SmartTurn(cfg.turn_model or default_model_path(common.model_dir))
    model.warm_up()
    return model


def default_settings(cfg: config.VadConfig) -> VadSettings:
    try:
        return VadSettings(threshold=cfg.threshold, min_speech_ms=cfg.min_speech_ms,
                           min_silence_ms=cfg.min_silence_ms, speech_pad_ms=cfg.speech_pad_ms,
                           semantic=cfg.semantic_turn, turn_silence_ms=cfg.turn_silence_ms,
                           early_turn_silence_ms=min(cfg.early_turn_silence_ms, cfg.turn_silence_ms),
                           max_turn_silence_ms=cfg.max_turn_silence_ms, barge_in_threshold=cfg.barge_in_threshold,
                           barge_in_min_speech_ms=cfg.barge_in_min_speech_ms,
                           barge_in_level_db=cfg.barge_in_level_db)
    except ValueError as exc:
        raise config.ConfigError(f"SOTTO_VAD_* settings: {exc}") from None
