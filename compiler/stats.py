"""Per-graph records: what the compiler made of each graph. This is the API the
pytest plugin and the reports read; every field is plain data (`to_dict`)."""
from __future__ import annotations

import contextlib
import dataclasses
from typing import Callable, Iterator


@dataclasses.dataclass
class KernelRecord:
    """A kernel our codegen generated."""

    name: str  # e.g. cpp_poi_fused_add_mul_sin_0
    kind: str  # "pointwise" | "reduction" | "scan" | "sort" | "scatter"
    target: str  # "cpp" | "triton"
    aten_nodes: list[str]  # FX node names of the ATen ops fused into it
    aten_ops: list[str]  # their op names (add, mul, sin)
    bytes_read: int  # per launch, each buffer counted once
    bytes_written: int
    numel: int  # outer iteration points
    rnumel: int  # reduction points per outer point (1: pointwise)
    source: str
    source_path: str | None  # where the source is on disk (cache entry)
    split_reason: str = ""  # why this kernel did not fuse with the one before it
    # Triton: how it is launched. {"config": block sizes, num_warps, grid; "launcher":
    # "c" | "triton" | "jit" | "interpreter"; "timed": [[config, us], ...] the
    # candidates timed on this machine (empty: one candidate); "timed_on": on
    # "scratch" inputs or the first "call"'s tensors (gathers), None when none were
    # timed; "tuned_earlier": the choice came from the cache; "compile_s": seconds
    # its compile took (the slowest candidate's: they compile at once), None when
    # not measured (the interpreter, or Triton's plain launch after our fast path
    # failed)}. None for C++ kernels
    launch: dict | None = None

    @property
    def bytes_total(self) -> int:
        return self.bytes_read + self.bytes_written


@dataclasses.dataclass
class CallRecord:
    """An ATen call in the graph: an extern (mm, conv) or a fallback (no lowering)."""

    name: str  # buffer name
    op: str  # e.g. aten.addmm.default
    kind: str  # "extern" | "fallback"
    aten_node: str
    reason: str = ""  # fallbacks: why the op was not lowered
    bytes_read: int = 0
    bytes_written: int = 0


@dataclasses.dataclass
class GraphRecord:
    graph_id: int
    kind: str  # "inference" | "forward" | "backward"
    device: str
    aten_graph: str  # the ATen FX graph, as code
    ir: str  # the loop IR, one buffer per line
    kernels: list[KernelRecord]
    externs: list[CallRecord]
    fallbacks: list[CallRecord]
    aten_nodes: int  # ATen call nodes in the graph
    compile_time_s: float
    wrapper_source: str
    cache_hits: int = 0  # kernels loaded from the cache rather than built
    note: str = ""  # why the graph was not compiled, when it was run eagerly

    @property
    def bytes_read(self) -> int:
        return sum(k.bytes_read for k in self.kernels) + sum(c.bytes_read for c in self.externs + self.fallbacks)

    @property
    def bytes_written(self) -> int:
        return sum(k.bytes_written for k in self.kernels) + sum(c.bytes_written for c in self.externs + self.fallbacks)

    @property
    def launches(self) -> int:
        """Kernels launched per call, as the compiler planned it (extern/fallback
        calls may launch more than one device kernel each)."""
        return len(self.kernels) + len(self.externs) + len(self.fallbacks)

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["bytes_read"], d["bytes_written"] = self.bytes_read, self.bytes_written
        return d


_listeners: list[Callable[[GraphRecord], None]] = []
_next_id = [0]


def next_graph_id() -> int:
    _next_id[0] += 1
    return _next_id[0] - 1


def publish(record: GraphRecord) -> None:
    for fn in list(_listeners):
        fn(record)


_run_listeners: list[Callable[[GraphRecord], None]] = []


def observed(call, record: GraphRecord, early: bool = False):
    """`call` (a compiled graph's boxed call), its record published to the
    capture() blocks now, or at its first run where it was compiled before it
    was needed (config.early_backward: a forward's calls count no backward
    that has not run); and telling the `runs()` blocks around it that its graph
    ran: a graph compiled once may run in several calls, and a call's bytes are
    those of the graphs it ran (unobserved, a call costs one loop over an empty list)."""
    unpublished = [record] if early else []
    if not early:
        publish(record)

    def run(args):
        while unpublished:
            publish(unpublished.pop())
        for fn in _run_listeners:
            fn(record)
        return call(args)

    run._boxed_call = True
    run.record = record
    return run


@contextlib.contextmanager
def runs() -> Iterator[list[GraphRecord]]:
    """The records of the compiled graphs called inside the block, once per call."""
    ran: list[GraphRecord] = []
    _run_listeners.append(ran.append)
    try:
        yield ran
    finally:
        _run_listeners.remove(ran.append)


@dataclasses.dataclass
class Capture:
    """Everything compiled inside a `capture()` block."""

    graphs: list[GraphRecord] = dataclasses.field(default_factory=list)
    graph_break_reasons: list[str] = dataclasses.field(default_factory=list)

    @property
    def graph_breaks(self) -> int:
        return len(self.graph_break_reasons)

    @property
    def kernels(self) -> list[KernelRecord]:
        return [k for g in self.graphs for k in g.kernels]

    @property
    def externs(self) -> list[CallRecord]:
        return [c for g in self.graphs for c in g.externs]

    @property
    def fallbacks(self) -> list[CallRecord]:
        return [c for g in self.graphs for c in g.fallbacks]


@contextlib.contextmanager
def capture() -> Iterator[Capture]:
    """Collect the GraphRecords and Dynamo graph breaks of the code in the block."""
    from torch._dynamo.utils import counters

    cap = Capture()
    # Dynamo counts graph breaks under "graph_break" (older releases) or
    # "unimplemented" (newer ones), keyed by the reason's text
    keys = ("graph_break", "unimplemented")
    before = {k: dict(counters[k]) for k in keys}
    _listeners.append(cap.graphs.append)
    try:
        yield cap
    finally:
        _listeners.remove(cap.graphs.append)
        for k in keys:
            for reason, n in counters[k].items():
                for _ in range(n - before[k].get(reason, 0)):
                    cap.graph_break_reasons.append(reason.strip().splitlines()[0])
            if cap.graph_break_reasons:
                break
