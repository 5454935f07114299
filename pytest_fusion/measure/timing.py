"""Interleaved timing: eager, ours and (when asked) TorchInductor take turns in
every round, so drift (clocks, temperature, other load) hits them alike.

Each sample times enough back-to-back calls to last about a millisecond (CUDA
events on GPU, perf_counter on CPU) and reports time per call. Compilation
happens before (the first call), never inside a sample.
"""
from __future__ import annotations

import gc
import math
import time
from typing import Callable

import torch

TARGET_MS = 1.0  # length of one sample
MAX_INNER = 1000


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sample(fn: Callable, inner: int, device: torch.device) -> float:
    """Milliseconds per call over `inner` back-to-back calls."""
    if device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(inner):
            fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / inner
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) * 1e3 / inner


def _inner(fn: Callable, device: torch.device) -> int:
    one = min(_sample(fn, 1, device) for _ in range(3))
    return max(1, min(MAX_INNER, math.ceil(TARGET_MS / max(one, 1e-6))))


def time_interleaved(
    variants: dict[str, Callable], device: torch.device, rounds: int, warmup: int,
    after_round: Callable[[], None] | None = None,
) -> dict[str, list[float]]:
    """name -> per-round milliseconds per call. `after_round` samples NVML, say."""
    for fn in variants.values():
        for _ in range(warmup):
            fn()
    _sync(device)
    names = list(variants)
    inner = {name: _inner(variants[name], device) for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    gc_was_on = gc.isenabled()
    gc.disable()
    try:
        for r in range(rounds):
            k = r % len(names)
            for name in names[k:] + names[:k]:
                times[name].append(_sample(variants[name], inner[name], device))
            if after_round is not None:
                after_round()
    finally:
        if gc_was_on:
            gc.enable()
    return times


def peak_cuda_memory(fn: Callable, device: torch.device) -> int:
    """Bytes allocated during one call above what was live before it, at the peak."""
    torch.cuda.synchronize(device)
    torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device)
    fn()
    torch.cuda.synchronize(device)
    return torch.cuda.max_memory_allocated(device) - base


_peak_gbps: dict[str, float] = {}


def peak_bandwidth_gbps(device: torch.device) -> float:
    """Memory bandwidth a plain copy reaches on this device (once per process):
    the floor that a memory-bound kernel's achieved bandwidth is read against."""
    key = str(device)
    if key not in _peak_gbps:
        nbytes = (256 if device.type == "cuda" else 32) * 2**20
        src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).uniform_()
        dst = torch.empty_like(src)
        samples = time_interleaved({"copy": lambda: dst.copy_(src)}, device, rounds=10, warmup=2)["copy"]
        _peak_gbps[key] = 2 * nbytes / (sorted(samples)[len(samples) // 2] * 1e-3) / 1e9
        del src, dst
    return _peak_gbps[key]
