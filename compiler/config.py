"""Compiler options. Each reads an environment variable at import and can be set
in code (`compiler.config.fusion = False`) or for a block (`config.patch(...)`)."""
from __future__ import annotations

import contextlib
import dataclasses
import os


def _cpus() -> int:
    """CPUs for this process: those it may run on, shared with its pytest-xdist siblings."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return max(1, cpus // int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def _flag(name: str, default: bool) -> bool:
    v = os.environ.get(name)
    return default if v is None else v.strip().lower() not in ("0", "false", "no", "off", "")


@dataclasses.dataclass
class Config:
    # fuse kernels (off: one kernel per realized buffer, for "what did fusion buy" runs)
    fusion: bool = dataclasses.field(default_factory=lambda: _flag("FUSION_ENABLE", True))
    # codegen for CPU tensors: "cpp", or "triton" (run under TRITON_INTERPRET=1 without a GPU)
    cpu_target: str = dataclasses.field(default_factory=lambda: os.environ.get("FUSION_TARGET", "cpp"))
    cache_dir: str = dataclasses.field(
        default_factory=lambda: os.environ.get("FUSION_CACHE_DIR", os.path.join(os.path.expanduser("~"), ".cache", "pytest-fusion"))
    )
    # on CUDA, replay a compiled graph as one CUDA graph when it is called again with
    # the same tensors (its outputs are then overwritten by the next such call)
    cuda_graphs: bool = dataclasses.field(default_factory=lambda: _flag("FUSION_CUDA_GRAPHS", False))
    # on GPUs that have it (sm_90+), Triton kernels launch while the kernel before
    # them finishes and wait for it in their first instruction (programmatic
    # dependent launch): the launch latency between kernels is hidden
    pdl: bool = dataclasses.field(default_factory=lambda: _flag("FUSION_PDL", True))
    # float32 division and exp on a GPU in Triton's fast forms, within 2 ulp of eager's
    # (div.full; ex2.approx of x * log2(e)); off (default): eager's bits, correctly
    # rounded division and eager's expf, a few instructions more (sigmoid is Triton's
    # either way, as TorchInductor's: eager's form cost 5% in a pointwise kernel)
    fast_math: bool = dataclasses.field(default_factory=lambda: _flag("FUSION_FAST_MATH", False))
    # check index values read from memory (embedding, gather, index): C++ raises
    # IndexError, Triton asserts on the device, as eager; off: unchecked, a little faster
    index_checks: bool = dataclasses.field(default_factory=lambda: _flag("FUSION_INDEX_CHECKS", True))
    # a graph that Dynamo traced with symbolic sizes compiles for this many shapes;
    # calls with further shapes run it uncompiled (with a warning and a record)
    max_shapes: int = dataclasses.field(default_factory=lambda: int(os.environ.get("FUSION_MAX_SHAPES", "8")))
    # processes that compile Triton kernels for GPUs beside the threads (0: threads only)
    compile_workers: int = dataclasses.field(
        default_factory=lambda: int(os.environ.get("FUSION_COMPILE_WORKERS", min(8, _cpus()))))
    # on CUDA, a training graph's backward is compiled with its forward, so that its
    # kernels compile in the background while the forward runs (TorchInductor waits
    # for the first backward); it counts as a compiled graph once it first runs.
    # Off: compiled at the first backward (a backward that never runs costs nothing)
    early_backward: bool = dataclasses.field(default_factory=lambda: _flag("FUSION_EARLY_BACKWARD", True))
    # write each graph's generated wrapper and kernels here (besides the cache)
    debug_dir: str | None = dataclasses.field(default_factory=lambda: os.environ.get("FUSION_DEBUG_DIR"))

    def report_settings(self) -> dict:
        """The options that change what a compiled function computes or how fast it
        runs (not where files go, how many processes compile or when), for a report."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("cache_dir", "debug_dir", "compile_workers", "early_backward")}

    def target_for(self, device) -> str:
        """The codegen that renders kernels for `device`: "triton" for CUDA tensors, else cpu_target."""
        return "triton" if device.type == "cuda" else self.cpu_target

    @contextlib.contextmanager
    def patch(self, **changes):
        old = {k: getattr(self, k) for k in changes}
        for k, v in changes.items():
            if not hasattr(self, k):
                raise AttributeError(f"no compiler option {k!r}")
            setattr(self, k, v)
        try:
            yield self
        finally:
            for k, v in old.items():
                setattr(self, k, v)


config = Config()
