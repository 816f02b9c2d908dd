"""A fake pynvml (the part services/common/hardware.py uses), so the NVIDIA path runs without a GPU."""

from __future__ import annotations

import os
from types import SimpleNamespace


class FakeNvml:
    """The part of pynvml the collector uses: two GPUs; the second cannot report its temperature."""

    NVML_TEMPERATURE_GPU = 0

    class NVMLError(Exception):
        pass

    def nvmlSystemGetDriverVersion(self) -> bytes:
        return b"550.54"  # old pynvml returns bytes

    def nvmlDeviceGetCount(self) -> int:
        return 2

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetName(self, handle: int) -> str:
        return f"Fake GPU {handle}"

    def nvmlDeviceGetUtilizationRates(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(gpu=37 + handle, memory=10)

    def nvmlDeviceGetMemoryInfo(self, handle: int) -> SimpleNamespace:
        return SimpleNamespace(used=(1 + handle) * 2**30, total=8 * 2**30, free=0)

    def nvmlDeviceGetTemperature(self, handle: int, sensor: int) -> int:
        if handle == 1:
            raise self.NVMLError("Not Supported")
        return 61

    def nvmlDeviceGetComputeRunningProcesses(self, handle: int) -> list[SimpleNamespace]:
        return [SimpleNamespace(pid=os.getpid(), usedGpuMemory=512 * 2**20 if handle == 0 else None),
                SimpleNamespace(pid=1, usedGpuMemory=2**30)]
