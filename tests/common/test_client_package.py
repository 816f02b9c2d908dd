"""Another tool can install Sotto's stubs and clients alone: the package's own requirements are what the generated
stubs check at import (protobuf's gencode version, grpcio's generated version), so an environment that already has
an older runtime is upgraded at install time instead of failing at import."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]


def requirement(name: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return next(r for r in map(Requirement, project["dependencies"]) if r.name == name)


def stub_protobuf_version() -> Version:
    """The protobuf runtime the stubs were generated for: ValidateProtobufRuntimeVersion(domain, major, minor,
    patch, ...) refuses an older runtime or another major version."""
    text = (ROOT / "sotto/v1/llm_pb2.py").read_text()
    pattern = r"ValidateProtobufRuntimeVersion\(\s*\S+,\s*(\d+),\s*(\d+),\s*(\d+),"
    major, minor, patch = re.search(pattern, text).groups()
    return Version(f"{major}.{minor}.{patch}")


def test_the_protobuf_requirement_is_what_the_stubs_validate() -> None:
    needed, allowed = stub_protobuf_version(), requirement("protobuf").specifier
    assert needed in allowed and Version(f"{needed.major}.999") in allowed
    assert not any(Version(v) in allowed for v in (f"{needed.major}.{needed.minor}.{needed.micro - 1}"
                                                   if needed.micro else f"{needed.major}.{needed.minor - 1}.99",
                                                   f"{needed.major - 1}.99.99", f"{needed.major + 1}.0.0"))


def test_the_grpcio_requirement_is_at_least_what_the_stubs_were_generated_with() -> None:
    generated = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", (ROOT / "sotto/v1/llm_pb2_grpc.py").read_text())
    assert all(Version(v) >= Version(generated.group(1)) for v in (s.version for s in requirement("grpcio").specifier))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_package_alone_installs_over_an_older_protobuf_and_its_stubs_and_client_import(tmp_path: Path) -> None:
    """A clean venv that already holds protobuf 6 (another tool's), then `pip install` of this package alone, with
    no extra (offline: pip reads the local package index): the stubs and the llm client import."""
    source = tmp_path / "sotto"  # a copy: pip builds in the source tree, and the checkout stays as it was
    source.mkdir()
    shutil.copy(ROOT / "pyproject.toml", source)
    for package in ("services", "sotto", "tools"):
        shutil.copytree(ROOT / package, source / package, ignore=shutil.ignore_patterns("__pycache__", "vendor"))
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    subprocess.run([*pip, "protobuf==6.31.1"], check=True, capture_output=True)
    subprocess.run([*pip, str(source)], check=True, capture_output=True, cwd=tmp_path)
    probe = ("import google.protobuf as p; from sotto.v1 import llm_pb2, llm_pb2_grpc, tts_pb2_grpc; "
             "from services.llm import client; print(p.__version__, llm_pb2.DESCRIPTOR.package)")
    result = subprocess.run([str(venv / "bin/python"), "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    version, package = result.stdout.split()
    assert Version(version) >= stub_protobuf_version() and package == "sotto.v1"
