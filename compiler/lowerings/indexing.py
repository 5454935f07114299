"""Reads through an index tensor (gather, advanced indexing, embedding), scatters
(a reduction over the index dim; nearest upsampling's backward, a sum over
windows) and writes back into graph inputs (functionalized in-place ops)."""
from __future__ import annotations

import dataclasses
import math

import sympy
import torch
import torch.fx
from torch.utils._python_dispatch import _disable_current_modes

from .. import ir
from ..config import config
from ..graph import Lazy, View, replayable
from ..index import FloorDiv, clamp, contiguous_strides, linear_index, loop_vars, symbol
from . import reduction, sorting
from .registry import Unsupported, broadcast_load, is_tensor, make_pointwise, origins_of, out_val, register, upcast

aten = torch.ops.aten


def _indirect(g, value: ir.Expr, size: int, wraps: bool = True):
    """A fresh index symbol bound to `value` _checked; or, where the value is a
    position in the loop (_position), that position, unbound."""
    position = _position(value)
    if position is not None and position.is_nonnegative:
        return position, None
    g.indirect_count = getattr(g, "indirect_count", 0) + 1
    return symbol(f"ind{g.indirect_count - 1}"), _checked(value, size, wraps)


def _checked(value: ir.Expr, size: int, wraps: bool) -> ir.Expr:
    """An index value as int64, negative ones counted from the end where `wraps`
    (x[-1]; gather's and scatter's are errors), checked to lie in [0, size)
    (config.index_checks: C++ raises IndexError, as ATen; Triton asserts on the
    device) where it is read from memory and not seen to lie there (_bounds: a
    where or a clamp that keeps it inside, as grid_sample's). Values computed
    from positions alone are a decomposition's (upsampling's), inside by
    construction; a user's constant index out of range is left to ATen
    (_affine_forms)."""
    value = ir.cast(value, torch.int64)
    lo, hi = _bounds(value, {})
    if wraps and lo < 0:
        neg = ir.op("lt", value, ir.const(0, torch.int64), dtype=torch.bool)
        value = ir.op("where", neg, ir.op("add", value, ir.const(size, torch.int64), dtype=torch.int64), value,
                      dtype=torch.int64)
    inside = 0 <= lo and hi < size
    if not config.index_checks or inside or not any(e.op == "load" for e in value.walk()):
        return value
    return ir.op("in_range", value, ir.const(size, torch.int64), dtype=torch.int64)


UNBOUNDED = (-math.inf, math.inf)


def _bounds(e: ir.Expr, facts: dict, memo: dict | None = None) -> tuple[float, float]:
    """(lo, hi) with lo <= e <= hi wherever e is a number, from constants, integer
    clamps and what the conditions of a `where` that picks e say of it (`facts`:
    value -> bounds); UNBOUNDED where unknown. `memo` holds the bounds found under
    these facts: a value shared by several operands is bounded once."""
    memo = {} if memo is None else memo
    if e not in memo:
        lo, hi = _op_bounds(e, facts, memo)
        known = facts.get(e, UNBOUNDED)
        memo[e] = max(lo, known[0]), min(hi, known[1])
    return memo[e]


def _op_bounds(e: ir.Expr, facts: dict, memo: dict) -> tuple[float, float]:
    args = [a for a in e.args if isinstance(a, ir.Expr)]
    if e.op == "const" and isinstance(e.args[0], (int, float)) and not math.isnan(e.args[0]):
        return e.args[0], e.args[0]
    if e.op == "cast" and not e.dtype.is_floating_point and e.dtype != torch.bool:
        lo, hi = _bounds(args[0], facts, memo)
        if not args[0].dtype.is_floating_point and e.dtype.itemsize < args[0].dtype.itemsize:
            return UNBOUNDED  # may wrap
        return tuple(float(math.trunc(b)) if math.isfinite(b) else b for b in (lo, hi))
    if e.op in ("floor", "ceil"):
        rnd = math.floor if e.op == "floor" else math.ceil
        return tuple(float(rnd(b)) if math.isfinite(b) else b for b in _bounds(args[0], facts, memo))
    if e.op in ("add", "sub") and len(args) == 2:
        (a_lo, a_hi), (b_lo, b_hi) = _bounds(args[0], facts, memo), _bounds(args[1], facts, memo)
        return (a_lo + b_lo, a_hi + b_hi) if e.op == "add" else (a_lo - b_hi, a_hi - b_lo)
    if e.op in ("maximum", "minimum") and not e.dtype.is_floating_point:  # a float one passes NaN on
        (a_lo, a_hi), (b_lo, b_hi) = _bounds(args[0], facts, memo), _bounds(args[1], facts, memo)
        pick = max if e.op == "maximum" else min
        return pick(a_lo, b_lo), pick(a_hi, b_hi)
    if e.op == "where":  # the picked value under what its condition says (new facts: a memo of their own)
        (t_lo, t_hi), (f_lo, f_hi) = _bounds(args[1], _facts(args[0], facts)), _bounds(args[2], facts, memo)
        return min(t_lo, f_lo), max(t_hi, f_hi)
    return UNBOUNDED


def _facts(cond: ir.Expr, facts: dict) -> dict:
    """`facts` and what `cond` (comparisons with constants, and-ed) says where it holds."""
    if cond.op == "logical_and":
        return _facts(cond.args[1], _facts(cond.args[0], facts))
    if cond.op not in ("lt", "le", "gt", "ge") or len(cond.args) != 2:
        return facts
    a, b = cond.args
    op = cond.op
    if a.op == "const":  # k < x is x > k
        a, b, op = b, a, {"lt": "gt", "le": "ge", "gt": "lt", "ge": "le"}[op]
    if b.op != "const" or not isinstance(b.args[0], (int, float)) or math.isnan(b.args[0]):
        return facts
    k, fp = b.args[0], a.dtype.is_floating_point
    lo, hi = facts.get(a, UNBOUNDED)
    if op == "lt":
        hi = min(hi, math.nextafter(k, -math.inf) if fp else k - 1)
    elif op == "le":
        hi = min(hi, k)
    elif op == "gt":
        lo = max(lo, math.nextafter(k, math.inf) if fp else k + 1)
    else:
        lo = max(lo, k)
    return {**facts, a: (lo, hi)}


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
    picks = _Picks(x, indices)
    forms = _affine_forms(node.args[1], picks)
    if forms is not None:  # pooling windows: each index an affine function of the result's position
        return Lazy(tuple(val.shape), val.dtype, lambda out_idx: x.load(picks.affine_position(out_idx, forms)),
                    origins_of(g, node, x))
    x = _source(g, x, val)

    def body(out_idx):
        full, binds = picks.position(g, out_idx)
        return _read(x, full, tuple(binds))

    return Lazy(tuple(val.shape), val.dtype, body, origins_of(g, node, *picks.tensors))


class _Picks:
    """Advanced indexing x[indices]: which element of x each point of the result
    (of `size`) is. The index tensors broadcast together; their dims land where
    the first indexed dim was when the indexed dims are adjacent, else in front."""

    def __init__(self, x, indices):
        self.dims = [k for k, t in enumerate(indices) if t is not None]
        self.tensors = [indices[k] for k in self.dims]
        if any(t.dtype == torch.bool for t in self.tensors):
            raise Unsupported("boolean mask indexing has a data-dependent shape")
        self.x_size = tuple(x.size)
        self.shape = tuple(torch.broadcast_shapes(*[t.size for t in self.tensors]))
        self.rest = [d for d in range(len(x.size)) if d not in self.dims]
        adjacent = self.dims == list(range(self.dims[0], self.dims[-1] + 1))
        self.first = self.dims[0] if adjacent else 0
        rest = [x.size[d] for d in self.rest]
        self.size = tuple(rest[:self.first]) + self.shape + tuple(rest[self.first:])

    def _split(self, out_idx):
        """(the broadcast index dims' positions, x's index with the others filled in)."""
        nb = len(self.shape)
        b_idx = list(out_idx[self.first:self.first + nb])
        others = list(out_idx[:self.first]) + list(out_idx[self.first + nb:])
        full = [None] * len(self.x_size)
        for d, i in zip(self.rest, others):
            full[d] = i
        return b_idx, full

    def position(self, g, out_idx):
        """(index of x, binds): each indexed dim a symbol bound to its index value."""
        b_idx, full = self._split(out_idx)
        binds = []
        for d, t in zip(self.dims, self.tensors):
            s, e = _indirect(g, broadcast_load(t, self.shape, b_idx), self.x_size[d])
            full[d] = s
            binds.append((s, e))
        return full, binds

    def affine_position(self, out_idx, forms):
        """Index of x where each index tensor is c0 + sum(c_j * position_j) (_affine_forms)."""
        b_idx, full = self._split(out_idx)
        for d, (c0, cs) in zip(self.dims, forms):
            full[d] = c0 + sum(c * i for c, i in zip(cs, b_idx))
        return full


@register(aten.gather.default)
def gather(g, node, x, dim, index_t, *, sparse_grad=False):
    val = out_val(node)
    x = _source(g, x, val)
    dim = dim % max(x.ndim, 1)

    def body(idx):
        s, e = _indirect(g, index_t.load(list(idx)), x.size[dim], wraps=False)
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


def read_at(g, x, full: list, dim: int, position: ir.Expr) -> ir.Expr:
    """x at index `full`, whose entry at `dim` is a computed value (`position`)."""
    s, e = _indirect(g, position, x.size[dim])
    return _read(x, [*full[:dim], s, *full[dim + 1:]], ((s, e),))


def _position(v: ir.Expr) -> sympy.Expr | None:
    """`v` as an index expression when it is one: an arange's value, scaled and
    shifted by constants (decompositions index with them: grid_sample's batch and
    channel). Read directly, its divisions fold with the others, in 32 bits where
    the kernel's indices are, and no negative value needs wrapping."""
    if v.op == "index":
        return v.args[0]
    if v.op == "const":
        return sympy.Integer(v.args[0]) if not v.dtype.is_floating_point else None
    if v.op == "cast":
        return None if v.args[0].dtype.is_floating_point else _position(v.args[0])
    if v.op in ("add", "mul"):
        parts = [_position(a) for a in v.args]
        if None in parts or (v.op == "mul" and not any(p.is_Integer for p in parts)):
            return None
        return sympy.Add(*parts) if v.op == "add" else sympy.Mul(*parts)
    return None


def _read(x, full, binds) -> ir.Expr:
    """x at index `full`, whose indirect symbols `binds` gives values (positions: none)."""
    binds = tuple(b for b in binds if b[1] is not None)
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
# for the few a backward pass has (nll_loss, gather); longer ones are atomic scatters
SCATTER_MAX_INDICES = 64
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1


@register(aten.scatter_add.default)
def scatter_add(g, node, x, dim, index, src):
    if _long_scatter(x, dim, index):
        return _scatter_along(g, node, x, dim, index, src, "sum")
    hits = _scatter_hits(g, node, x, dim, index, src, "sum")
    add = "logical_or" if out_val(node).dtype == torch.bool else "add"  # bools add saturating, not in 1 bit
    return make_pointwise(g, node, lambda a, h: ir.op(add, a, h, dtype=a.dtype), [x, hits])


@register(aten.scatter.value)
def scatter_value(g, node, x, dim, index, value):
    if _long_scatter(x, dim, index):
        return _scatter_along(g, node, x, dim, index, value, None)
    hit = _scatter_hits(g, node, x, dim, index, None, "any")
    return make_pointwise(g, node, lambda h, a: ir.op("where", h, ir.const(value, a.dtype), a, dtype=a.dtype), [hit, x],
                          compute_dtype=[torch.bool, upcast(out_val(node).dtype)])


@register(aten.scatter.src)
def scatter_src(g, node, x, dim, index, src):
    return _scatter_along(g, node, x, dim, index, src, None)


@register(aten.scatter_reduce.two)
def scatter_reduce(g, node, x, dim, index, src, reduce, *, include_self=True):
    """x with each src value added at, or kept where larger or smaller than, the
    element its index picks: a graph network's sum, max, min or mean aggregation.
    Without include_self (PyG's way), the values combine from the operation's
    identity and land only where an index picks; elsewhere x stays, which a second
    scatter marks (Triton's float max and min mark it in their keys:
    _extremes_of_keys). "mean" is a sum and a count of the values an element takes
    (see _scatter_mean); "prod" multiplies in C++ (one thread, in order) and has
    no atomic form in Triton (left to ATen there)."""
    dtype = out_val(node).dtype
    if reduce not in ("sum", "prod", "amax", "amin", "mean") or dtype == torch.bool:
        raise Unsupported(f"scatter_reduce {reduce!r} of {dtype}")
    if reduce == "mean":
        return _scatter_mean(g, node, x, dim, index, src, include_self)
    if include_self or reduce != "sum" and _combines_keys(g.device, dtype):
        return _scatter_along(g, node, x, dim, index, src, reduce, include_self=include_self)
    low, high = (-math.inf, math.inf) if dtype.is_floating_point else (torch.iinfo(dtype).min, torch.iinfo(dtype).max)
    identity = {"sum": 0, "prod": 1, "amax": low, "amin": high}[reduce]
    landed = _scatter_along(g, node, _filled(x, identity, dtype), dim, index, src, reduce)
    picked = _scatter_along(g, node, _filled(x, False, torch.bool), dim, index, True, None, dtype=torch.bool)
    return make_pointwise(g, node, lambda p, v, a: ir.op("where", p, v, a, dtype=v.dtype), [picked, landed, x],
                          compute_dtype=[torch.bool, upcast(dtype), upcast(dtype)])


def _scatter_mean(g, node, x, dim, index, src, include_self: bool):
    """scatter_reduce's mean: the values an element takes summed (onto x, with
    include_self) and counted, then divided (x counting once with include_self;
    without it, an element no index picks keeps x). Integers divide rounding down,
    as eager's."""
    dtype = out_val(node).dtype
    sums = _scatter_along(g, node, x if include_self else _filled(x, 0, dtype), dim, index, src, "sum")
    counts = _scatter_along(g, node, _filled(x, 0, torch.int32), dim, index, 1, "sum", dtype=torch.int32)
    cdt = upcast(dtype)
    div = "truediv" if dtype.is_floating_point else "floordiv"

    def mean(s, c, a):
        if include_self:
            return ir.op(div, s, ir.op("add", c, ir.const(1, cdt), dtype=cdt), dtype=cdt)
        taken = ir.op("gt", c, ir.const(0, cdt), dtype=torch.bool)
        return ir.op("where", taken, ir.op(div, s, ir.op("where", taken, c, ir.const(1, cdt), dtype=cdt), dtype=cdt),
                     a, dtype=cdt)

    return make_pointwise(g, node, mean, [sums, counts, x], compute_dtype=[cdt, cdt, cdt])


def _filled(x, value, dtype) -> Lazy:
    """A tensor of x's size, `value` everywhere (a scatter's start)."""
    return Lazy(x.size, dtype, lambda idx: ir.const(value, dtype))


def _long_scatter(x, dim, index) -> bool:
    return x.ndim > 0 and index.ndim == x.ndim and index.size[dim % x.ndim] > SCATTER_MAX_INDICES


def _scatter_along(g, node, x, dim, index, src, reduce: str | None, dtype=None, include_self: bool = True) -> View:
    """torch.scatter(_add, _reduce): src at each point of `index` lands in x where
    the point is, its position along `dim` replaced by the index value there
    (`dtype`: the result's, when not the node's; include_self: False only where
    _combines_keys)."""
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0 or index.ndim != x.ndim:
        raise Unsupported("scatter of a 0-d input, or with an index of another rank")

    def place(idx):
        at = _checked(index.load(list(idx)), x.size[dim], wraps=False)
        return _element(x.size, {d: i for d, i in enumerate(idx) if d != dim}, {dim: at})

    return _scatter_into(g, node, x, tuple(index.size), place, lambda idx: broadcast_load(src, index.size, idx),
                         reduce, origins_of(g, node, x, index, src), dtype, include_self)


def _scatter_hits(g, node, x, dim, index, src, rtype):
    """Per element of x: any index along `dim` pointing at it ("any"), or the sum
    of the src values pointing at it ("sum"; of bools, any of them: Triton's
    1-bit sum wraps); a reduction over the index dim."""
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0 or index.ndim != x.ndim:
        raise Unsupported("scatter of a 0-d input, or with an index of another rank")
    if index.size[dim] > SCATTER_MAX_INDICES:
        raise Unsupported(f"scatter of more than {SCATTER_MAX_INDICES} indices per element")
    cdt = torch.bool if rtype == "any" else upcast(out_val(node).dtype)
    rtype = "any" if cdt == torch.bool else rtype
    # off the scatter dim the index may be shorter than x: elements beyond it get nothing
    short = [d for d in range(x.ndim) if d != dim and index.size[d] < x.size[d]]

    def body(idx):
        at = [clamp(i, None, index.size[d] - 1) if d in short else i for d, i in enumerate(idx[:-1])]
        at[dim] = idx[-1]
        hit = ir.op("eq", _checked(index.load(at), x.size[dim], wraps=False), ir.index_value(idx[dim]), dtype=torch.bool)
        for d in short:
            inside = ir.op("lt", ir.index_value(idx[d]), ir.const(index.size[d], torch.int64), dtype=torch.bool)
            hit = ir.op("logical_and", hit, inside, dtype=torch.bool)
        if src is None:
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


def _affine_forms(index_nodes, picks: _Picks) -> list | None:
    """(c0, [c_j]) per index tensor when each is a constant equal to c0 + sum(c_j *
    i_j) over the positions i_j of the broadcast index shape, all within x's dim
    (a pooling window's element, out * stride + k * dilation, as torch._decomp's
    max_pool2d builds it): a direct read, through which a padded input is computed
    where read instead of stored first. None otherwise."""
    with _disable_current_modes():  # real tensors, also while AOTAutograd traces with fake ones
        try:
            values = [_constant_value(index_nodes[d]) for d in picks.dims]
        except Unsupported:
            return None
        forms = []
        for v, d in zip(values, picks.dims):
            if not isinstance(v, torch.Tensor) or v.dtype.is_floating_point or v.dtype == torch.bool or not v.numel():
                return None
            v = v.long().expand(picks.shape)
            if v.min() < -picks.x_size[d] or v.max() >= picks.x_size[d]:
                raise Unsupported("a constant index out of range (ATen raises IndexError)")
            if v.min() < 0:
                return None  # negative indices count from the end
            origin = v[(0,) * v.ndim]
            cs = [int(v[tuple(1 if k == j else 0 for k in range(v.ndim))] - origin) if n > 1 else 0
                  for j, n in enumerate(v.shape)]
            fitted = origin + sum(c * torch.arange(n).view([-1 if k == j else 1 for k in range(v.ndim)])
                                  for j, (c, n) in enumerate(zip(cs, v.shape)))
            if not torch.equal(v, torch.as_tensor(fitted).expand(v.shape)):
                return None
            forms.append((int(origin), cs))
        return forms


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
    forward and backward, 110 ms). Any other index_put is a scatter."""
    positions = [k for k, t in enumerate(indices) if t is not None]
    if not positions:
        raise Unsupported("index_put with no index tensors")
    if any(indices[k].dtype == torch.bool for k in positions):
        return _put_where_masked(g, node, x, indices, values, accumulate)
    ks = _window_pattern(node.args[1], positions, x) if accumulate else None
    if ks is None:
        return _scatter(g, node, x, indices, values, accumulate)
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


def _put_where_masked(g, node, x, indices, values, accumulate: bool) -> Lazy:
    """x[mask] = v (or += v) for one value and a mask over some of x's dims (x[:,
    mask] too): a select (an add), x's shape kept; the elements the mask picks
    never need counting (how many there are is data: any other boolean index_put
    is ATen's)."""
    from .views import reshape_value

    at = next(k for k, t in enumerate(indices) if t is not None)
    mask = indices[at]
    if (len(indices) != at + 1 or tuple(mask.size) != tuple(x.size[at:at + mask.ndim])
            or math.prod(values.size) != 1):
        raise Unsupported("boolean mask index_put other than x[..., mask] = one value")
    mask = reshape_value(mask, (1,) * at + tuple(mask.size) + (1,) * (x.ndim - at - mask.ndim))
    one = reshape_value(values, ())
    cdt = upcast(x.dtype)
    if accumulate:
        zero = ir.const(0, cdt)
        return make_pointwise(g, node, lambda m, v, a: ir.op("add", a, ir.op("where", m, v, zero, dtype=cdt), dtype=cdt),
                              [mask, one, x], compute_dtype=[torch.bool, cdt, cdt])
    return make_pointwise(g, node, lambda m, v, a: ir.op("where", m, v, a, dtype=cdt), [mask, one, x],
                          compute_dtype=[torch.bool, cdt, cdt])


def _scatter(g, node, x, indices, values, accumulate: bool) -> View | Lazy:
    """index_put: `values` added at (or written to) x[indices]. A 16-bit sum on a
    GPU adds in float32 and rounds once, as eager's sorted kernel does there
    (bfloat16 atomics rounded at every add: 4 values into one element were up to
    an ulp off, and a long run of them drifts); the CPU adds in order, rounding
    each, as eager's does."""
    dtype = out_val(node).dtype
    if accumulate and dtype in (torch.float16, torch.bfloat16) and g.device.type == "cuda":
        wide = Lazy(x.size, torch.float32, lambda idx: ir.cast(x.load(idx), torch.float32), origins_of(g, node, x))
        summed = _scatter_values(g, node, wide, indices, values, True, torch.float32)
        return make_pointwise(g, node, lambda v: v, [summed], compute_dtype=torch.float32)
    return _scatter_values(g, node, x, indices, values, accumulate)


def _scatter_values(g, node, x, indices, values, accumulate: bool, dtype=None) -> View:
    picks = _Picks(x, indices)

    def place(idx):
        full, binds = picks.position(g, idx)
        values_at = {s: e for s, e in binds if e is not None}
        direct = [d for d in range(x.ndim) if d in picks.rest or full[d] not in values_at]
        return _element(x.size, {d: full[d] for d in direct}, {d: values_at[full[d]] for d in picks.dims if d not in direct})

    return _scatter_into(g, node, x, picks.size, place, lambda idx: broadcast_load(values, picks.size, idx),
                         "sum" if accumulate else None, origins_of(g, node, x, values, *picks.tensors), dtype)


def _scatter_into(g, node, x, size, place, value, reduce: str | None, origins, dtype=None,
                  include_self: bool = True) -> View:
    """x with value(idx) written to (or, by `reduce`, added to or kept where larger
    or smaller than) the element place(idx) gives (an offset into x laid out
    contiguously, and where it is valid), for every idx of `size`: a copy of x (or
    a fill, where x is one number: embedding's backward starts from zeros), then
    one kernel over `size` that combines each value with its element atomically
    (TorchInductor's way; eager's CUDA kernels sort the indices first). Indices out
    of range are skipped where eager raises; duplicates without `reduce` leave any
    one of their values, as eager does."""
    if reduce == "sum" and torch.are_deterministic_algorithms_enabled():
        raise Unsupported(f"{node.target} adds atomically, in no fixed order (torch.use_deterministic_algorithms is on)")
    dtype = dtype or out_val(node).dtype
    if reduce in ("amax", "amin") and _combines_keys(g.device, dtype):
        return _extremes_of_keys(g, node, x, size, place, value, reduce, origins, include_self)
    if reduce and not _reduces_atomically(g.device, dtype, reduce):
        raise Unsupported(f"{node.target} ({reduce}) of {dtype}: no atomic form of it here")

    def body(idx):
        target, valid = place(idx)
        return ir.scatter(target, ir.cast(value(idx), dtype), valid, reduce)

    init = _starting_contents(g, x)  # may store x first: a buffer named before this one
    buf = g.register(ir.ComputedBuffer(
        name=g.new_name(), size=tuple(x.size), stride=contiguous_strides(x.size), dtype=dtype, device=g.device,
        kind="scatter", ranges=tuple(size), reduction_type=reduce, body=body,
        scatter_init=init, origins=origins, origin_ops=g.ops_of(origins)))
    return View(buf, buf.size, buf.stride)


def _combines_keys(device, dtype) -> bool:
    """Whether a scatter max or min of `dtype` combines int32 keys (_extremes_of_keys)."""
    return dtype in (torch.float32, torch.float16, torch.bfloat16) and config.target_for(device) == "triton"


def _extremes_of_keys(g, node, x, size, place, value, reduce: str, origins, include_self: bool) -> Lazy:
    """A float scatter max or min in Triton, done on int32 keys that order as the
    floats do (a float32's bits, flipped but for the sign where negative): Triton's
    float atomic max is two atomics (a signed max of the non-negative values, an
    unsigned min of the negative ones), its int32 one is one, and 16-bit floats,
    which have none, go through float32 exactly. NaN takes the key that wins (the
    largest for a max, the smallest for a min), which reads back as NaN, as eager
    propagates it. Without include_self (PyG's aggregation) the keys start from
    the other end, which no value takes: an element left there keeps x, with no
    second scatter to mark the picked ones."""
    dtype = out_val(node).dtype
    nan_key, untouched = (INT32_MAX, INT32_MIN) if reduce == "amax" else (INT32_MIN, INT32_MAX)

    def key(e: ir.Expr) -> ir.Expr:
        f = ir.cast(e, torch.float32)
        ordered = sorting.flip_negatives(ir.bitcast(f, torch.int32))
        return ir.op("where", ir.op("ne", f, f, dtype=torch.bool), ir.const(nan_key, torch.int32), ordered,
                     dtype=torch.int32)

    fill = None if include_self else untouched
    if include_self and isinstance(x, Lazy) and x.realized is None:
        with ir.reading_as(None):
            e = x.load(loop_vars("i", x.ndim))
        if e.op == "const":  # a fill: its key, computed here
            f = torch.tensor(float(e.args[0]), dtype=torch.float32)
            bits = int(f.view(torch.int32))
            fill = nan_key if f.isnan() else bits ^ 0x7FFFFFFF if bits < 0 else bits
    start = (_filled(x, fill, torch.int32) if fill is not None
             else Lazy(x.size, torch.int32, lambda idx: key(x.load(idx)), origins))
    keys = _scatter_into(g, node, start, size, place, lambda idx: key(value(idx)), reduce, origins, torch.int32)

    def result(idx):
        k = keys.load(idx)
        v = ir.cast(ir.bitcast(sorting.flip_negatives(k), torch.float32), dtype)
        if include_self:
            return v
        kept = ir.op("eq", k, ir.const(untouched, torch.int32), dtype=torch.bool)
        return ir.op("where", kept, ir.cast(x.load(idx), dtype), v, dtype=dtype)

    return Lazy(x.size, dtype, result, origins)


def add_into_scatter(g, node, a, b) -> View | None:
    """a + b where one of them is a scatter that adds into zeros and only this
    add reads it: that scatter adds into the other instead (in place where the
    other dies there), with no fill and no add. Gradients of a weight read in
    several places sum so: a tied embedding's (the head's matmul plus the
    embedding's backward), bilinear upsampling's (four corners). None otherwise."""
    for s, s_node, other in ((b, node.args[1], a), (a, node.args[0], b)):
        buf = s.buffer if isinstance(s, View) else None
        if not (isinstance(buf, ir.ComputedBuffer) and buf.is_scatter and buf.reduction_type == "sum"):
            continue
        if isinstance(buf.scatter_init, ir.TensorRef) or buf.scatter_init != 0 or not s.ref().is_whole:
            continue
        if len(s_node.users) != 1 or not is_tensor(other) or tuple(other.size) != tuple(buf.size):
            continue
        if not other.dtype == buf.dtype == out_val(node).dtype:
            continue
        init = _starting_contents(g, other)
        origins = tuple(dict.fromkeys(origins_of(g, node, other) + buf.origins))
        new = g.register(dataclasses.replace(buf, name=g.new_name(), scatter_init=init, origins=origins,
                                             origin_ops=g.ops_of(origins)))
        return View(new, new.size, new.stride)
    return None


def _element(size, direct: dict, picked: dict):
    """(offset, valid) of an element of a contiguous buffer of `size` whose index
    along some dims is a loop variable (`direct`: dim -> sympy index) and along
    the others an index value read from a tensor (`picked`: dim -> int64 Expr,
    wrapped): valid where every picked value is in range."""
    i64 = torch.int64
    stride = contiguous_strides(size)
    offset = ir.index_value(sum((i * stride[d] for d, i in direct.items()), sympy.Integer(0)))
    valid = ir.const(True, torch.bool)  # positions of the loop (_position) are in range
    for d, at in picked.items():
        inside = ir.op("logical_and", ir.op("ge", at, ir.const(0, i64), dtype=torch.bool),
                       ir.op("lt", at, ir.const(size[d], i64), dtype=torch.bool), dtype=torch.bool)
        valid = inside if valid.op == "const" else ir.op("logical_and", valid, inside, dtype=torch.bool)
        offset = ir.op("add", offset, ir.op("mul", at, ir.const(stride[d], i64), dtype=i64), dtype=i64)
    return offset, valid


def _reduces_atomically(device, dtype, reduce: str) -> bool:
    """Whether the kernels for `device` can combine `dtype` into memory: C++ does
    on one thread. Triton has no atomic multiply, no atomic add of bools or 8- and
    16-bit integers, and one of bfloat16 only from Hopper on (as TorchInductor
    finds), not interpreted; its atomic max and min take 32- and 64-bit integers
    here (floats combine as int32 keys before this: _extremes_of_keys; float64 is
    left to ATen)."""
    if dtype == torch.bool:
        return False
    if config.target_for(device) != "triton":
        return True
    if reduce == "prod":  # Triton has no atomic multiply
        return False
    if reduce != "sum":
        return dtype in (torch.int32, torch.int64)
    if dtype in (torch.int8, torch.uint8, torch.int16):
        return False
    if dtype == torch.bfloat16:
        return device.type == "cuda" and torch.cuda.get_device_capability(device) >= (9, 0)
    return True


def _starting_contents(g, x):
    """A scatter's start: x's value where it is one number everywhere (a fill),
    else a window of the buffer x is stored in."""
    if isinstance(x, Lazy) and x.realized is None:
        with ir.reading_as(None):
            e = x.load(loop_vars("i", x.ndim))
        if e.op == "const":
            return e.args[0]
    return g.realize(x).ref()


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


@register(aten.grid_sampler_2d.default)
def grid_sampler_2d(g, node, *args):
    """Reached only where decompositions._grid_sampler_2d declined."""
    raise Unsupported("ATen's kernel: decomposed for Triton without gradients only (slower on a CPU and in training)")
