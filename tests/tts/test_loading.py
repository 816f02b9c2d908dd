"""Which engine `auto` picks: Kokoro wherever it has an English voice or the voice asked for, else Piper's English
voice (the offline kit's Kokoro voices are Japanese), saying why; a named engine never falls back."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from services.common import config
from services.common.models import ModelUnavailable
from services.tts import models
from services.tts.loading import choose

pytest.importorskip("piper", reason="piper-tts is not installed (the `tts` extra; no wheel for Linux aarch64)")


def common(tmp_path: Path) -> config.CommonConfig:
    return dataclasses.replace(config.CommonConfig(), model_dir=tmp_path / "models", offline=True)


def settings(**env: str) -> config.TtsConfig:
    return config.load(config.TtsConfig, {f"SOTTO_TTS_{k.upper()}": v for k, v in env.items()})


def kokoro_folder(folder: Path, voices: tuple[str, ...]) -> Path:
    """A Kokoro ONNX folder as `choose` sees it: the model file is not read, the voices archive's names are."""
    folder.mkdir(parents=True)
    (folder / "kokoro-v1.0.onnx").write_bytes(b"")
    with open(folder / "voices-v1.0.bin", "wb") as archive:
        np.savez(archive, **{voice: np.zeros(1, np.float32) for voice in voices})
    return folder


def offline_kit(tmp_path: Path) -> Path:
    kit = common(tmp_path).model_dir / models.KIT_DIRNAME
    kokoro_folder(kit / "onnx", ("jf_alpha", "jm_kumo"))
    (kit / models.KIT_MANIFEST).write_text("{}")
    return kit


def test_with_only_the_offline_kit_auto_speaks_english_with_piper_and_says_why(tmp_path):
    offline_kit(tmp_path)
    choice = choose(settings(), common(tmp_path))
    assert choice.backend == "piper" and list(choice.voices) == ["en_US-joe-medium"]
    assert "no English voice (it has jf_alpha, jm_kumo)" in choice.reason
    assert "SOTTO_TTS_VOICE=af_heart" in choice.reason


def test_the_kits_japanese_voice_asked_for_by_name_keeps_kokoro(tmp_path):
    kit = offline_kit(tmp_path)
    choice = choose(settings(voice="jf_alpha"), common(tmp_path))
    assert (choice.backend, choice.model, choice.reason) == ("onnx", kit / "onnx", "")


def test_a_kokoro_model_with_english_voices_stays_the_default(tmp_path):
    folder = kokoro_folder(tmp_path / "kokoro", ("af_heart", "jf_alpha"))
    choice = choose(settings(model=str(folder), voice="af_bella"), common(tmp_path))
    assert (choice.backend, choice.model, choice.reason) == ("onnx", folder, "")


def test_with_no_kokoro_model_at_all_auto_falls_back_to_piper(tmp_path):
    choice = choose(settings(), common(tmp_path))
    assert choice.backend == "piper" and choice.reason.startswith("no Kokoro model")


def test_a_named_kokoro_engine_never_falls_back(tmp_path):
    with pytest.raises(ModelUnavailable, match="SOTTO_TTS_MODEL"):
        choose(settings(engine="onnx"), common(tmp_path))


def test_a_missing_explicit_kokoro_folder_is_an_error_not_a_fallback(tmp_path):
    with pytest.raises(ModelUnavailable, match="is not a folder"):
        choose(settings(model=str(tmp_path / "nowhere")), common(tmp_path))


def test_piper_loads_voices_from_an_explicit_folder(tmp_path):
    installed = models.piper_voices(None)["en_US-joe-medium"]
    folder = tmp_path / "voices"
    folder.mkdir()
    (folder / "en_US-mine-medium.onnx").symlink_to(installed)
    (folder / "en_US-mine-medium.onnx.json").symlink_to(f"{installed}.json")
    (folder / "no-config.onnx").symlink_to(installed)  # not a voice without its .onnx.json
    choice = choose(settings(engine="piper", model=str(folder)), common(tmp_path))
    assert choice.voices == {"en_US-mine-medium": folder / "en_US-mine-medium.onnx"}


def test_an_explicit_folder_without_piper_voices_says_what_it_needs(tmp_path):
    with pytest.raises(ModelUnavailable, match=r"holds no Piper voice; point it at a voice's \.onnx file"):
        choose(settings(engine="piper", model=str(tmp_path)), common(tmp_path))


def test_make_up_has_nothing_to_fetch_for_piper(tmp_path, monkeypatch, capsys):
    from tools.models import prepare

    for name, value in {"SOTTO_TTS_ENGINE": "piper", "SOTTO_OFFLINE": "true",
                        "SOTTO_MODEL_DIR": str(tmp_path)}.items():
        monkeypatch.setenv(name, value)
    prepare.main()  # exits 1 here for the llm, whose model is not in this empty cache
    out, err = capsys.readouterr()
    assert "tts voices (piper): en_US-joe-medium" in out and "tts:" not in err
