"""Configuration: bad values stop start-up with a clear message; docs/settings.md is generated from the code."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

from services.common import config, settings_doc

ROOT = Path(__file__).resolve().parents[2]


def test_defaults_follow_the_design() -> None:
    s = config.load_all({})
    assert (s.vad.port, s.llm.port, s.tts.port, s.gateway.port) == (50051, 50052, 50053, 8000)
    assert (s.vad.threshold, s.vad.min_speech_ms) == (0.5, 300)
    assert (s.llm.max_new_tokens, s.llm.temperature, s.llm.top_p, s.llm.max_concurrent) == (25, 0.7, 0.9, 2)
    assert s.gateway.request_timeout_ms == 2000 and s.common.memory_budget == 0.65
    assert s.common.host == "127.0.0.1"


def test_every_bad_value_is_named_with_what_is_accepted() -> None:
    with pytest.raises(config.ConfigError) as info:
        config.load_all({"SOTTO_LLM_BACKEND": "tpu", "SOTTO_VAD_THRESHOLD": "2", "SOTTO_OFFLINE": "maybe"})
    message = str(info.value)
    assert "SOTTO_LLM_BACKEND='tpu'" in message and "one of auto, cpu, gpu" in message
    assert "SOTTO_VAD_THRESHOLD='2'" in message and "from 0.05 to 0.95" in message
    assert "SOTTO_OFFLINE='maybe'" in message and "true or false" in message


def test_values_are_parsed() -> None:
    s = config.load_all({"SOTTO_LLM_MAX_CONCURRENT": "3", "SOTTO_OFFLINE": "yes", "SOTTO_LLM_MODEL": "/m.litertlm"})
    assert s.llm.max_concurrent == 3 and s.common.offline is True and s.llm.model == Path("/m.litertlm")


def test_a_service_refuses_to_start_on_a_bad_value() -> None:
    proc = subprocess.run([sys.executable, "-m", "services.vad.server"], cwd=ROOT, capture_output=True, text=True,
                          env={"SOTTO_VAD_PORT": "eighty", "PATH": "/usr/bin:/bin"}, timeout=60)
    assert proc.returncode == 2
    assert "SOTTO_VAD_PORT='eighty'" in proc.stderr and "an integer from 1 to 65535" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_settings_doc_is_the_generated_one() -> None:
    """A setting added, renamed or redescribed without regenerating docs/settings.md fails here."""
    doc = (ROOT / "docs" / "settings.md").read_text()
    assert doc == settings_doc.settings_markdown(), (
        "docs/settings.md is stale: run `python -m services.common.config > docs/settings.md`")
    for cls in config.SECTIONS.values():
        for f in dataclasses.fields(cls):
            assert f"| `{f.metadata['env']}` |" in doc, f"{f.metadata['env']} is missing from docs/settings.md"


def test_the_module_prints_the_settings_doc_whatever_the_machine() -> None:
    """`python -m services.common.config` writes the doc; a machine's home or cache folder does not show in it."""
    env = {"XDG_CACHE_HOME": "/elsewhere", "HOME": "/nobody", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run([sys.executable, "-m", "services.common.config"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True, env=env)
    assert proc.stdout == settings_doc.settings_markdown()
