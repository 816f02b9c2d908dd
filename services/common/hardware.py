"""GPU and memory gauges for `/metrics`, read at scrape time by one custom Prometheus collector.

What each platform can tell without root, and so what is exported (the contract is docs/metrics.md):

- NVIDIA (Linux/Windows with the driver and the optional `nvidia-ml-py` package): per GPU, utilisation, memory
  used/total, chip temperature, and the memory this process holds on it, read through NVML.
- macOS on Apple silicon: the GPU shares the unified memory, which `sotto_memory_*` reports (psutil). GPU
  utilisation and temperature are only readable as root (`powermetrics`), so they are not reported.
- Anywhere else (this Linux CPU box): no GPU gauges at all; `sotto_gpu_info{source="none", reason=...}` says why,
  so an empty GPU panel is explained rather than silent.

prometheus_client's process collector reads `/proc`, which macOS lacks; there this collector exports
`process_resident_memory_bytes` and `process_virtual_memory_bytes` itself (psutil), so memory panels work on the
target machine too. On Linux it leaves them to prometheus_client.

A failing read (a GPU that cannot report its temperature, a driver hiccup) drops that one sample, never the scrape.
"""

from __future__ import annotations

import logging
import os
import platform
import sys
from collections.abc import Iterator
from types import ModuleType

import psutil
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

_LOGGER = logging.getLogger(__name__)

APPLE_REASON = ("Apple silicon: GPU memory is the unified memory (sotto_memory_*); GPU utilisation and "
                "temperature need root (powermetrics) and are not reported")


def _load_nvml() -> tuple[ModuleType | None, str]:
    """(pynvml, "") when NVML answers; (None, why not) otherwise. The package is an optional dependency."""
    if sys.platform == "darwin":
        return None, APPLE_REASON if platform.machine() == "arm64" else "macOS on Intel: no GPU reading"
    try:
        import pynvml  # nvidia-ml-py
    except ImportError:
        return None, "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:  # no driver, no device, or a container without the NVIDIA runtime
        return None, f"NVML unavailable: {exc}"
    return pynvml, ""


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class HardwareCollector(Collector):
    """Yields the GPU and memory families on each scrape; NVML is initialised once, here."""

    def __init__(self, nvml: ModuleType | None = None, reason: str = "",
                 process_fallback: bool | None = None) -> None:
        self._nvml, self._reason = (nvml, reason) if nvml is not None or reason else _load_nvml()
        self._driver = ""
        if self._nvml is not None:
            self._driver = self._read(lambda: _text(self._nvml.nvmlSystemGetDriverVersion()), "driver") or ""
        # prometheus_client's ProcessCollector needs /proc; export the two memory gauges ourselves without it.
        self._process_fallback = (not os.path.exists("/proc/self/stat")) if process_fallback is None \
            else process_fallback
        self._process = psutil.Process()

    def collect(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("sotto_gpu_info", "Where GPU gauges come from; reason says why there are none.",
                                 labels=["source", "reason", "driver"])
        info.add_metric(["nvml" if self._nvml else "none", self._reason, self._driver], 1)
        yield info
        if self._nvml is not None:
            yield from self._gpu_families()
        memory = psutil.virtual_memory()
        yield GaugeMetricFamily("sotto_memory_total_bytes", "Physical memory of the machine (on Apple silicon "
                                "the unified memory shared by CPU and GPU).", value=memory.total)
        yield GaugeMetricFamily("sotto_memory_available_bytes", "Memory that can be given to processes without "
                                "swapping.", value=memory.available)
        if self._process_fallback:
            mem = self._process.memory_info()
            yield GaugeMetricFamily("process_resident_memory_bytes", "Resident memory size in bytes.",
                                    value=mem.rss)
            yield GaugeMetricFamily("process_virtual_memory_bytes", "Virtual memory size in bytes.", value=mem.vms)

    def _gpu_families(self) -> Iterator[Metric]:
        nvml = self._nvml
        assert nvml is not None
        device = GaugeMetricFamily("sotto_gpu_device_info", "One series per GPU: its index and model name.",
                                   labels=["gpu", "name"])
        util = GaugeMetricFamily("sotto_gpu_utilization_ratio", "Share of the last sample period the GPU was "
                                 "busy (0-1).", labels=["gpu"])
        used = GaugeMetricFamily("sotto_gpu_memory_used_bytes", "GPU memory in use by all processes.",
                                 labels=["gpu"])
        total = GaugeMetricFamily("sotto_gpu_memory_total_bytes", "GPU memory installed.", labels=["gpu"])
        temp = GaugeMetricFamily("sotto_gpu_temperature_celsius", "GPU chip temperature.", labels=["gpu"])
        mine = GaugeMetricFamily("sotto_gpu_process_memory_bytes", "GPU memory held by this process (when the "
                                 "driver reports it).", labels=["gpu"])
        count = self._read(nvml.nvmlDeviceGetCount, "device count") or 0
        pid = os.getpid()
        for index in range(count):
            gpu = str(index)
            handle = self._read(lambda: nvml.nvmlDeviceGetHandleByIndex(index), "handle")
            if handle is None:
                continue
            device.add_metric([gpu, self._read(lambda: _text(nvml.nvmlDeviceGetName(handle)), "name") or ""], 1)
            if (rates := self._read(lambda: nvml.nvmlDeviceGetUtilizationRates(handle), "utilisation")) is not None:
                util.add_metric([gpu], rates.gpu / 100.0)
            if (memory := self._read(lambda: nvml.nvmlDeviceGetMemoryInfo(handle), "memory")) is not None:
                used.add_metric([gpu], memory.used)
                total.add_metric([gpu], memory.total)
            celsius = self._read(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU), "temp")
            if celsius is not None:
                temp.add_metric([gpu], celsius)
            procs = self._read(lambda: nvml.nvmlDeviceGetComputeRunningProcesses(handle), "processes") or []
            held = [p.usedGpuMemory for p in procs if p.pid == pid and p.usedGpuMemory is not None]
            if held:
                mine.add_metric([gpu], sum(held))
        yield from (device, util, used, total, temp, mine)

    def _read(self, fn, what: str):
        try:
            return fn()
        except self._nvml.NVMLError as exc:  # type: ignore[union-attr]
            _LOGGER.debug("nvml_read_failed", extra={"what": what, "error": str(exc)})
            return None


_REGISTERED: dict[int, HardwareCollector] = {}


def register(registry: CollectorRegistry = REGISTRY) -> HardwareCollector:
    """Add the hardware gauges to `registry` once per process (later calls return the same collector)."""
    if id(registry) not in _REGISTERED:
        collector = HardwareCollector()
        registry.register(collector)
        _REGISTERED[id(registry)] = collector
        _LOGGER.info("hardware_metrics", extra={"gpu_source": "nvml" if collector._nvml else "none",
                                                "gpu_reason": collector._reason})
    return _REGISTERED[id(registry)]
