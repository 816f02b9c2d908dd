"""Is there a GPU LiteRT-LM's WebGPU backend can use here, and if not, why not?

LiteRT-LM's pip wheel links its WebGPU accelerator statically: on macOS it runs on Metal, on Linux on Vulkan, through
the system's Vulkan loader (libvulkan.so.1) and a driver's ICD (NVIDIA's comes with its driver or the container
toolkit). Without a loader the engine fails late, with a generic error, so `auto` looks first and can say why it
chose the CPU. The Vulkan calls are made with ctypes: no maintained Python binding ships the loader's three entry
points without a build step, and only these are needed.
"""

from __future__ import annotations

import ctypes
import platform
import sys
from dataclasses import dataclass

_LOADERS = ("libvulkan.so.1", "libvulkan.so")
_STRUCTURE_TYPE_INSTANCE_CREATE_INFO = 1
_SUCCESS = 0
# VkPhysicalDeviceProperties: apiVersion, driverVersion, vendorID, deviceID, deviceType (uint32 each), then
# deviceName[256]; the rest (limits, sparse properties) is not read but must fit in the buffer.
_PROPERTIES_BYTES = 4096
_DEVICE_NAME_OFFSET = 20
_DEVICE_NAME_BYTES = 256
_DEVICE_TYPES = {1: "integrated", 2: "discrete", 3: "virtual", 4: "cpu"}
_ICD_HINT = ("install the GPU's Vulkan driver (NVIDIA: the driver's Vulkan ICD; in a container, the NVIDIA "
             "container toolkit with the 'graphics' capability) or point VK_DRIVER_FILES at its ICD json")


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
    loader = _load_loader()
    if loader is None:
        return GpuProbe(False,
                        reason="no Vulkan loader (libvulkan.so.1 not found; Debian/Ubuntu: apt install libvulkan1)")
    devices = _physical_devices(loader)
    if isinstance(devices, str):
        return GpuProbe(False, reason=devices)
    gpus = [name for name, kind in devices if kind in ("discrete", "integrated", "virtual")]
    if gpus:
        return GpuProbe(True, device=f"{gpus[0]} (Vulkan)")
    if devices:
        listed = ", ".join(f"{name} ({kind})" for name, kind in devices)
        return GpuProbe(False, reason=f"Vulkan lists only software devices: {listed}; {_ICD_HINT}")
    return GpuProbe(False, reason=f"the Vulkan loader found no device; {_ICD_HINT}")


def _load_loader() -> ctypes.CDLL | None:
    for name in _LOADERS:
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def _physical_devices(vk: ctypes.CDLL) -> list[tuple[str, str]] | str:
    """(name, type) of every Vulkan physical device, or why they could not be listed."""
    instance = ctypes.c_void_p()
    info = _InstanceCreateInfo(sType=_STRUCTURE_TYPE_INSTANCE_CREATE_INFO)
    result = vk.vkCreateInstance(ctypes.byref(info), None, ctypes.byref(instance))
    if result != _SUCCESS:
        return f"the Vulkan loader could not create an instance (VkResult {result}): no driver; {_ICD_HINT}"
    try:
        count = ctypes.c_uint32(0)
        if vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), None) != _SUCCESS:
            return f"the Vulkan loader could not list devices; {_ICD_HINT}"
        handles = (ctypes.c_void_p * count.value)()
        if count.value and vk.vkEnumeratePhysicalDevices(instance, ctypes.byref(count), handles) != _SUCCESS:
            return f"the Vulkan loader could not list devices; {_ICD_HINT}"
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
