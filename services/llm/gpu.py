"""Is there a GPU LiteRT-LM's WebGPU backend can use here, and if not, which piece is missing?

LiteRT-LM's pip wheel links its WebGPU accelerator statically: on macOS it runs on Metal, on Linux on Vulkan, through
the system's Vulkan loader (libvulkan.so.1) and a driver's ICD (NVIDIA's comes with its driver or the container
toolkit). Three pieces can be missing on Linux, and the engine fails late with one generic error for all of them, so
`auto` looks first and says which: the loader; the ICD manifest (the loader finds none, e.g. the driver's lies outside
the standard folders); the GL vendor-neutral libraries (glvnd) the NVIDIA ICD is built on, without which the loader
finds the ICD and then gets no `vkCreateInstance` from it (VkResult -9).

The Vulkan calls are made with ctypes: no maintained Python binding ships the loader's entry points without a build
step, and only four are needed. `python -m services.llm.gpu` prints the probe and, given a model, the self-check
(services/llm/selfcheck.py).
"""

from __future__ import annotations

import ctypes
import glob
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

_LOADERS = ("libvulkan.so.1", "libvulkan.so")
_STRUCTURE_TYPE_INSTANCE_CREATE_INFO = 1
_SUCCESS = 0
_ERROR_INCOMPATIBLE_DRIVER = -9
# VkPhysicalDeviceProperties: apiVersion, driverVersion, vendorID, deviceID, deviceType (uint32 each), then
# deviceName[256]; the rest (limits, sparse properties) is not read but must fit in the buffer.
_PROPERTIES_BYTES = 4096
_DEVICE_NAME_OFFSET = 20
_DEVICE_NAME_BYTES = 256
_DEVICE_TYPES = {1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}

LOADER_PACKAGE = "libvulkan1"
# glvnd's dispatch libraries, by soname, and the Debian/Ubuntu package of each. The NVIDIA driver ships only the
# vendor halves (libGLX_nvidia.so.0, libEGL_nvidia.so.0); a desktop has glvnd already, a server or container often not.
GL_VENDOR_LIBRARIES = {
    "libGLdispatch.so.0": "libglvnd0",
    "libGLX.so.0": "libglx0",
    "libGL.so.1": "libgl1",
    "libEGL.so.1": "libegl1",
    "libOpenGL.so.0": "libopengl0",
    "libGLESv2.so.2": "libgles2",
}
GL_VENDOR_PACKAGES = tuple(dict.fromkeys(GL_VENDOR_LIBRARIES.values()))
# Where the loader looks for ICD manifests by default (Linux), and where NVIDIA container set-ups put the driver's.
_ICD_DIRS = ("/etc/xdg/vulkan/icd.d", "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d", "/usr/share/vulkan/icd.d")
_ELSEWHERE = ("/usr/local/nvidia/share/vulkan/icd.d", "/usr/local/nvidia/icd.d", "/usr/lib/x86_64-linux-gnu/nvidia")
_ICD_ENV = ("VK_DRIVER_FILES", "VK_ICD_FILENAMES", "VK_ADD_DRIVER_FILES")


@dataclass(frozen=True)
class GpuProbe:
    """What the probe found: a usable GPU (and its name), or the missing piece."""

    usable: bool
    device: str = ""
    reason: str = ""


class _InstanceCreateInfo(ctypes.Structure):
    _fields_ = [("sType", ctypes.c_int), ("pNext", ctypes.c_void_p), ("flags", ctypes.c_uint32),
                ("pApplicationInfo", ctypes.c_void_p), ("enabledLayerCount", ctypes.c_uint32),
                ("ppEnabledLayerNames", ctypes.c_void_p), ("enabledExtensionCount", ctypes.c_uint32),
                ("ppEnabledExtensionNames", ctypes.c_void_p)]


def probe() -> GpuProbe:
    """Look for a GPU the WebGPU backend can run on, without loading a model."""
    if sys.platform == "darwin":
        if platform.machine() == "arm64":
            return GpuProbe(True, device="Apple GPU (Metal)")
        return GpuProbe(False, reason="an Intel Mac: LiteRT-LM's GPU backend needs Apple Silicon")
    if not sys.platform.startswith("linux"):
        return GpuProbe(False, reason=f"no GPU backend on {sys.platform}")
    loader = load_library(_LOADERS)
    if loader is None:
        return GpuProbe(False, reason=f"no Vulkan loader: libvulkan.so.1 not found (Debian/Ubuntu: apt install "
                                      f"{LOADER_PACKAGE})")
    devices = _physical_devices(loader)
    if isinstance(devices, int):
        return GpuProbe(False, reason=explain_instance_failure(devices))
    gpus = [name for name, kind in devices if kind in ("discrete", "integrated", "virtual")]
    if gpus:
        return GpuProbe(True, device=f"{gpus[0]} (Vulkan)")
    if devices:
        listed = ", ".join(f"{name} ({kind})" for name, kind in devices)
        return GpuProbe(False, reason=f"Vulkan lists only software devices: {listed}; {_no_icd_hint()}")
    return GpuProbe(False, reason=f"the Vulkan loader found no device; {_no_icd_hint()}")


def explain_instance_failure(result: int) -> str:
    """Why `vkCreateInstance` failed, naming the missing piece: the ICD manifest, or the GL libraries it needs."""
    manifests = icd_manifests()
    if not manifests:
        return f"the Vulkan loader found no driver (VkResult {result}): no ICD manifest; {_no_icd_hint()}"
    missing = missing_gl_vendor_libraries()
    names = ", ".join(str(m) for m in manifests)
    if missing:
        packages = " ".join(dict.fromkeys(GL_VENDOR_LIBRARIES[lib] for lib in missing))
        return (f"the Vulkan driver ({names}) was found but could not start (VkResult {result}): the GL vendor "
                f"libraries it needs are missing ({', '.join(missing)}); Debian/Ubuntu: apt install {packages} "
                f"(in a container, put them in the image: the NVIDIA container toolkit does not inject them)")
    broken = [f"{m} -> {lib}: {error}" for m, lib, error in unloadable_icd_libraries(manifests)]
    if broken:
        return f"the Vulkan driver's library cannot be loaded (VkResult {result}): {'; '.join(broken)}"
    return (f"the Vulkan driver ({names}) refused to create an instance (VkResult {result}); check that the driver "
            f"matches the kernel module (nvidia-smi) and that the ICD's library_path points at it")


def icd_manifests() -> list[Path]:
    """The ICD manifests the loader would read: VK_DRIVER_FILES / VK_ICD_FILENAMES where set, else the standard
    folders (plus VK_ADD_DRIVER_FILES)."""
    def expand(value: str) -> list[Path]:
        found: list[Path] = []
        for entry in filter(None, value.split(os.pathsep)):
            path = Path(entry)
            found += sorted(path.glob("*.json")) if path.is_dir() else [path] if path.is_file() else []
        return found

    explicit = os.environ.get("VK_DRIVER_FILES") or os.environ.get("VK_ICD_FILENAMES")
    if explicit:
        return expand(explicit)
    found = expand(os.environ.get("VK_ADD_DRIVER_FILES", ""))
    data_dirs = os.environ.get("XDG_DATA_DIRS", "")
    home = os.environ.get("HOME", "")
    extra = [f"{d}/vulkan/icd.d" for d in data_dirs.split(os.pathsep) if d]
    if home:
        extra.append(f"{home}/.local/share/vulkan/icd.d")
    for folder in dict.fromkeys([*_ICD_DIRS, *extra]):
        found += sorted(Path(folder).glob("*.json"))
    return found


def missing_gl_vendor_libraries() -> list[str]:
    """The glvnd dispatch libraries that cannot be loaded here (sonames)."""
    return [name for name in GL_VENDOR_LIBRARIES if load_library((name,)) is None]


def unloadable_icd_libraries(manifests: list[Path]) -> list[tuple[Path, str, str]]:
    """(manifest, library_path, error) for each ICD whose library the dynamic linker cannot load."""
    broken = []
    for manifest in manifests:
        try:
            library = json.loads(manifest.read_text())["ICD"]["library_path"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            broken.append((manifest, "?", f"unreadable manifest ({exc})"))
            continue
        if not os.path.isabs(library) and os.sep in library:
            library = str(manifest.parent / library)  # relative to the manifest, as the loader resolves it
        try:
            ctypes.CDLL(library)
        except OSError as exc:
            broken.append((manifest, library, str(exc)))
    return broken


def _no_icd_hint() -> str:
    elsewhere = sorted({p for folder in _ELSEWHERE for p in glob.glob(f"{folder}/*.json")})
    if elsewhere:
        return f"a driver manifest exists outside the loader's folders: set VK_DRIVER_FILES={elsewhere[0]}"
    return ("install the GPU's Vulkan driver (NVIDIA: the driver's Vulkan ICD; in a container, the NVIDIA container "
            "toolkit with the 'graphics' capability) or point VK_DRIVER_FILES at its ICD json")


def load_library(names: tuple[str, ...]) -> ctypes.CDLL | None:
    for name in names:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _physical_devices(vk: ctypes.CDLL) -> list[tuple[str, str]] | int:
    """(name, type) of every Vulkan physical device, or the VkResult that stopped the listing."""
    instance = ctypes.c_void_p()
    info = _InstanceCreateInfo(sType=_STRUCTURE_TYPE_INSTANCE_CREATE_INFO)
    result = vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance))
    if result != _SUCCESS:
        return result
    try:
        count = ctypes.c_uint32(0)
        result = vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None)
        if result != _SUCCESS:
            return result
        handles = (ctypes.c_void_p * count.value)()
        result = vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles) if count.value else _SUCCESS
        if result != _SUCCESS:
            return result
        devices = []
        for handle in handles[:count.value]:
            properties = ctypes.create_string_buffer(_PROPERTIES_BYTES)
            vk.vkGetPhysicalDeviceProperties(ctypes.c_void_p(handle), properties)
            kind = int.from_bytes(properties.raw[16:20], "little")
            raw_name = properties.raw[_DEVICE_NAME_OFFSET:_DEVICE_NAME_OFFSET + _DEVICE_NAME_BYTES]
            devices.append((raw_name.split(b"\0", 1)[0].decode(errors="replace"), _DEVICE_TYPES.get(kind, "other")))
        return devices
    finally:
        vk.vkDestroyInstance(instance, None)


def main(argv: list[str] | None = None) -> int:
    """Print the probe, then (unless --probe-only) load the model on the GPU and the CPU and print the self-check."""
    import argparse

    parser = argparse.ArgumentParser(description="Can the llm run on this machine's GPU, and does it answer as on "
                                                 "the CPU?")
    parser.add_argument("--model", help="a .litertlm file (default: the one the llm service would load)")
    parser.add_argument("--probe-only", action="store_true", help="only look for a GPU; load no model")
    args = parser.parse_args(argv)
    found = probe()
    print(f"probe: {'usable: ' + found.device if found.usable else 'no usable GPU: ' + found.reason}", flush=True)
    if args.probe_only or not found.usable:
        return 0 if found.usable else 1
    from services.llm import selfcheck

    return selfcheck.main_report(args.model, found)


if __name__ == "__main__":
    sys.exit(main())
