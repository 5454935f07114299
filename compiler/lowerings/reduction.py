"""Reductions. The reduced value is a function of (outer index, reduction index);
pointwise producers are inlined into it (prologue fusion), and consumers read
the result buffer, which the scheduler may keep in registers (epilogue fusion)."""
from __future__ import annotations

import math

import torch

from .. import ir
from ..config import config
from ..graph import Lazy, View
from ..index import contiguous_strides, linear_index, loop_vars
from .registry import Unsupported, make_pointwise, origins_of, out_val, register, upcast
from .views import reshape_value

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
    elif rtype in ("max", "min") and isinstance(x, Lazy) and _rounds_apart(g, x):
        x = g.realize(x)  # read by the reduction and by whatever compares with its result
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
    if math.prod(rranges) == 1:
        return _single(g, node, x, outer, rtype, cdt, out_dtype, out_size)
    k = _rows_reduced_first(g, x, outer, dims, rtype)
    if k:
        return _reduce_in_two(g, node, x, dims, k, rtype, cdt, out_dtype, out_size)

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


def _rows_reduced_first(g, x, outer, dims, rtype) -> int:
    """k > 0 when `x` reads a value that a reduction over exactly `dims[k:]`
    computed for each point of the other dims (a loss summed over all of a
    softmax's or a layer_norm's elements reads the row's max or mean): reducing
    `dims[k:]` first, per row, puts that part in the row reduction's kernel, where
    the rows are read anyway, and leaves a sum over the rows' partials (Inductor's
    split reduction does the same). Reduced whole, the rows are read again by a
    kernel of their own (H100, (x.softmax(-1) * x).sum() over [8192, 4096] fp32:
    49.3 + 53.7 us in two kernels that each read x). In Triton, not for a few rows
    too long for registers: alone, the row reduction splits them across programs,
    which a second pass over each row in its kernel would prevent
    (scheduler._splits_rows_alone). In C++ always (where it also made such a loss
    as accurate as eager's, before float sums added in chunks: codegen.cpp._sum_chunk)."""
    from ..codegen import triton_config as tc  # it imports the scheduler, which imports lowerings

    if rtype not in ir.REDUCED_IN_PARTS or len(dims) < 2:
        return 0
    triton = config.target_for(g.device) == "triton"
    longest_held = max(tc.WIDE_PERSISTENT_MAX_RBLOCK.values())
    # (k, rows, row length) of each way to cut dims in two
    cuts = [(k, math.prod(x.size[d] for d in outer + dims[:k]), math.prod(x.size[d] for d in dims[k:]))
            for k in range(1, len(dims))]
    iv, rv = loop_vars("i", len(outer)), loop_vars("r", len(dims))
    full = [None] * x.ndim
    for d, v in [*zip(outer, iv), *zip(dims, rv)]:
        full[d] = v
    with ir.reading_as(None):
        value = x.load(full)
    buffers = None
    for e in ir.loads(value):
        if buffers is None:
            buffers = {b.name: b for b in g.buffers}
        buf = buffers.get(e.args[0])
        if not (isinstance(buf, ir.ComputedBuffer) and buf.is_reduction):
            continue
        used = e.args[1].free_symbols
        for k, rows, row in cuts:
            if (math.prod(buf.ranges), math.prod(buf.reduction_ranges)) == (rows, row) and used <= {*iv, *rv[:k]}:
                few_long = triton and rows < 2 * tc.SM_COUNT and row > longest_held
                return 0 if few_long else k
    return 0


def _reduce_in_two(g, node, x, dims, k, rtype, cdt, out_dtype, out_size):
    """Reduce `dims[k:]` of `x` into partials (kept in the computation dtype),
    then the partials over `dims[:k]`."""
    kept = [d for d in range(x.ndim) if d not in dims[k:]]
    parts = reduce(g, node, x, dims[k:], rtype, cdt, tuple(x.size[d] for d in kept))
    outer_size = tuple(x.size[d] for d in kept if d not in dims)
    result = reduce(g, node, parts, [kept.index(d) for d in dims[:k]], rtype, out_dtype, outer_size)
    return View(result.buffer, out_size, contiguous_strides(out_size))  # keepdim's 1s


def _rounds_apart(g, x) -> bool:
    """Whether two kernels may compute `x` to other bits: on the C++ target, a
    libm function that g++ vectorizes (libmvec) in one loop and not in another.
    A max or min's gradient goes to the elements equal to its result, so the
    value it reduces is then stored once and read by both."""
    if g.device.type != "cpu" or config.cpu_target != "cpp":
        return False
    from ..codegen.cpp import LIBM_VECTORIZED

    return any(e.op in LIBM_VECTORIZED for e in x.load(loop_vars("i", x.ndim)).walk())


def _single(g, node, x, outer, rtype, cdt, out_dtype, out_size):
    """A reduction over one element is that element (its position, 0, for argmax):
    a pointwise value the scheduler fuses with its neighbours, not a kernel of its
    own. nll_loss's backward scatters one index per row onto zeros, a reduction
    over an index dim of 1 (H200, cross_entropy's backward over [4096, 32000] bf16:
    1233 us in that kernel alone)."""
    keep = len(out_size) == x.ndim

    def body(idx):
        full = [0] * x.ndim
        for d in outer:
            full[d] = idx[d] if keep else idx[outer.index(d)]
        if rtype in ("argmax", "argmin"):
            return ir.const(0, out_dtype)
        return ir.cast(ir.cast(x.load(full), cdt), out_dtype)

    return Lazy(out_size, out_dtype, body, origins_of(g, node, x))


@register(aten.sum.dim_IntList, aten.sum.default)
def sum_(g, node, x, dim=None, keepdim=False, *, dtype=None):
    return reduce(g, node, x, _dims(x, dim), "sum")


@register(aten.prod.dim_int, aten.prod.default)
def prod(g, node, x, dim=None, keepdim=False, *, dtype=None):
    return reduce(g, node, x, _dims(x, dim), "prod")


@register(aten.cumsum.default)
def cumsum(g, node, x, dim, *, dtype=None):
    return scan(g, node, x, dim, "sum")


@register(aten.cumprod.default)
def cumprod(g, node, x, dim, *, dtype=None):
    return scan(g, node, x, dim, "prod")


@register(aten.logcumsumexp.default)
def logcumsumexp(g, node, x, dim):
    """In C++ accumulated in float64, as eager's CPU kernel does: each step rounds
    at the magnitude of the running value, and over [6, 9001] float32 rows the
    error from float64 was 4.0e-5 in float32 against eager's 4.8e-7. Eager's CUDA
    kernel, like Triton here, accumulates in float32."""
    if not out_val(node).dtype.is_floating_point:
        raise Unsupported("logcumsumexp of integers")
    acc = torch.float64 if config.target_for(g.device) == "cpp" else None
    return scan(g, node, x, dim, "logaddexp", acc=acc)


@register(aten.cummax.default, aten.cummin.default)
def cummax_cummin(g, node, x, dim):
    """(values, indices). The values are a running max (min) in which NaN wins,
    as in eager. An element takes over where the running value equals it or it is
    NaN (eager's rule: NaN, or at least as large as the running value while that
    is not NaN), so the indices are a second scan: the running max of the
    positions where an element took over."""
    if x.dtype == torch.bool or x.ndim == 0:
        raise Unsupported("cummax/cummin of bools or of a 0-d tensor")
    rt = "max" if node.target is aten.cummax.default else "min"
    dim = dim % x.ndim
    if config.target_for(g.device) == "cpp" and dim == x.ndim - 1:
        # one thread, [1024, 4096] fp32: ATen 20.9 ms, our two scans 31.0 (along dim 0: 143.7 against 28.7)
        raise Unsupported("along the last dim, ATen's one pass beats our two scans in C++")
    values = scan(g, node, x, dim, rt, dtype=x.dtype)
    cdt = upcast(x.dtype)
    i64 = torch.int64

    def position_taken(idx):
        v = ir.cast(x.load(idx), cdt)
        taken = ir.op("eq", v, ir.cast(values.load(idx), cdt), dtype=torch.bool)
        if cdt.is_floating_point:
            taken = ir.op("logical_or", taken, ir.op("isnan", v, dtype=torch.bool), dtype=torch.bool)
        return ir.op("where", taken, ir.index_value(idx[dim], i64), ir.const(0, i64), dtype=i64)

    return values, scan(g, node, x, dim, "max", value=position_taken, dtype=i64)


def scan(g, node, x, dim, rtype, value=None, dtype=None, acc=None):
    """The running `rtype` (sum, prod, max, min, logaddexp) of x along `dim`, into
    a contiguous buffer of x's shape and `dtype` (the node's), accumulated in that
    dtype upcast (float32 for 16-bit floats, as Inductor; eager's CUDA cumsum
    rounds each partial sum to 16 bits; float64 for float32 on a CPU, as eager
    there), or in `acc`. `value(idx)`: what is
    scanned at x's index idx (default: x's element). Its pointwise producers are
    inlined; it runs in a kernel of its own."""
    dtype = dtype or out_val(node).dtype
    if value is None and (x.ndim == 0 or x.size[dim % x.ndim] == 1):  # one element a row: itself
        return make_pointwise(g, node, lambda v: v, [x])
    if 0 in x.size:
        raise Unsupported("empty scan")
    dim = dim % x.ndim
    cdt = acc or upcast(dtype)
    if cdt == torch.float32 and g.device.type == "cpu" and rtype not in ("max", "min"):
        cdt = torch.float64  # eager's CPU scans accumulate float32 in double (acc_type<float, false>)
    stride = contiguous_strides(tuple(x.size))
    value = value or (lambda idx: x.load(idx))

    def full(index, rindex):
        return [*index[:dim], rindex[0], *index[dim:]]

    origins = origins_of(g, node, x)
    buf = g.register(
        ir.ComputedBuffer(
            name=g.new_name(),
            size=tuple(x.size),
            stride=stride,
            dtype=dtype,
            device=g.device,
            kind="scan",
            ranges=tuple(s for d, s in enumerate(x.size) if d != dim),
            reduction_ranges=(x.size[dim],),
            reduction_type=rtype,
            body=lambda index, rindex: ir.cast(value(full(index, rindex)), cdt),
            origins=origins,
            origin_ops=g.ops_of(origins),
            out_index=lambda index, rindex: linear_index(full(index, rindex), stride),
        )
    )
    return View(buf, tuple(x.size), stride)


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
    return extremes_and_positions(g, node, x, dim, "max" if node.target is aten.max.dim else "min")


def extremes_and_positions(g, node, x, dim, kind: str):
    """(values, indices) of `kind` ("max", "min") along dim, shaped as node's
    outputs: two reductions over the same rows, fused into one kernel."""
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
        correction = 1 if unbiased else 0
    return _var_mean(g, node, x, _dims(x, dim), correction, out_val(node))[0]


@register(aten.var_mean.correction)
def var_mean(g, node, x, dim=None, *, correction=None, keepdim=False):
    return _var_mean(g, node, x, _dims(x, dim), correction, out_val(node)[0])


# Rows longer than this do not stay in registers or L1, so a second pass over
# them (squared deviations from the mean) would read them from memory again.
ONE_PASS_MIN_ROW = 8192


def _var_mean(g, node, x, dims, correction, val):
    """Variance and mean of x over dims, from deviations d = x - k from the
    slice's first element k. A constant slice then has d == 0 exactly: mean k and
    variance 0, as eager's Welford gives (sum(x)/n rounds off k, and std's gradient
    at a zero std, which eager masks to 0, came out of order 1). Rows that fit take
    two passes: mean = k + sum(d)/n, then sum((x - mean)^2). Longer ones take one,
    sum(d^2) - sum(d)^2/n, whose cancellation the shift keeps small whatever the
    mean (and one-pass sums split across programs, which long rows over few outer
    indices need to fill a GPU)."""
    correction = 1 if correction is None else correction
    n = math.prod(x.size[d] for d in dims)
    denom = ir.const(max(n - correction, 0), cdt := upcast(val.dtype))
    keep = tuple(1 if d in dims else s for d, s in enumerate(x.size))

    def pointwise(fn, inputs, size=keep, dtype=cdt):
        return make_pointwise(g, node, fn, inputs, compute_dtype=cdt, out_dtype=dtype, size=size)

    def op(name, *args):
        return ir.op(name, *args, dtype=cdt)

    first = Lazy(keep, x.dtype, x.load, x.origins)  # index 0 along dims: the size-1 dims of keep
    dev = pointwise(lambda a, k: op("sub", a, k), [x, first], size=x.size)
    s1 = reduce(g, node, dev, dims, "sum", out_dtype=cdt, out_size=keep)
    shift = pointwise(lambda s: op("truediv", s, ir.const(n, cdt)), [s1])
    # a buffer beside the sums: a kernel after the statistics reads the mean, not x's
    # first elements at indices of their own (H200, group_norm over 8 groups of
    # [32, 256, 56, 56]: 90.2 -> 88.3 us); the statistics' own kernel keeps it in registers
    mean = g.realize(pointwise(lambda k, s: op("add", k, s), [first, shift]))
    if n > ONE_PASS_MIN_ROW:
        s2 = reduce(g, node, pointwise(lambda d: op("mul", d, d), [dev], size=x.size), dims, "sum", out_dtype=cdt, out_size=keep)
        # clamped at 0: rounding can leave a tiny negative where the values are nearly equal
        m2 = pointwise(lambda s, t, m: op("maximum", op("sub", t, op("mul", s, m)), ir.const(0.0, cdt)), [s1, s2, shift])
    else:  # x - mean as a normalization computes it next: one value in registers for both
        sq = pointwise(lambda a, m: (lambda e: op("mul", e, e))(op("sub", a, m)), [x, mean], size=x.size)
        m2 = reduce(g, node, sq, dims, "sum", out_dtype=cdt, out_size=keep)
    variance = pointwise(lambda m: op("truediv", m, denom), [m2])
    if n > ONE_PASS_MIN_ROW:  # a buffer too, or a kernel after the sums divides them again for every element
        # (H200, group_norm over 8 groups of [32, 256, 56, 56], divided correctly rounded: 94.2 -> 83.4 us)
        variance = g.realize(variance)
    variance = pointwise(lambda v: v, [variance], dtype=val.dtype)  # in the op's dtype
    mean = pointwise(lambda m: m, [mean], dtype=val.dtype)
    return reshape_value(variance, val.shape), reshape_value(mean, val.shape)  # keepdim or not
