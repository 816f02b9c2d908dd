"""Which folder each backend loads: explicit, a kit, the cache; else a clear error."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from services.common.config import CommonConfig
from services.common.models import ModelUnavailable
from services.tts import models


def common(tmp_path: Path) -> CommonConfig:
    return dataclasses.replace(CommonConfig(), model_dir=tmp_path / "models", offline=True)


def make_kit(root: Path) -> Path:
    for backend in ("onnx", "mlx"):
        (root / backend).mkdir(parents=True)
    (root / models.KIT_MANIFEST).write_text("{}")
    return root


def test_an_explicit_model_folder_wins(tmp_path):
    folder = tmp_path / "mine"
    folder.mkdir()
    make_kit(common(tmp_path).model_dir / models.KIT_DIRNAME)
    assert models.model_folder("onnx", folder, common(tmp_path)) == folder


def test_an_explicit_kit_root_picks_the_backend_folder(tmp_path):
    kit = make_kit(tmp_path / "kit")
    assert models.model_folder("mlx", kit, common(tmp_path)) == kit / "mlx"


def test_the_offline_kit_in_the_cache_is_used(tmp_path):
    kit = make_kit(common(tmp_path).model_dir / models.KIT_DIRNAME)
    assert models.model_folder("onnx", None, common(tmp_path)) == kit / "onnx"


def test_a_missing_explicit_folder_says_so(tmp_path):
    with pytest.raises(ModelUnavailable, match="SOTTO_TTS_MODEL=.* is not a folder"):
        models.model_folder("onnx", tmp_path / "nowhere", common(tmp_path))


def test_nothing_available_offline_names_the_hub_file_and_the_fixes(tmp_path):
    with pytest.raises(ModelUnavailable) as caught:
        models.model_folder("onnx", None, common(tmp_path))
    message = str(caught.value)
    assert models.ONNX_HUB_REPO in message and "SOTTO_TTS_MODEL" in message and "SOTTO_OFFLINE" in message


def test_hub_files_per_backend():
    assert [h.filename for h in models.HUB_FILES["onnx"]] == ["kokoro-v1.0.onnx", "voices-v1.0.bin"]
    assert [h.filename for h in models.HUB_FILES["mlx"]] == [
        "config.json", "kokoro-v1_0.safetensors", "voices/af_heart.safetensors"]
