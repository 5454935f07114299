"""Measure one compiled call: launches (profiler), peak memory, interleaved
timing against eager (and TorchInductor), NVML readings on GPU."""
from __future__ import annotations

import dataclasses
from typing import Callable

import torch

from . import nvml
from .profile import MeasureError, profile_call
from .timing import peak_bandwidth_gbps, peak_cuda_memory, time_interleaved

__all__ = ["Target", "Measurement", "measure", "MeasureError", "peak_bandwidth_gbps"]


@dataclasses.dataclass
class Target:
    """A compiled callable and the call of it to measure (the inputs of its first call)."""

    name: str
    backend: str  # "fusion" | "inductor": what compiled `compiled`
    compiled: Callable
    eager: Callable
    args: tuple
    kwargs: dict
    grad_enabled: bool
    compile_s: float  # wall time of the first call: tracing and compiling included

    def call(self, fn: Callable) -> Callable[[], object]:
        def run():
            with torch.set_grad_enabled(self.grad_enabled):
                return fn(*self.args, **self.kwargs)
        return run


@dataclasses.dataclass
class Measurement:
    name: str
    launches: int
    launch_names: list[str]
    graph_launches: int
    peak_memory_bytes: int | None
    times_ms: dict[str, list[float]]  # per-round ms per call; empty when not timed
    compile_s: dict[str, float]
    nvml: dict | None


def measure(
    target: Target, device: torch.device, *, rounds: int, warmup: int, timing: bool,
    nvml_seconds: float, reference: tuple[Callable, float] | None = None,
    trace_to: Callable[[str], str] | None = None,
) -> Measurement:
    """`reference`: TorchInductor's compiled callable (already called once) and its compile time.
    `trace_to(label)`: where to write the profiler traces of ours, eager and the reference."""
    ours = target.call(target.compiled)
    eager = target.call(target.eager)
    compile_s = {target.backend: target.compile_s}
    # the measured calls must run what the test compiled: a recompile here is an error
    with torch._dynamo.config.patch(error_on_recompile=True):
        try:
            for _ in range(warmup):
                ours()
            prof = profile_call(ours, device, trace_to(target.backend) if trace_to else None)
            if trace_to:
                profile_call(eager, device, trace_to("eager"))
                if reference is not None:
                    profile_call(target.call(reference[0]), device, trace_to("inductor"))
            peak = peak_cuda_memory(ours, device) if device.type == "cuda" else prof.peak_memory_bytes
            times, readings = {}, None
            if timing:
                variants = {"eager": eager, target.backend: ours}
                if reference is not None:
                    variants["inductor"] = target.call(reference[0])
                    compile_s["inductor"] = reference[1]
                samples: list[dict] = []
                after = (lambda: samples.append(nvml.sample(device))) if device.type == "cuda" else None
                times = time_interleaved(variants, device, rounds, warmup, after_round=after)
                if samples:
                    readings = nvml.summarize(samples)
                    readings["energy_j_per_call"] = nvml.energy_per_call(ours, device, nvml_seconds) if nvml_seconds > 0 else None
        except nvml.NvmlError as e:
            raise MeasureError(str(e)) from e
        except torch._dynamo.exc.RecompileError as e:
            raise MeasureError(f"{target.name} recompiled when called again with the inputs of its first call: {e}") from e
    return Measurement(target.name, prof.launches, prof.launch_names, prof.graph_launches, peak, times, compile_s, readings)
