"""NVML readings through nvidia-ml-py (imported lazily: CPU runs never need it).

Clocks drop under the power cap, so clocks and throttle reasons are sampled with
every timing round. Energy and power update about every 100 ms, so energy per
call comes from a loop of about two seconds, run apart from the timing.
"""
from __future__ import annotations

import functools
import statistics
import time

import torch


class NvmlError(RuntimeError):
    pass


# clock event ("throttle") reason bits, as nvml.h defines them
_REASONS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}


@functools.lru_cache(maxsize=None)
def _nvml():
    try:
        import pynvml
    except ImportError:
        raise NvmlError("NVML readings need nvidia-ml-py on a GPU run: pip install nvidia-ml-py (or pytest-fusion[gpu])") from None
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as e:
        raise NvmlError(f"NVML failed to initialize: {e}") from None
    return pynvml


def _str(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


def driver_version() -> str:
    return _str(_nvml().nvmlSystemGetDriverVersion())


@functools.lru_cache(maxsize=None)
def handle(index: int):
    nv = _nvml()
    uuid = str(torch.cuda.get_device_properties(index).uuid)
    try:
        return nv.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else "GPU-" + uuid)
    except nv.NVMLError as e:
        raise NvmlError(f"NVML has no device with uuid {uuid}: {e}") from None


def check(device: torch.device) -> None:
    """Raise NvmlError with a clear message when NVML cannot read `device`."""
    handle(device.index or 0)


def sample(device: torch.device) -> dict:
    nv, h = _nvml(), handle(device.index or 0)
    reasons_fn = getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons
    mask = reasons_fn(h)
    return {
        "clock_sm_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
        "clock_mem_mhz": nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
        "temperature_c": nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
        "power_w": nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
        "throttle_reasons": [name for bit, name in _REASONS.items() if mask & bit],
    }


def summarize(samples: list[dict]) -> dict:
    """Median clocks/temperature/power over the timing rounds, every throttle reason seen."""
    out = {k: statistics.median(s[k] for s in samples) for k in ("clock_sm_mhz", "clock_mem_mhz", "temperature_c", "power_w")}
    out["throttle_reasons"] = sorted({r for s in samples for r in s["throttle_reasons"]})
    return out


def energy_per_call(fn, device: torch.device, seconds: float) -> float | None:
    """Joules per call of `fn`, from the energy counter over a loop of `seconds`."""
    nv, h = _nvml(), handle(device.index or 0)
    try:
        nv.nvmlDeviceGetTotalEnergyConsumption(h)
    except nv.NVMLError:
        return None  # pre-Volta boards have no energy counter
    torch.cuda.synchronize(device)
    start, e0, calls = time.perf_counter(), nv.nvmlDeviceGetTotalEnergyConsumption(h), 0
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            fn()
        calls += 10
        torch.cuda.synchronize(device)
    e1 = nv.nvmlDeviceGetTotalEnergyConsumption(h)
    return (e1 - e0) / 1000.0 / calls
