"""Reductions. The reduced value is a function of (outer index, reduction index);
pointwise producers are inlined into it (prologue fusion), and consumers read
the result buffer, which the scheduler may keep in registers (epilogue fusion)."""
from __future__ import annotations

import math

import torch

from .. import ir
from ..graph import Lazy, View
from ..index import contiguous_strides, linear_index, loop_vars
from .registry import Unsupported, make_pointwise, origins_of, out_val, register, upcast

aten = torch.ops.aten


def _dims(x, dim):
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.ndim))
    if isinstance(dim, int):
        dim = [dim]
    return sorted({d % max(x.ndim, 1) for d in dim}) if x.ndim else []


def reduce(g, node, x, dims, rtype, out_dtype=None, out_size=None):
    """Reduce `x` over `dims` with `rtype` into a contiguous buffer of the
    node's shape (or `out_size`: the same with reduced dims kept as 1)."""
    val = out_val(node)
    returned = g.returned_as(x) if rtype in ("max", "min", "argmax", "argmin") and isinstance(x, Lazy) else None
    if returned is not None:
        # also returned (saved for the backward, whose gradient goes to the elements equal
        # to this max): reduce its stored bits, not a recomputation that may round otherwise
        x = g.realize_output(returned)
    out_dtype = out_dtype or val.dtype
    out_size = tuple(val.shape if out_size is None else out_size)
    outer = [d for d in range(x.ndim) if d not in dims]
    ranges = tuple(x.size[d] for d in outer)
    rranges = tuple(x.size[d] for d in dims)
    if math.prod(rranges) == 0:
        raise Unsupported("empty reduction")
    cdt = upcast(x.dtype if rtype in ("argmax", "argmin", "max", "min") else out_dtype)
    if rtype in ("any", "all"):
        cdt = torch.bool

    def body(index, rindex):
        full = [None] * x.ndim
        for d, i in zip(outer, index):
            full[d] = i
        for d, r in zip(dims, rindex):
            full[d] = r
        return ir.cast(x.load(full), cdt)

    # output strides: the node's own if it keeps dims, else contiguous
    stride = contiguous_strides(out_size)
    keep = len(out_size) == x.ndim and x.ndim > 0
    out_stride_outer = [stride[d] for d in outer] if keep else list(stride)

    def out_index(index):
        return linear_index(index, out_stride_outer)

    # an identical reduction already lowered (layer_norm's mean, computed by var_mean and again): reuse it
    iv, rv = loop_vars("i", len(ranges)), loop_vars("r", len(rranges))
    key = (ranges, rranges, rtype, out_dtype, out_index(iv), body(iv, rv))
    seen = g.__dict__.setdefault("reductions", {})
    if key in seen:  # the same values in the same layout, maybe with other size-1 dims
        return View(seen[key].buffer, out_size, stride)
    origins = origins_of(g, node, x)
    buf = g.register(
        ir.ComputedBuffer(
            name=g.new_name(),
            size=out_size,
            stride=stride,
            dtype=out_dtype,
            device=g.device,
            kind="reduction",
            ranges=ranges,
            reduction_ranges=rranges,
            reduction_type=rtype,
            body=body,
            origins=origins,
            origin_ops=g.ops_of(origins),
            out_index=out_index,
        )
    )
    seen[key] = View(buf, out_size, stride)
    return seen[key]


@register(aten.sum.dim_IntList, aten.sum.default)
def sum_(g, node, x, dim=None, keepdim=False, *, dtype=None):
    return reduce(g, node, x, _dims(x, dim), "sum")


@register(aten.prod.dim_int, aten.prod.default)
def prod(g, node, x, dim=None, keepdim=False, *, dtype=None):
    return reduce(g, node, x, _dims(x, dim), "prod")


@register(aten.amax)
def amax(g, node, x, dim=(), keepdim=False):
    return reduce(g, node, x, _dims(x, dim), "max")


@register(aten.amin)
def amin(g, node, x, dim=(), keepdim=False):
    return reduce(g, node, x, _dims(x, dim), "min")


@register(aten.max.default)
def max_all(g, node, x):
    return reduce(g, node, x, _dims(x, None), "max")


@register(aten.min.default)
def min_all(g, node, x):
    return reduce(g, node, x, _dims(x, None), "min")


@register(aten.argmax)
def argmax(g, node, x, dim=None, keepdim=False):
    return reduce(g, node, x, _dims(x, dim), "argmax")


@register(aten.argmin)
def argmin(g, node, x, dim=None, keepdim=False):
    return reduce(g, node, x, _dims(x, dim), "argmin")


@register(aten.max.dim, aten.min.dim)
def max_min_dim(g, node, x, dim, keepdim=False):
    """(values, indices): two reductions over the same rows, fused into one kernel."""
    kind = "max" if node.target is aten.max.dim else "min"
    size = tuple(out_val(node)[0].shape)
    dims = _dims(x, dim)
    values = reduce(g, node, x, dims, kind, out_dtype=x.dtype, out_size=size)
    return values, reduce(g, node, x, dims, "arg" + kind, out_dtype=torch.int64, out_size=size)


@register(aten.any.dim, aten.any.dims, aten.any.default)
def any_(g, node, x, dim=None, keepdim=False):
    return reduce(g, node, x, _dims(x, dim), "any")


@register(aten.all.dim, aten.all.dims, aten.all.default)
def all_(g, node, x, dim=None, keepdim=False):
    return reduce(g, node, x, _dims(x, dim), "all")


@register(aten.var.correction, aten.var.dim)
def var(g, node, x, dim=None, *args, correction=None, keepdim=False, unbiased=None):
    # var.dim(x, dim, unbiased, keepdim)
    if node.target is aten.var.dim:
        unbiased = args[0] if args else True
        keepdim = args[1] if len(args) > 1 else keepdim
        correction = 1 if unbiased else 0
    elif args:
        keepdim = args[0]
    correction = 1 if correction is None else correction
    dims = _dims(x, dim)
    n = math.prod(x.size[d] for d in dims)
    cdt = upcast(out_val(node).dtype)
    denom = max(n - correction, 0)
    if n > ONE_PASS_MIN_ROW:
        return _var_one_pass(g, node, x, dims, n, denom, cdt)
    mean = _mean_keepdim(g, node, x, dims)
    sq = make_pointwise(
        g, node,
        lambda a, m: (lambda d: ir.op("mul", d, d, dtype=cdt))(ir.op("sub", a, m, dtype=cdt)),
        [x, mean], out_dtype=cdt, size=x.size,
    )
    total = reduce(g, node, sq, dims, "sum", out_dtype=cdt)
    return make_pointwise(g, node, lambda t: ir.op("truediv", t, ir.const(denom, cdt), dtype=cdt), [total])


# Rows longer than this do not stay in registers or L1, so a second pass over
# them (squared deviations from the mean) would read them from memory again.
ONE_PASS_MIN_ROW = 8192


def _var_one_pass(g, node, x, dims, n, denom, cdt):
    """Variance in one pass from sums shifted by the row's first element k:
    n*var = sum((x-k)^2) - sum(x-k)^2/n. Shifting by a value of the row keeps
    the cancellation small whatever the mean (the textbook sum(x^2) - sum(x)^2/n
    loses every digit when mean >> std), and one-pass sums split across
    programs, which long rows over few outer indices need to fill a GPU."""
    first = [0 if d in dims else None for d in range(x.ndim)]

    def shifted(power):
        def fn(idx):
            k = [i if f is None else 0 for i, f in zip(idx, first)]
            d = ir.op("sub", ir.cast(x.load(idx), cdt), ir.cast(x.load(k), cdt), dtype=cdt)
            return d if power == 1 else ir.op("mul", d, d, dtype=cdt)
        return Lazy(x.size, cdt, fn, origins_of(g, node, x))

    s1 = reduce(g, node, shifted(1), dims, "sum", out_dtype=cdt)
    s2 = reduce(g, node, shifted(2), dims, "sum", out_dtype=cdt)
    def variance(s1, s2):
        def op(name, a, b):
            return ir.op(name, a, b, dtype=cdt)

        m2 = op("sub", s2, op("truediv", op("mul", s1, s1), ir.const(n, cdt)))
        # clamped at 0: rounding can leave a tiny negative where all values are equal
        return op("truediv", op("maximum", m2, ir.const(0.0, cdt)), ir.const(denom, cdt))

    return make_pointwise(g, node, variance, [s1, s2])


def _mean_keepdim(g, node, x, dims):
    """mean over dims, shaped to broadcast against x."""
    cdt = upcast(out_val(node).dtype)
    n = math.prod(x.size[d] for d in dims)
    keep_size = tuple(1 if d in dims else s for d, s in enumerate(x.size))
    total = reduce(g, node, x, dims, "sum", out_dtype=cdt, out_size=keep_size)
    return make_pointwise(g, node, lambda t: ir.op("truediv", t, ir.const(n, cdt), dtype=cdt), [total], out_dtype=cdt, size=keep_size)
