"""The GPU probe names the piece that is missing, so a user knows what to install: the Vulkan loader, the driver's ICD
manifest, or the GL vendor libraries the NVIDIA ICD needs (without them the loader finds the ICD and then fails with
VkResult -9, the same code as no driver at all). The machine's own libraries are replaced by fakes here."""

from __future__ import annotations

import json

import pytest

from services.llm import gpu

NO_DRIVER = -9


@pytest.fixture
def linux(monkeypatch):
    monkeypatch.setattr(gpu.sys, "platform", "linux")
    for name in ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES"):
        monkeypatch.delenv(name, raising=False)


def _icd(folder, library="libGLX_nvidia.so.0"):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "nvidia_icd.json"
    path.write_text(json.dumps({"file_format_version": "1.0.0", "ICD": {"library_path": library,
                                                                         "api_version": "1.4.312"}}))
    return path


def _fake_libraries(monkeypatch, missing: set[str]):
    loaded = object()
    monkeypatch.setattr(gpu, "load_library",
                        lambda names: None if all(n in missing for n in names) else loaded)
    monkeypatch.setattr(gpu, "_physical_devices", lambda vk: NO_DRIVER)


def test_no_loader_names_the_loader_package(linux, monkeypatch):
    _fake_libraries(monkeypatch, missing={"libvulkan.so.1", "libvulkan.so"})
    found = gpu.probe()
    assert not found.usable
    assert "no Vulkan loader" in found.reason and "apt install libvulkan1" in found.reason


def test_no_icd_manifest_says_so_and_names_vk_driver_files(linux, monkeypatch, tmp_path):
    _fake_libraries(monkeypatch, missing=set())
    monkeypatch.setattr(gpu, "icd_manifests", list)
    monkeypatch.setattr(gpu, "_ELSEWHERE", ())
    found = gpu.probe()
    assert not found.usable
    assert "no ICD manifest" in found.reason and "VK_DRIVER_FILES" in found.reason
    assert "GL vendor" not in found.reason


def test_a_driver_manifest_outside_the_loaders_folders_is_pointed_at(linux, monkeypatch, tmp_path):
    elsewhere = _icd(tmp_path / "nvidia" / "icd.d")
    _fake_libraries(monkeypatch, missing=set())
    monkeypatch.setattr(gpu, "icd_manifests", list)
    monkeypatch.setattr(gpu, "_ELSEWHERE", (str(elsewhere.parent),))
    assert f"set VK_DRIVER_FILES={elsewhere}" in gpu.probe().reason


def test_missing_gl_vendor_libraries_are_named_with_their_packages(linux, monkeypatch, tmp_path):
    manifest = _icd(tmp_path)
    _fake_libraries(monkeypatch, missing={"libGLdispatch.so.0", "libGLX.so.0", "libEGL.so.1"})
    monkeypatch.setattr(gpu, "icd_manifests", lambda: [manifest])
    reason = gpu.probe().reason
    assert str(manifest) in reason and "VkResult -9" in reason
    assert "GL vendor libraries it needs are missing (libGLdispatch.so.0, libGLX.so.0, libEGL.so.1)" in reason
    assert "apt install libglvnd0 libglx0 libegl1" in reason
    assert "no ICD manifest" not in reason


def test_an_icd_whose_library_cannot_load_is_named(linux, monkeypatch, tmp_path):
    manifest = _icd(tmp_path, library="libGLX_nowhere.so.0")
    _fake_libraries(monkeypatch, missing=set())
    monkeypatch.setattr(gpu, "icd_manifests", lambda: [manifest])
    reason = gpu.probe().reason
    assert "cannot be loaded" in reason and "libGLX_nowhere.so.0" in reason


def test_icd_manifests_honours_vk_driver_files_as_file_or_folder(linux, monkeypatch, tmp_path):
    manifest = _icd(tmp_path / "icd.d")
    monkeypatch.setenv("VK_DRIVER_FILES", str(manifest))
    assert gpu.icd_manifests() == [manifest]
    monkeypatch.setenv("VK_DRIVER_FILES", str(manifest.parent))
    assert gpu.icd_manifests() == [manifest]
    monkeypatch.setenv("VK_DRIVER_FILES", str(tmp_path / "absent.json"))
    assert gpu.icd_manifests() == []


def test_a_listed_hardware_device_is_usable(linux, monkeypatch):
    monkeypatch.setattr(gpu, "load_library", lambda names: object())
    monkeypatch.setattr(gpu, "_physical_devices", lambda vk: [("llvmpipe", "cpu"), ("NVIDIA H100", "discrete")])
    assert gpu.probe() == gpu.GpuProbe(True, device="NVIDIA H100 (Vulkan)")


def test_the_command_prints_the_probe(linux, monkeypatch, capsys):
    _fake_libraries(monkeypatch, missing={"libvulkan.so.1", "libvulkan.so"})
    assert gpu.main(["--probe-only"]) == 1
    assert "probe: no usable GPU: no Vulkan loader" in capsys.readouterr().out
