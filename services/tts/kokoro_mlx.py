"""Kokoro on MLX (kokoro-mlx): Metal on Apple Silicon, the default there; selectable but slow on Linux CPU.

Loads a local folder (config.json, one safetensors with PyTorch key names, voices/*.safetensors). G2P is
espeak, as for ONNX, instead of kokoro-mlx's misaki (which wants spaCy, torch and a model download). A model
run cannot be interrupted: cancel takes effect after it.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from services.common import config
from services.tts.engine import CancelEvent
from services.tts.kokoro_base import MAX_PHONEMES, KokoroBase

_COMMON = config.CommonConfig()  # the settings' defaults: the one place they are written


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def _espeak_tokenizer(vocab: dict[str, int] | None = None):
    from kokoro_onnx.tokenizer import Tokenizer

    return Tokenizer(vocab=vocab)


class KokoroMlx(KokoroBase):
    """Kokoro on MLX, its memory capped at `memory_fraction` of the device's (unified memory on a Mac)."""

    name = "kokoro-mlx"

    def __init__(self, model_dir: str | Path, memory_fraction: float = _COMMON.memory_budget, **options) -> None:
        import mlx.core as mx
        from kokoro_mlx.model import KokoroModel
        from kokoro_mlx.voices import VoiceManager

        total = int(mx.device_info().get("memory_size") or _physical_memory())
        if total and 0 < memory_fraction <= 1:
            mx.set_memory_limit(int(total * memory_fraction))
        self.memory_limit = mx.get_memory_limit()
        self._model = KokoroModel.from_pretrained(Path(model_dir))
        self._voice_files = VoiceManager(Path(model_dir))
        tokenizer = _espeak_tokenizer(self._model.vocab or None)
        super().__init__(self._voice_files.list_voices(), tokenizer, **options)

    def _render(self, phonemes: str, voice: str, speed: float, cancel: CancelEvent) -> np.ndarray:
        from kokoro_onnx.chunker import split_phonemes
        from kokoro_onnx.trim import trim

        pack = self._voice_files.load_voice(voice)
        parts = []
        for batch in split_phonemes(phonemes, MAX_PHONEMES):
            if cancel.is_set():
                break
            tokens = len(self._tokenizer.tokenize(batch))
            style = self._voice_files.get_style(pack, tokens + 1)  # row n-1 for n tokens, as ONNX
            audio = np.array(self._model.forward(batch, style, speed), dtype=np.float32)
            parts.append(trim(audio)[0])
        return np.concatenate(parts) if parts else np.zeros(0, np.float32)
