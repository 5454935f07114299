"""Launches per call, from one torch.profiler trace of a warmed-up call.

CUDA: device kernel events, each tied by its correlation id to the API call that
launched it: Triton kernels come through `cuLaunchKernel` (category cuda_driver),
ATen's through `cudaLaunchKernel` (cuda_runtime). Kernels replayed by
`cudaGraphLaunch` are counted apart, as graph launches.
CPU: our C++ kernels run inside profiler ranges named after them (and
TorchInductor's, with its kernel profiling on); each outermost ATen op that
computes counts one launch (views and allocations do not).
"""
from __future__ import annotations

import dataclasses
import json
import os
import re
import tempfile
import warnings

import torch
from torch.profiler import ProfilerActivity, profile


class MeasureError(RuntimeError):
    pass


KERNEL_RANGE = re.compile(r"^(graph_\d+_)?(cpp|triton)_\w+$")
# ATen ops that launch nothing: allocation, views, metadata, host reads
NO_LAUNCH = frozenset(
    "aten::" + n for n in (
        "empty empty_strided empty_like new_empty new_empty_strided as_strided view reshape _reshape_alias "
        "_unsafe_view alias detach detach_ t transpose expand expand_as unsqueeze squeeze permute select slice "
        "narrow split split_with_sizes unbind chunk item _local_scalar_dense is_nonzero resize_ set_ lift_fresh "
        "result_type size stride numel dim is_same_size contiguous to _to_copy view_as unflatten flatten "
        "record_stream"
    ).split()
)


@dataclasses.dataclass
class Profile:
    launches: int
    launch_names: list[str]
    graph_launches: int  # cudaGraphLaunch calls (their kernels are not in `launches`)
    peak_memory_bytes: int | None  # CPU only: from the profiler's allocation events


_warm: set[str] = set()


def _activities(device: torch.device):
    return [ProfilerActivity.CPU, ProfilerActivity.CUDA] if device.type == "cuda" else [ProfilerActivity.CPU]


def warm_up(device: torch.device) -> None:
    """The first profiler session of a process costs seconds on CUDA; pay it once, untimed."""
    if device.type in _warm:
        return
    with profile(activities=_activities(device)):
        torch.ones(8, device=device).add_(1)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    _warm.add(device.type)


def profile_call(fn, device: torch.device, save_to: str | None = None) -> Profile:
    """Profile one call of `fn`; `save_to`: also write its trace there (see report.traces)."""
    cuda = device.type == "cuda"
    try:
        with warnings.catch_warnings():
            # each call gets a fresh profiler; the warning about cycles is not ours
            warnings.filterwarnings("ignore", message=".*Profiler clears events")
            warm_up(device)
            with profile(activities=_activities(device), profile_memory=not cuda) as prof:
                fn()
                if cuda:
                    torch.cuda.synchronize(device)
        fd, path = tempfile.mkstemp(suffix=".pt.trace.json")
        os.close(fd)
        try:
            prof.export_chrome_trace(path)
            with open(path) as f:
                trace = json.load(f)
            if save_to:
                from ..report.traces import rewrite_trace

                rewrite_trace(path, save_to)
        finally:
            os.unlink(path)
    except Exception as e:  # the profiler's own failure: say so, as a test error
        raise MeasureError(f"torch.profiler failed to profile the call: {type(e).__name__}: {e}") from e
    events = [e for e in trace.get("traceEvents", []) if isinstance(e, dict)]
    if cuda:
        names, graphs = _cuda_launches(events)
        return Profile(len(names), names, graphs, None)
    names = _cpu_launches(events)
    return Profile(len(names), names, 0, _cpu_peak(events))


def _cuda_launches(events) -> tuple[list[str], int]:
    api = {}
    for e in events:
        if e.get("cat") in ("cuda_runtime", "cuda_driver") and "correlation" in e.get("args", {}):
            api[e["args"]["correlation"]] = e.get("name", "")
    graph_launches = sum(1 for name in api.values() if "GraphLaunch" in name)
    kernels = []
    for e in events:
        if e.get("cat") != "kernel":
            continue
        launcher = api.get(e.get("args", {}).get("correlation"), "")
        if "GraphLaunch" not in launcher:
            kernels.append((e.get("ts", 0), e.get("name", "?")))
    return [n for _, n in sorted(kernels, key=lambda k: k[0])], graph_launches


@dataclasses.dataclass
class _Node:
    name: str
    start: float
    end: float
    children: list


def _cpu_tree(events) -> list[_Node]:
    """Nest CPU op and range events by time, per thread."""
    by_thread: dict = {}
    for e in events:
        if e.get("ph") == "X" and e.get("cat") in ("cpu_op", "user_annotation"):
            by_thread.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    roots = []
    for evs in by_thread.values():
        stack: list[_Node] = []
        for e in sorted(evs, key=lambda e: (e["ts"], -e.get("dur", 0))):
            node = _Node(e["name"], e["ts"], e["ts"] + e.get("dur", 0), [])
            while stack and node.start >= stack[-1].end:
                stack.pop()
            (stack[-1].children if stack else roots).append(node)
            stack.append(node)
    return sorted(roots, key=lambda n: n.start)


def _launched(node: _Node) -> list[str]:
    """Our kernels, and the outermost ATen ops that compute (an op's own callees,
    like addmm's copy_, are part of it); views and allocations are looked through."""
    if KERNEL_RANGE.match(node.name) or (node.name.startswith("aten::") and node.name not in NO_LAUNCH):
        return [node.name]
    return [name for child in node.children for name in _launched(child)]


def _cpu_launches(events) -> list[str]:
    return [name for root in _cpu_tree(events) for name in _launched(root)]


def _cpu_peak(events) -> int | None:
    """Highest sum of CPU bytes allocated and not yet freed during the call."""
    mem = sorted(
        (e for e in events if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type") == 0),
        key=lambda e: e["ts"],
    )
    live = peak = 0
    for e in mem:
        live += e["args"].get("Bytes", 0)
        peak = max(peak, live)
    return peak
