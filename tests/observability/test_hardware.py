"""The hardware collector: GPU gauges through NVML when it answers, a reason when it does not, memory always."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from services.common import hardware
from tests.observability.fakes import FakeNvml


def scrape(collector: hardware.HardwareCollector) -> dict[tuple[str, tuple], float]:
    registry = CollectorRegistry()
    registry.register(collector)
    text = generate_latest(registry).decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_without_nvml_only_the_reason_and_memory_are_exported() -> None:
    samples = scrape(hardware.HardwareCollector(reason="nvidia-ml-py is not installed"))
    assert samples[("sotto_gpu_info", (("driver", ""), ("reason", "nvidia-ml-py is not installed"),
                                       ("source", "none")))] == 1
    assert not [name for name, _ in samples if name.startswith("sotto_gpu_") and name != "sotto_gpu_info"]
    assert samples[("sotto_memory_total_bytes", ())] >= samples[("sotto_memory_available_bytes", ())] > 0


def test_this_machine_says_why_there_is_no_gpu() -> None:
    """Here nvidia-ml-py is not installed (or no driver answers); the scrape still works and says so."""
    collector = hardware.HardwareCollector()
    info = [labels for (name, labels) in scrape(collector) if name == "sotto_gpu_info"]
    assert len(info) == 1
    labels = dict(info[0])
    if labels["source"] == "none":
        assert labels["reason"]


def test_nvml_gauges_per_gpu_and_a_failed_read_drops_only_that_sample() -> None:
    samples = scrape(hardware.HardwareCollector(nvml=FakeNvml()))
    gpu0, gpu1 = (("gpu", "0"),), (("gpu", "1"),)
    assert samples[("sotto_gpu_info", (("driver", "550.54"), ("reason", ""), ("source", "nvml")))] == 1
    assert samples[("sotto_gpu_device_info", (("gpu", "1"), ("name", "Fake GPU 1")))] == 1
    assert samples[("sotto_gpu_utilization_ratio", gpu0)] == 0.37
    assert samples[("sotto_gpu_memory_used_bytes", gpu1)] == 2 * 2**30
    assert samples[("sotto_gpu_memory_total_bytes", gpu0)] == 8 * 2**30
    assert samples[("sotto_gpu_temperature_celsius", gpu0)] == 61
    assert ("sotto_gpu_temperature_celsius", gpu1) not in samples
    assert samples[("sotto_gpu_process_memory_bytes", gpu0)] == 512 * 2**20
    assert ("sotto_gpu_process_memory_bytes", gpu1) not in samples  # the driver did not say


def test_apple_silicon_reason_is_plain() -> None:
    assert "root" in hardware.APPLE_REASON and "powermetrics" in hardware.APPLE_REASON


def test_process_memory_fallback_where_there_is_no_proc() -> None:
    samples = scrape(hardware.HardwareCollector(reason="test", process_fallback=True))
    assert samples[("process_resident_memory_bytes", ())] > 10 * 2**20
    assert samples[("process_virtual_memory_bytes", ())] >= samples[("process_resident_memory_bytes", ())]
    linux = scrape(hardware.HardwareCollector(reason="test"))
    assert ("process_resident_memory_bytes", ()) not in linux  # prometheus_client's own collector has it here


def test_register_is_idempotent() -> None:
    registry = CollectorRegistry()
    first = hardware.register(registry)
    assert hardware.register(registry) is first
    assert "sotto_memory_total_bytes" in generate_latest(registry).decode()
