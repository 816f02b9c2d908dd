"""Installs the page's npm dependencies and copies the files it loads at run time into one folder served at `/vendor/`.

The page runs Silero VAD in the browser through @ricky0123/vad-web, which needs onnxruntime-web's WASM runtime and
the Silero model. Everything is served by the gateway itself: no CDN, nothing fetched at run time.

    python -m tools.web_assets            # npm ci (when web/package-lock.json changed), then copy into
                                          # services/gateway/vendor
    python -m tools.web_assets --check    # exit 1 if the vendor folder is missing or stale

Idempotent and quick when nothing changed. The versions are pinned exactly in web/package.json: vad-web 0.0.31
is built against onnxruntime-web 1.22.0, and the .wasm/.mjs files must match the ort.wasm.min.js that loads them.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WEB_DIR = ROOT / "web"
NODE_MODULES = WEB_DIR / "node_modules"
VENDOR_DIR = ROOT / "services" / "gateway" / "vendor"  # package data of the gateway (gitignored)
_STAMP = ".sources.json"

# file served as /vendor/<name>  <-  file under web/node_modules
VENDOR_FILES: dict[str, str] = {
    # onnxruntime-web, WASM-only build: sets the `ort` global that vad-web's UMD bundle expects
    "ort.wasm.min.js": "onnxruntime-web/dist/ort.wasm.min.js",
    # loaded by ort.wasm.min.js from env.wasm.wasmPaths (= onnxWASMBasePath)
    "ort-wasm-simd-threaded.mjs": "onnxruntime-web/dist/ort-wasm-simd-threaded.mjs",
    "ort-wasm-simd-threaded.wasm": "onnxruntime-web/dist/ort-wasm-simd-threaded.wasm",
    # vad-web: the MicVAD bundle (sets the `vad` global), its capture worklet and the model (from baseAssetPath)
    "vad.bundle.min.js": "@ricky0123/vad-web/dist/bundle.min.js",
    "vad.worklet.bundle.min.js": "@ricky0123/vad-web/dist/vad.worklet.bundle.min.js",
    "silero_vad_v5.onnx": "@ricky0123/vad-web/dist/silero_vad_v5.onnx",
}


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _lock_digest() -> str:
    return _digest(WEB_DIR / "package-lock.json")


def npm_ci() -> None:
    """Runs `npm ci` unless node_modules already matches package-lock.json (npm writes its own copy of the lock)."""
    installed_lock = NODE_MODULES / ".package-lock.json"
    if installed_lock.exists() and installed_lock.stat().st_mtime >= (WEB_DIR / "package-lock.json").stat().st_mtime:
        return
    npm = shutil.which("npm")
    if npm is None:
        sys.exit("web_assets: npm is not installed (Debian: apt-get install -y npm); it installs the page's VAD files")
    # --ignore-scripts: none of these packages needs an install script to provide the files copied below.
    subprocess.run([npm, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=WEB_DIR, check=True)


def is_fresh(vendor_dir: Path = VENDOR_DIR) -> bool:
    stamp = vendor_dir / _STAMP
    if not stamp.exists():
        return False
    recorded = json.loads(stamp.read_text())
    return recorded.get("lock") == _lock_digest() and all((vendor_dir / name).exists() for name in VENDOR_FILES)


def build(vendor_dir: Path = VENDOR_DIR) -> Path:
    """Makes `vendor_dir` hold exactly VENDOR_FILES, copied from node_modules; returns the folder."""
    if is_fresh(vendor_dir):
        return vendor_dir
    npm_ci()
    vendor_dir.mkdir(parents=True, exist_ok=True)
    for stale in vendor_dir.iterdir():
        if stale.name not in VENDOR_FILES:
            stale.unlink()
    for name, source in VENDOR_FILES.items():
        src = NODE_MODULES / source
        if not src.exists():
            sys.exit(f"web_assets: {src} is missing after npm ci; check the versions pinned in web/package.json")
        shutil.copyfile(src, vendor_dir / name)  # copies, not links: the gateway's static route refuses symlinks
    (vendor_dir / _STAMP).write_text(json.dumps({"lock": _lock_digest(), "files": sorted(VENDOR_FILES)}, indent=1))
    return vendor_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only check that the vendor folder is up to date")
    args = parser.parse_args()
    if args.check:
        sys.exit(0 if is_fresh() else 1)
    print(build())


if __name__ == "__main__":
    main()
