"""The generated stubs match protos/ (they are never hand-edited; `make proto` regenerates them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_generated_stubs_are_fresh(tmp_path: Path) -> None:
    protos = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "protos/sotto/v1").glob("*.proto"))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-Iprotos", f"--python_out={tmp_path}",
                    f"--grpc_python_out={tmp_path}", f"--pyi_out={tmp_path}", *protos], cwd=ROOT, check=True)
    generated = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*.py*"))
    assert generated, "protoc generated nothing"
    stale = [str(rel) for rel in generated if (ROOT / rel).read_bytes() != (tmp_path / rel).read_bytes()]
    assert not stale, f"stale generated files (run `make proto`): {stale}"


def test_stubs_import_as_a_package() -> None:
    from sotto.v1 import llm_pb2, llm_pb2_grpc, tts_pb2_grpc, vad_pb2_grpc  # noqa: F401

    assert llm_pb2.DESCRIPTOR.package == "sotto.v1"
