"""Extract the smart-turn v3 end-of-turn model from the pipecat-ai wheel into the model folder (cached).

    python -m tools.models.smart_turn [--out DIR]      (default: $SOTTO_MODEL_DIR/smart-turn)

Only the one ONNX file is taken (BSD-2-Clause, credited in the README): pip downloads the wheel without its
dependencies into a temporary folder, and pipecat-ai is never installed. The file is checked against
``MODEL_SHA256`` and renamed into place, so an interrupted run leaves no half file; a present, intact file is left
alone.
"""

from __future__ import annotations

import argparse
import hashlib
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from services.common import config
from services.vad.smart_turn import MODEL_FILE, MODEL_SHA256, MODEL_SUBDIR

PACKAGE = "pipecat-ai==1.14.0"
MEMBER = f"pipecat/audio/turn/smart_turn/data/{MODEL_FILE}"


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def extract(out_dir: Path) -> Path:
    target = out_dir / MODEL_FILE
    if target.is_file() and sha256(target) == MODEL_SHA256:
        return target
    out_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                        "-d", tmp, PACKAGE], check=True)
        (wheel,) = Path(tmp).glob("pipecat_ai-*.whl")
        partial = out_dir / f".{MODEL_FILE}.partial"
        with zipfile.ZipFile(wheel) as archive:
            partial.write_bytes(archive.read(MEMBER))
    if (digest := sha256(partial)) != MODEL_SHA256:
        partial.unlink()
        raise SystemExit(f"{MEMBER} in {PACKAGE} has SHA-256 {digest}, expected {MODEL_SHA256}")
    partial.replace(target)
    return target


def main() -> None:
    common = config.exit_on_error(lambda: config.load(config.CommonConfig))
    parser = argparse.ArgumentParser(description="Extract the smart-turn v3 model from the pipecat-ai wheel.")
    parser.add_argument("--out", type=Path, default=common.model_dir / MODEL_SUBDIR, help="target folder")
    print(f"turn model: {extract(parser.parse_args().out)}")


if __name__ == "__main__":
    main()
