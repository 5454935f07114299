"""Reads through an index tensor (gather, advanced indexing, embedding), scatters
(a reduction over the index dim; nearest upsampling's backward, a sum over
windows) and writes back into graph inputs (functionalized in-place ops)."""
from __future__ import annotations

import math

import sympy
import torch
import torch.fx
from torch.utils._python_dispatch import _disable_current_modes

from .. import ir
from ..graph import Lazy, View, replayable
from ..index import FloorDiv, linear_index, loop_vars, symbol
from . import reduction
from .registry import Unsupported, broadcast_load, is_tensor, make_pointwise, origins_of, out_val, register, upcast

aten = torch.ops.aten


def _indirect(g, value: ir.Expr, size: int):
    """A fresh index symbol bound to `value`, negative indices wrapped."""
    v = ir.cast(value, torch.int64)
    neg = ir.op("lt", v, ir.const(0, torch.int64), dtype=torch.bool)
    wrapped = ir.op("where", neg, ir.op("add", v, ir.const(size, torch.int64), dtype=torch.int64), v, dtype=torch.int64)
    g.indirect_count = getattr(g, "indirect_count", 0) + 1
    return symbol(f"ind{g.indirect_count - 1}"), wrapped


@register(aten.index.Tensor)
def index(g, node, x, indices):
    val = out_val(node)
    positions = [k for k, t in enumerate(indices) if t is not None]
    if not positions:
        raise Unsupported("index with no index tensors")
    ks = _window_pattern(node.args[1], positions, x)
    if ks is not None:  # nearest upsampling: position o reads o // k, a direct read
        def direct(out_idx):
            full = list(out_idx)
            for d, k in zip(positions, ks):
                full[d] = FloorDiv(out_idx[d], k)
            return x.load(full)

        return Lazy(tuple(val.shape), val.dtype, direct, origins_of(g, node, x))
    x = _source(g, x, val)
    idx_tensors = [indices[k] for k in positions]
    if any(t.dtype == torch.bool for t in idx_tensors):
        raise Unsupported("boolean mask indexing has a data-dependent shape")
    bshape = torch.broadcast_shapes(*[t.size for t in idx_tensors])
    adjacent = positions == list(range(positions[0], positions[-1] + 1))
    rest = [d for d in range(x.ndim) if d not in positions]
    first = positions[0] if adjacent else 0
    size = tuple(val.shape)
    nb = len(bshape)

    def body(out_idx):
        b_idx = list(out_idx[first : first + nb])
        others = list(out_idx[:first]) + list(out_idx[first + nb :])
        full, binds = [None] * x.ndim, []
        for d, i in zip(rest, others):
            full[d] = i
        for d, t in zip(positions, idx_tensors):
            s, e = _indirect(g, broadcast_load(t, bshape, b_idx), x.size[d])
            full[d] = s
            binds.append((s, e))
        return _read(x, full, tuple(binds))

    return Lazy(size, val.dtype, body, origins_of(g, node, *idx_tensors))


@register(aten.gather.default)
def gather(g, node, x, dim, index_t, *, sparse_grad=False):
    val = out_val(node)
    x = _source(g, x, val)
    dim = dim % max(x.ndim, 1)

    def body(idx):
        s, e = _indirect(g, index_t.load(list(idx)), x.size[dim])
        full = list(idx)
        full[dim] = s
        return _read(x, full, ((s, e),))

    return Lazy(tuple(val.shape), val.dtype, body, origins_of(g, node, index_t))


def _source(g, x, val):
    """What an indirect read reads: a computed value stays lazy, recomputed at the
    elements read, when they are fewer than its own and it reads few values
    (cross entropy picks one log-probability a row: its log_softmax is then
    never stored, only each row's max and sum); else it is stored first."""
    few = isinstance(x, Lazy) and x.realized is None and val.numel() <= math.prod(x.size)
    if few and x.count_loads() <= INLINE_INDIRECT_LOADS:
        # an index value (iota, a one-hot compare) would need the bound index itself
        if not any(e.op == "index" for e in x.load(loop_vars("i", x.ndim)).walk()):
            return x
    return g.realize(x)


# loads of a computed value an indirect read recomputes at each element it reads
INLINE_INDIRECT_LOADS = 4


def _read(x, full, binds) -> ir.Expr:
    """x at index `full`, whose indirect symbols `binds` gives values."""
    if isinstance(x, View):
        return ir.load(x.buffer.name, linear_index(full, x.stride, x.offset), x.dtype, binds)
    return _bind(x.load(full), binds, {})


def _bind(e: ir.Expr, binds: tuple, memo: dict) -> ir.Expr:
    """`e` with `binds` attached to each load whose index uses their symbols."""
    if e not in memo:
        if e.op == "load":
            name, index, inner = e.args
            inner = tuple((s, _bind(v, binds, memo)) for s, v in inner)
            memo[e] = ir.load(name, index, e.dtype, inner + tuple(b for b in binds if b[0] in index.free_symbols))
        else:
            memo[e] = ir.Expr(e.op, tuple(_bind(a, binds, memo) if isinstance(a, ir.Expr) else a for a in e.args), e.dtype)
    return memo[e]


# scatter reads every index along the scatter dim for each output element: fine
# for the few a backward pass has (nll_loss, gather), not for long ones
SCATTER_MAX_INDICES = 64


@register(aten.scatter_add.default)
def scatter_add(g, node, x, dim, index, src):
    hits = _scatter_hits(g, node, x, dim, index, src, "sum")
    return make_pointwise(g, node, lambda a, h: ir.op("add", a, h, dtype=a.dtype), [x, hits])


@register(aten.scatter.value)
def scatter_value(g, node, x, dim, index, value):
    hit = _scatter_hits(g, node, x, dim, index, None, "any")
    return make_pointwise(g, node, lambda h, a: ir.op("where", h, ir.const(value, a.dtype), a, dtype=a.dtype), [hit, x],
                          compute_dtype=[torch.bool, upcast(out_val(node).dtype)])


def _scatter_hits(g, node, x, dim, index, src, rtype):
    """Per element of x: any index along `dim` pointing at it ("any"), or the sum
    of the src values pointing at it ("sum"); a reduction over the index dim."""
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0 or index.ndim != x.ndim:
        raise Unsupported("scatter of a 0-d input, or with an index of another rank")
    if index.size[dim] > SCATTER_MAX_INDICES:
        raise Unsupported(f"scatter of more than {SCATTER_MAX_INDICES} indices per element")
    cdt = torch.bool if rtype == "any" else upcast(out_val(node).dtype)
    # off the scatter dim the index may be shorter than x: elements beyond it get nothing
    short = [d for d in range(x.ndim) if d != dim and index.size[d] < x.size[d]]

    def body(idx):
        at = [sympy.Min(i, index.size[d] - 1) if d in short else i for d, i in enumerate(idx[:-1])]
        at[dim] = idx[-1]
        hit = ir.op("eq", ir.cast(index.load(at), torch.int64), ir.index_value(idx[dim]), dtype=torch.bool)
        for d in short:
            inside = ir.op("lt", ir.index_value(idx[d]), ir.const(index.size[d], torch.int64), dtype=torch.bool)
            hit = ir.op("logical_and", hit, inside, dtype=torch.bool)
        if rtype == "any":
            return hit
        return ir.op("where", hit, ir.cast(src.load(at), cdt), ir.const(0, cdt), dtype=cdt)

    pairs = Lazy(x.size + (index.size[dim],), cdt, body, origins_of(g, node, index, *([src] if src is not None else [])))
    return reduction.reduce(g, node, pairs, [x.ndim], rtype, out_dtype=cdt, out_size=x.size)


# index tensors are vectors along one dim: larger constants are not evaluated
CONSTANT_MAX_ELEMENTS = 1 << 16


def _constant_value(node) -> torch.Tensor:
    """The value of an FX node computed from no input and no random op (an index
    built from aranges), evaluated on the CPU; Unsupported otherwise."""
    if not isinstance(node, torch.fx.Node):
        return node
    if not replayable(node):
        raise Unsupported(f"{node.name} is not a constant")
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor) and val.numel() > CONSTANT_MAX_ELEMENTS:
        raise Unsupported(f"{node.name} is too big to evaluate while compiling")
    if "constant_value" not in node.meta:
        args = torch.fx.map_arg(node.args, _constant_value)
        kwargs = torch.fx.map_arg(node.kwargs, _constant_value)
        if "device" in kwargs:
            kwargs = dict(kwargs, device=torch.device("cpu"))
        node.meta["constant_value"] = node.target(*args, **kwargs)
    return node.meta["constant_value"]


def _window_pattern(index_nodes, positions: list, x) -> list[int] | None:
    """k per indexed dim when the index tensors at `positions` (adjacent) are
    constants reading output position o at o // k of x, each along its own dim of
    the broadcast shape, in order, with as many output positions as k times x's
    (nearest upsampling by whole factors, as torch._decomp computes it); else None."""
    if positions != list(range(positions[0], positions[-1] + 1)):
        return None
    with _disable_current_modes():  # real tensors, also while AOTAutograd traces with fake ones
        return _window_factors([index_nodes[k] for k in positions], [x.size[d] for d in positions])


def _window_factors(index_nodes: list, sizes: list) -> list[int] | None:
    try:
        values = [_constant_value(n) for n in index_nodes]
    except Unsupported:
        return None
    if any(not isinstance(v, torch.Tensor) or v.dtype.is_floating_point or v.dtype == torch.bool for v in values):
        return None
    shape = torch.broadcast_shapes(*[v.shape for v in values])
    if len(shape) != len(values):
        return None
    ks = []
    for j, (v, size) in enumerate(zip(values, sizes)):
        expected = [1] * len(shape)
        expected[j] = shape[j]
        if list(v.shape) != expected[len(shape) - v.ndim:] or size == 0 or shape[j] % size:
            return None
        k = shape[j] // size
        if not torch.equal(v.reshape(-1).long(), torch.arange(shape[j]) // k):
            return None
        ks.append(k)
    return ks


@register(aten.index_put.default, aten._unsafe_index_put.default)
def index_put(g, node, x, indices, values, accumulate=False):
    """With accumulate, at nearest upsampling's indices (its backward, once the
    partition recomputes those indices: backend._constant_indices): each element
    of x gains the sum of its k-wide window of values, a reduction that fuses
    (ATen's scatter-add ran it: CPU, one thread, [8, 64, 64, 64] upsampled x2,
    forward and backward, 110 ms). Other index_puts decline."""
    positions = [k for k, t in enumerate(indices) if t is not None]
    ks = _window_pattern(node.args[1], positions, x) if accumulate and positions else None
    if ks is None:
        raise Unsupported("index_put other than nearest upsampling's backward")
    if list(values.size) != [s * ks[positions.index(d)] if d in positions else s for d, s in enumerate(x.size)]:
        raise Unsupported("index_put values that do not cover the windows")
    val = out_val(node)
    size = tuple(x.size) + tuple(ks)  # [x's dims, window offsets]

    def windows(idx):
        full = list(idx[:x.ndim])
        for j, d in enumerate(positions):
            full[d] = idx[d] * ks[j] + idx[x.ndim + j]
        return values.load(full)

    origins = origins_of(g, node, x, values)
    summed = reduction.reduce(g, node, Lazy(size, values.dtype, windows, origins), list(range(x.ndim, len(size))), "sum")
    cdt = upcast(val.dtype)
    return make_pointwise(g, node, lambda a, b: ir.op("add", a, b, dtype=cdt), [x, summed], compute_dtype=cdt)


@register(aten.copy_.default)
def copy_(g, node, dst, src, non_blocking=False):
    """A functionalized in-place op: write the new value into the graph input."""
    if not (isinstance(dst, View) and isinstance(dst.buffer, ir.InputBuffer)) or isinstance(dst.buffer, ir.ConstantBuffer):
        raise Unsupported("copy_ into something other than a graph input")
    if not is_tensor(src):
        raise Unsupported("copy_ from a scalar")
    origins = origins_of(g, node, src)

    def write(value):
        return ir.ComputedBuffer(
            name=g.new_name(), size=dst.size, stride=dst.stride, dtype=dst.dtype, device=g.device, kind="pointwise",
            ranges=dst.size, body=lambda idx: ir.cast(broadcast_load(value, dst.size, idx), dst.dtype),
            origins=origins, origin_ops=g.ops_of(origins), store_target=dst.buffer, store_offset=dst.offset)

    buf = write(src)
    if _reads_overwritten(buf, {m.store_target.name for m in g.mutations}):
        buf = write(g.realize(src))  # computed before any input is written (mutations run last, in order)
    g.mutations.append(g.register(buf))
    return dst


def _reads_overwritten(buf: ir.ComputedBuffer, written: set) -> bool:
    """Whether the write's value reads an input after it is written: its own at
    another element (x.copy_(x.flip(0))), or one an earlier write replaced."""
    from ..scheduler import make_node, read_only_at  # it imports the lowerings' graph

    node = make_node(buf)
    return bool(node.reads.keys() & written) or not read_only_at([node], buf.store_target.name, node.store_index)
