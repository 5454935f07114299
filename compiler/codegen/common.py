"""What the C++ and Triton backends share: kernel names, the argument list,
bytes accounting, and the walk that turns a member's Expr DAG into lines."""
from __future__ import annotations

import dataclasses
import math

import sympy
import torch

from .. import ir
from ..index import FloorDiv, ModularIndexing, simplify_with_ranges, symbol
from ..scheduler import R, X, FusedKernel

# kernel names hold at most this many op names, as TorchInductor's do
MAX_NAME_OPS = 6
# binary ops that C++ and Triton both write as an infix operator
INFIX_OPS = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
             "lshift": "<<", "rshift": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}


TILE_MIN = 16  # both dims of a 2-D tile at least this long
Y = symbol("y0")  # the outer dim of a pointwise kernel's flat x0 = n * y0 + x0 (choose_layout)


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


# -- how a pointwise kernel walks memory -------------------------------------------------------


def choose_layout(kernel: FusedKernel) -> tuple[str, object] | None:
    """How a pointwise kernel walks its flat x0 where the logical order (its outputs'
    sizes, row-major) would walk some access with a stride:
    - ("tile", n): 2-D tiles over x0 = n * y0 + x0 when some accesses are contiguous
      along y0 and others along x0 (a transpose), all of them affine in x0 and in
      y0 or its dims (a batched transpose: y0 // P, y0 % P): Triton reads and writes
      each coalesced, through shared memory;
    - ("order", dims): 1-D blocks over the flat index taken in another order of the
      dims into which the indices split x0, where more accesses are contiguous along
      its innermost dim than along the logical one (x.t() * 2 or a channels-last
      relu, whose outputs keep their inputs' strides): `dims` gives each dim's size
      and stride in x0, outer to inner (see in_order); where no such order is
      affine in them, 2-D tiles as above;
    None when the logical order is as good."""
    indices = walking_indices(kernel)
    splits = _splits(indices, X)
    xn = kernel.xnumel
    transposed = None  # the first tiling under which every access is transposed
    for n in sorted(splits):
        if n < TILE_MIN or xn % n or xn // n < TILE_MIN:
            continue
        walks = tile_walks(indices, n, xn)
        # y0 may split into dims (a batched transpose: y0 // P, y0 % P), x0 may not
        if any(X in f.free_symbols for e in walks for f in e.atoms(FloorDiv, ModularIndexing)):
            continue
        along_y = any(y_step(e) == 1 and e.coeff(X) not in (0, 1) for e in walks)
        # an access constant along y0 (a broadcast row) reads one line again and again
        along_x = any(e.coeff(X) == 1 and Y in e.free_symbols for e in walks)
        if along_y and along_x:
            return "tile", n
        if along_y:
            transposed = transposed or n
    # a scatter keeps its logical order: the C++ one adds on one thread in eager's order
    dims = None if kernel.is_scatter else _memory_order(indices, splits, xn, X)
    if dims:
        return "order", dims
    return ("tile", transposed) if transposed else None


def reduction_order(kernel: FusedKernel) -> tuple | None:
    """The dims (size, stride in r0), outer to inner, of another order in which a
    reduction walks its flat r0, where more of its loads along every reduced dim are
    contiguous along another dim than along the logical innermost one: a group norm
    over a channels-last input reduces (channel, pixel) with its channels adjacent
    in memory, and walking the pixels innermost would stride a row of channels an
    element. None when the logical order does as well, or when the results depend
    on the order of r0 beyond rounding: an arg reduction's positions, a scan, a sort."""
    if kernel.is_scan or kernel.rnumel <= 1 or any(
            m.role == "reduction" and m.node.buffer.reduction_type in ("argmax", "argmin") for m in kernel.members):
        return None
    indices = walking_indices(kernel, R)
    return _memory_order(indices, _splits(indices, R), kernel.rnumel, R)


def _splits(indices: list, var) -> set:
    """The sizes at which the indices' divisions and remainders cut the flat `var`
    (a group of channels, (var // hw) % c // g, cuts it at hw * g)."""
    splits = set()
    for idx in indices:
        for f in idx.atoms(FloorDiv, ModularIndexing):
            arg = f.args[0]
            if arg == var and isinstance(f, FloorDiv):
                splits.add(int(f.args[1]))
            elif arg == var:
                splits |= {int(f.args[1]), int(f.args[1] * f.args[2])}
            elif isinstance(f, FloorDiv) and isinstance(arg, ModularIndexing) and arg.args[0] == var:
                splits.add(int(arg.args[1] * f.args[1]))
    return splits


def tile_walks(indices: list, n: int, xn: int) -> list:
    """The indices in the 2-D tiling x0 = n * y0 + x0 (see choose_layout), simplified."""
    return [simplify_with_ranges(idx.xreplace({X: n * Y + X}), {Y: xn // n, X: n}) for idx in indices]


def y_step(walk: sympy.Expr) -> int:
    """How far a tile's walk moves as y0 steps by one (but where y0 % P wraps)."""
    step = walk.coeff(Y)
    for f in walk.atoms(ModularIndexing):
        if f.args[0] == Y and f.args[1] == 1:
            step += walk.coeff(f)
    return step


def _memory_order(indices: list, splits: set, n: int, var) -> tuple | None:
    """The order of the dims of the flat `var` (n long), as (size, stride in `var`)
    outer to inner, that walks the most accesses contiguously (see choose_layout);
    None when the logical order does as well, or an index is not affine in the dims."""
    bounds = sorted({1, n} | {s for s in splits if s < n})
    if len(bounds) < 3 or any(hi % lo for lo, hi in zip(bounds, bounds[1:])):
        return None
    dims = [symbol(f"t{k}") for k in range(len(bounds) - 1)]  # the logical innermost first
    ranges = {d: hi // lo for d, lo, hi in zip(dims, bounds, bounds[1:])}
    flat = sympy.Add(*[d * lo for d, lo in zip(dims, bounds)])
    walks = [simplify_with_ranges(idx.xreplace({var: flat}), ranges) for idx in indices]
    if any(f.free_symbols & set(dims) for e in walks for f in e.atoms(FloorDiv, ModularIndexing)):
        return None
    # only accesses along every dim vote: one constant along some dim (a broadcast, a
    # cat's narrow piece) reads a buffer smaller than the walk, which the caches hold
    full = [e for e in walks if all(e.coeff(d) != 0 for d in dims)]
    contiguous = {d: sum(e.coeff(d) == 1 for e in full) for d in dims}
    inner = max(dims, key=contiguous.get)  # a tie keeps the logical innermost
    if contiguous[inner] <= contiguous[dims[0]]:
        return None
    lead = next(e for e in full if e.coeff(inner) == 1)
    # outer to inner as the lead access lays them out (a flip's dims by their strides' size)
    others = sorted((d for d in dims if d != inner), key=lambda d: (-abs(lead.coeff(d)), -dims.index(d)))
    return tuple((ranges[d], bounds[dims.index(d)]) for d in [*others, inner])


def steps_by_one(index: sympy.Expr, dims: tuple, var) -> bool:
    """Whether `index` moves by one element where a walk over `dims` (reduction_order's
    (size, stride) pairs) steps along its innermost dim."""
    walk, size = in_order(dims, var), dims[-1][0]
    others = {s: 0 for s in index.free_symbols if s != var}

    def at(p: int):
        return index.xreplace(others).xreplace({var: walk.xreplace({var: sympy.Integer(p)})})

    return size > 1 and all(at(p + 1) - at(p) == 1 for p in (0, size - 2))


def in_order(dims: tuple, var=X) -> sympy.Expr:
    """The logical flat `var` at position `var` of a walk over `dims` (choose_layout's
    or reduction_order's (size, stride) pairs, outer to inner)."""
    out, inner = sympy.Integer(0), 1
    for k, (size, stride) in enumerate(reversed(dims)):
        outer = k == len(dims) - 1
        out += stride * (FloorDiv(var, inner) if outer else ModularIndexing(var, inner, size))
        inner *= size
    return out


def walking_indices(kernel: FusedKernel, var=X) -> list:
    """The index of each store and of each direct load from outside, where it walks `var`."""
    out = [sympy.expand(m.store_index) for m in kernel.members if m.stored]
    out += [sympy.expand(e.args[1]) for e in external_loads(kernel) if not e.args[2]]
    return [i for i in out if var in i.free_symbols]


def external_loads(kernel: FusedKernel) -> list:
    """The kernel's loads of buffers it does not compute itself."""
    names = {m.node.name for m in kernel.members}
    return [e for m in kernel.members for e in m.value.walk() if e.op == "load" and e.args[0] not in names]
