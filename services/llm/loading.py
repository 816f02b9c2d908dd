"""From settings to a ready engine: which model file to load, and how to configure LiteRT-LM for it.

The service's start-up and the benchmark's in-process path both use these, so the two cannot drift apart.
"""

from __future__ import annotations

import logging
import os
import tempfile
from dataclasses import dataclass
from pathlib import Path

from services.common import config, models
from services.llm.engine import EngineConfig
from services.llm.media import MediaLimits

_LOGGER = logging.getLogger(__name__)

OFFLINE_MODEL = "smollm2-135m-instruct-p64.litertlm"  # what tools/models/llm_kit builds as `instruct`


@dataclass(frozen=True)
class SamplingDefaults:
    """What a request that leaves a sampling field unset gets; the values are the SOTTO_LLM_* settings."""

    temperature: float
    top_p: float
    top_k: int
    max_new_tokens: int

    @classmethod
    def from_config(cls, cfg: config.LlmConfig) -> SamplingDefaults:
        return cls(cfg.temperature, cfg.top_p, cfg.top_k, cfg.max_new_tokens)


def resolve_model(cfg: config.LlmConfig, common: config.CommonConfig) -> tuple[Path, bool, str]:
    """The model file, whether it is the offline stand-in, and a note saying why."""
    hub = models.HubFile(cfg.hf_repo, cfg.hf_file)
    try:
        return models.resolve(hub, cfg.model, "SOTTO_LLM_MODEL", common), False, ""
    except models.ModelUnavailable as exc:
        offline = common.model_dir / "offline" / OFFLINE_MODEL
        if cfg.model is not None or not offline.exists():
            raise
        note = (f"{cfg.hf_file} is unavailable, so the offline stand-in {OFFLINE_MODEL} (text only) is used; "
                f"{str(exc).split('. Provide', 1)[0]}")
        _LOGGER.warning("model_fallback", extra={"model": str(offline), "reason": str(exc)})
        return offline, True, note


def writable_cache_dir(preferred: Path) -> Path:
    """LiteRT-LM needs an existing, writable cache dir; a read-only model volume (containers) gets a temp one."""
    try:
        preferred.mkdir(parents=True, exist_ok=True)
        if os.access(preferred, os.W_OK):
            return preferred
    except OSError:
        pass
    fallback = Path(tempfile.gettempdir()) / "sotto-litert-lm-cache"
    fallback.mkdir(parents=True, exist_ok=True)
    _LOGGER.warning("cache_dir_fallback", extra={"wanted": str(preferred), "using": str(fallback)})
    return fallback


def engine_config(cfg: config.LlmConfig, common: config.CommonConfig, model: Path) -> EngineConfig:
    return EngineConfig(
        model_path=str(model),
        backend=cfg.backend,
        vision_backend=cfg.vision_backend,
        cpu_threads=cfg.threads or None,
        context_tokens=cfg.context_tokens,
        cache_dir=str(writable_cache_dir(common.model_dir / "litert-lm-cache")),
        max_sessions=cfg.max_sessions,
        time_limit_s=cfg.max_inference_s,
        media_limits=MediaLimits(
            max_audio_seconds=cfg.max_audio_s,
            max_image_bytes=cfg.max_image_bytes,
            max_image_pixels=cfg.max_image_pixels,
            max_image_items=cfg.max_images,
        ),
        memory_budget_fraction=common.memory_budget,
    )
