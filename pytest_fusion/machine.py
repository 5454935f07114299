"""What the tests ran on: the report's "machine" block and the device class that
keys committed baselines ("cpu", "nvidia-h100-sm90")."""
from __future__ import annotations

import functools
import platform
import re
import socket

import torch


def worker_index(config) -> int:
    """This process's pytest-xdist worker number (gw3 -> 3); 0 without xdist."""
    worker = getattr(config, "workerinput", {}).get("workerid", "gw0")
    return int(worker[2:]) if worker[2:].isdigit() else 0


def resolve_device(requested: str, worker_index: int = 0) -> torch.device | None:
    """torch.device for "auto" | "cpu" | "cuda"; None when cuda is asked for and absent.
    Under xdist, worker i uses GPU i (modulo the count)."""
    if requested == "cpu" or (requested == "auto" and not torch.cuda.is_available()):
        return torch.device("cpu")
    if not torch.cuda.is_available():
        return None
    return torch.device("cuda", worker_index % torch.cuda.device_count())


def device_class(device: torch.device) -> str:
    if device.type != "cuda":
        return "cpu"
    name = torch.cuda.get_device_name(device)
    major, minor = torch.cuda.get_device_capability(device)
    return f"{_model(name)}-sm{major}{minor}"


def _model(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "nvidia-h100"; drops memory size and form factor."""
    drop = re.compile(r"^(\d+gb|sxm\d*|pcie|hbm\d*e?|nvl|mig.*)$")
    words = [w for w in re.split(r"[\s\-_]+", name.lower()) if w and not drop.match(w)]
    if words and words[0] != "nvidia":
        words.insert(0, "nvidia")
    return "-".join(words)


@functools.lru_cache(maxsize=None)
def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info(device: torch.device) -> dict:
    try:
        import triton

        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    info = {
        "hostname": socket.gethostname(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": triton_version,
        "platform": platform.platform(),
        "cpu": _cpu_name(),
        "device": device.type,
        "device_name": _cpu_name(),
        "device_class": device_class(device),
        "driver": None,
        "cuda": torch.version.cuda,
    }
    if device.type == "cuda":
        from .measure import nvml

        info["device_name"] = torch.cuda.get_device_name(device)
        try:
            info["driver"] = nvml.driver_version()
        except nvml.NvmlError:
            info["driver"] = None  # the tests that need NVML say why, as errors
    return info
