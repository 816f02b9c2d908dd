"""The offline kit: complete, idempotent, and a float conversion that MLX can load without NaN."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tools.models import kokoro_kit
from tools.models.kokoro_convert import split_weight_norm


def test_kit_is_complete_and_rebuilds_nothing(kit):
    manifest = json.loads((kit / kokoro_kit.MANIFEST).read_text())
    assert manifest["sha256"][kokoro_kit.ONNX_MODEL] == \
        "6e742170d309016e5891a994e1ce1559c702a2ccd0075e67ef7157974f6406cb"
    assert manifest["voices"] == list(kokoro_kit.OFFLINE_VOICES)
    assert manifest["mlx_tensors"] > 500
    stamps = {p: p.stat().st_mtime_ns for p in kit.rglob("*") if p.is_file()}
    kokoro_kit.build(kit)
    assert {p: p.stat().st_mtime_ns for p in kit.rglob("*") if p.is_file()} == stamps


def test_weight_norm_split_rebuilds_the_weight_and_survives_zero_channels():
    w = np.random.default_rng(0).normal(size=(4, 3, 5)).astype(np.float32)
    w[2] = 0.0  # an output channel that quantised to all zeros
    g, v = split_weight_norm(w)
    norm = np.sqrt((v.reshape(4, -1) ** 2).sum(axis=1)).reshape(4, 1, 1)
    rebuilt = g * v / norm  # what the MLX loader computes
    assert np.isfinite(rebuilt).all()
    np.testing.assert_allclose(rebuilt, w, atol=1e-6)


def test_converted_weights_cover_what_kokoro_mlx_reads(kit):
    mx = pytest.importorskip("mlx.core")
    model_module = pytest.importorskip("kokoro_mlx.model")
    from kokoro_mlx.config import KokoroConfig

    weights = mx.load(str(kit / kokoro_kit.MLX_WEIGHTS))
    asked: set[str] = set()

    class Recording(dict):
        def __contains__(self, key):
            asked.add(key)
            return dict.__contains__(self, key)

        def __getitem__(self, key):
            asked.add(key)
            return dict.__getitem__(self, key)

    model = model_module.KokoroModel(KokoroConfig.from_file(kit / "mlx" / "config.json"))
    model_module.load_weights(model, Recording(weights))
    # bias-free convolutions (conv1x1) and the unused ALBERT pooler are all that may be absent
    missing = {k for k in asked if k not in weights}
    assert all(k.endswith("conv1x1.bias") or k.startswith("bert.pooler.") for k in missing), missing
    assert not set(weights) - asked, "converted tensors the loader never reads"
