"""What the C++ and Triton backends share: kernel names, the argument list,
bytes accounting, and the walk that turns a member's Expr DAG into lines."""
from __future__ import annotations

import dataclasses
import math

import sympy
import torch

from .. import ir
from ..scheduler import FusedKernel

# kernel names hold at most this many op names, as TorchInductor's do
MAX_NAME_OPS = 6
# binary ops that C++ and Triton both write as an infix operator
INFIX_OPS = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
             "lshift": "<<", "rshift": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


# a scan's combine of its running value and the next one, by the name of its function
# in each target's helpers ({target} is "fusion" for C++, "" for Triton): max and min
# propagate NaN, as eager's cummax and cummin do, and logaddexp is logcumsumexp's
SCAN_COMBINES = {"sum": "{target}_add", "prod": "{target}_prod", "max": "{target}_max_nan",
                 "min": "{target}_min_nan", "logaddexp": "{target}_logaddexp"}
# scans that sort a row's keys (lowerings.sorting) rather than combine them
SORTS = ("sort_asc", "sort_desc")


def kernel_kind(kernel: FusedKernel) -> str:
    """What the kernel does: pointwise, reduction, scan, sort or scatter."""
    if kernel.is_scan:
        return "sort" if kernel.members[0].node.buffer.reduction_type in SORTS else "scan"
    if kernel.is_scatter:
        return "scatter"
    return "reduction" if kernel.is_reduction else "pointwise"


def kernel_name(target: str, kernel: FusedKernel, index: int) -> str:
    kind = {"pointwise": "poi", "reduction": "red"}.get(kernel_kind(kernel), kernel_kind(kernel))
    ops = sorted(dict.fromkeys(_short(o) for o in kernel.origin_ops()))
    return f"{target}_{kind}_fused_{'_'.join(ops[:MAX_NAME_OPS])}_{index}"


def _short(op: str) -> str:
    return op.lstrip("_").replace(".", "_")


@dataclasses.dataclass
class KernelArgs:
    """Pointers a kernel takes, in order: buffers it reads, then buffers it writes."""

    inputs: list[str]  # buffer names read from memory
    outputs: list[str]  # storage names written (a mutation writes its target)

    def all(self) -> list[str]:
        return self.inputs + self.outputs

    def ptr(self, name: str) -> str:
        if name in self.outputs:
            return f"out_ptr{self.outputs.index(name)}"
        return f"in_ptr{self.inputs.index(name)}"


def kernel_args(kernel: FusedKernel) -> KernelArgs:
    internal = {m.node.name for m in kernel.members if not m.stored}
    inputs: list[str] = []
    outputs: list[str] = []
    for m in kernel.members:
        if m.stored:
            outputs.append(m.node.buffer.storage_name)
    for m in kernel.members:
        for name in m.reads:
            if name not in internal and name not in inputs and name not in outputs:
                inputs.append(name)
    return KernelArgs(inputs, outputs)


def bytes_moved(kernel: FusedKernel, buffers: dict) -> tuple[int, int]:
    """(bytes read, bytes written) by one launch, each buffer counted once.
    A buffer is charged at most the elements the kernel can touch."""
    args = kernel_args(kernel)
    iterated = kernel.xnumel * max(kernel.rnumel, 1)
    read = sum(min(buffers[n].nbytes, iterated * buffers[n].dtype.itemsize) for n in args.inputs if n in buffers)
    # a buffer written and read back in a later loop of the same kernel
    written_names = {m.node.name for m in kernel.members if m.stored}
    for m in kernel.members:
        for n in m.reads:
            if n in written_names and n not in args.inputs and any(
                p.node.name == n and p.phase != m.phase for p in kernel.members
            ):
                read += buffers[n].nbytes
                break
    written = 0
    for m in kernel.members:
        if not m.stored:
            continue
        elements = m.node.numel * (m.node.buffer.sort_keep or m.node.rnumel) if m.node.is_scan else m.node.numel
        if m.node.buffer.is_scatter:  # at most every element once (the fill before it is ATen's)
            elements = min(elements, m.node.buffer.numel)
        written += elements * m.node.buffer.dtype.itemsize
    return read, written


def member_order(kernel: FusedKernel):
    """Members grouped by phase, in execution order: [(phase, [members])]."""
    phases: dict[int, list] = {}
    for m in kernel.members:
        phases.setdefault(m.phase, []).append(m)
    return sorted(phases.items())


def needs_bool_storage(dtype: torch.dtype) -> bool:
    return dtype == torch.bool


def numel(sizes) -> int:
    return math.prod(sizes)


def flat_index_ranges(kernel: FusedKernel) -> dict:
    from ..scheduler import R, X

    return {X: kernel.xnumel, R: max(kernel.rnumel, 1)}


def free_loop_symbols(expr: sympy.Expr) -> set:
    return {s for s in expr.free_symbols if s.name[0] in "xr"}
