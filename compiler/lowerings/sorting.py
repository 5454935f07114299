"""sort and topk: each row's values packed with their positions into int64 keys
(the value's bits, made to order as integers, above the position), the keys
sorted as a scan of their own (`tl.sort` over a row held in registers; std::sort
in C++), and the values and indices unpacked from the sorted keys. Ties keep
their order (a stable sort); NaN sorts above everything, as in eager."""
from __future__ import annotations

import torch

from .. import ir
from ..config import config
from ..graph import Lazy, View
from ..index import contiguous_strides, linear_index
from . import indexing, reduction
from .registry import Unsupported, origins_of, out_val, register

aten = torch.ops.aten

# rows a Triton sort holds in registers, as int64 keys (a sort cannot loop); longer
# ones are ATen's, whose sort then beats the bitonic network of tl.sort. H100, us
# per call over 4M fp32 values, ours / eager: sort(-1) rows of 64 37.3 / 422.8, 256
# 67.3 / 397.9, 512 109.2 / 239.3, 1024 178.3 / 167.0, 2048 262.4 / 155.8; topk(2)
# rows of 64 42.1 / 254.9, 512 112.2 / 211.2, 1024 181.7 / 146.7
TRITON_MAX_SORTED = 512
# value dtypes whose bits fit the key's upper half
PACKABLE = (torch.float32, torch.float16, torch.bfloat16, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool)

I32, I64 = torch.int32, torch.int64


@register(aten.sort.default)
def sort(g, node, x, dim=-1, descending=False):
    return sorted_rows(g, node, x, dim, descending, None)


@register(aten.sort.stable)
def sort_stable(g, node, x, *, stable=None, dim=-1, descending=False):
    return sorted_rows(g, node, x, dim, descending, None)


@register(aten.topk.default)
def topk(g, node, x, k, dim=-1, largest=True, sorted=True):
    # topk(1) is one reduction, where a sort would hold the row in one block (and
    # fall back to ATen past TRITON_MAX_SORTED on a GPU): of equal values the first
    if k == 1 and x.ndim and 0 not in x.size:
        if largest:  # max and argmax fused (NaN the largest, as in topk and in max)
            return reduction.extremes_and_positions(g, node, x, dim, "max")
        if x.dtype in PACKABLE and x.dtype != torch.bool:
            return _smallest(g, node, x, dim % x.ndim)
    return sorted_rows(g, node, x, dim, largest, k)


def _smallest(g, node, x, dim: int):
    """topk(1, largest=False): the least key (value, then position) of each row, one
    min reduction; NaN is above every number, as in topk (min would pick it)."""
    n = x.size[dim]
    values_val, _ = out_val(node)
    size = tuple(values_val.shape)
    keys = Lazy(x.size, I64, lambda idx: _pack(x.load(idx), idx[dim], n, False), x.origins)
    least = reduction.reduce(g, node, keys, [dim], "min", I64, size)
    return (Lazy(size, values_val.dtype, lambda idx: _value(least.load(idx), values_val.dtype), least.origins),
            Lazy(size, I64, lambda idx: _position(least.load(idx), n, False), least.origins))


@register(aten.kthvalue.default)
def kthvalue(g, node, x, k, dim=-1, keepdim=False):
    """The k-th smallest value of each row and its position: the k-th key of the
    rows sorted (the first k kept), NaN counting as the largest, as in eager."""
    if x.ndim == 0 or not 1 <= k <= x.size[dim % x.ndim]:
        raise Unsupported("kthvalue of a 0-d tensor, or k out of its range (ATen raises)")
    dim = dim % x.ndim
    values, indices = sorted_rows(g, node, x, dim, False, k)
    return _at(values, dim, k - 1, keepdim), _at(indices, dim, k - 1, keepdim)


@register(aten.median.dim)
def median_dim(g, node, x, dim=-1, keepdim=False):
    """The lower median of each row and its position: the middle key of the rows
    sorted (the first half kept). A row with NaN gives NaN, at its first NaN's
    position (an argmax of isnan), as in eager."""
    if x.ndim == 0:
        raise Unsupported("median of a 0-d tensor")
    dim = dim % x.ndim
    middle = (x.size[dim] - 1) // 2
    values, indices = sorted_rows(g, node, x, dim, False, middle + 1)
    value, index = _at(values, dim, middle, keepdim), _at(indices, dim, middle, keepdim)
    if not x.dtype.is_floating_point:
        return value, index
    f32 = torch.float32  # 16-bit floats are compared and selected in float32
    nan = Lazy(x.size, I32, lambda idx: ir.cast(_isnan(x, idx), I32), x.origins)
    first_nan = reduction.reduce(g, node, nan, [dim], "argmax", I64, value.size)
    any_nan = reduction.reduce(g, node, nan, [dim], "max", I32, value.size)

    def where_nan(a, b, dtype):
        def body(idx):
            has = ir.op("ne", any_nan.load(idx), _c(0, I32), dtype=torch.bool)
            return ir.cast(ir.op("where", has, ir.cast(a(idx), dtype), ir.cast(b.load(idx), dtype), dtype=dtype), b.dtype)
        return Lazy(value.size, b.dtype, body, value.origins)

    return (where_nan(lambda idx: _c(float("nan"), f32), value, f32), where_nan(first_nan.load, index, I64))


@register(aten.nanmedian.dim)
def nanmedian_dim(g, node, x, dim=-1, keepdim=False):
    """The lower median of each row's numbers (NaN left out) and its position: the
    rows sorted, NaN last, read at (count - 1) // 2 of each row's count of numbers
    (a row of NaN only: NaN, at its first), as in eager."""
    if not x.dtype.is_floating_point:
        return median_dim(g, node, x, dim, keepdim)
    if x.ndim == 0:
        raise Unsupported("nanmedian of a 0-d tensor")
    dim = dim % x.ndim
    n = x.size[dim]
    keys = sorted_keys(g, node, x, dim, False, n)
    numbers = Lazy(x.size, I32, lambda idx: ir.cast(ir.op("logical_not", _isnan(x, idx), dtype=torch.bool), I32),
                   x.origins)
    size = _dim_size(x.size, dim, keepdim)
    counts = reduction.reduce(g, node, numbers, [dim], "sum", I32, size)
    picked: dict = {}  # one read of the key for both results at an index

    def key(idx):
        if tuple(idx) not in picked:
            middle = ir.op("floordiv", ir.op("sub", counts.load(idx), _c(1, I32), dtype=I32), _c(2, I32), dtype=I32)
            at = ir.cast(ir.op("maximum", middle, _c(0, I32), dtype=I32), I64)
            row = list(idx) if keepdim else [*idx[:dim], 0, *idx[dim:]]
            picked[tuple(idx)] = indexing.read_at(g, keys, row, dim, at)
        return picked[tuple(idx)]

    values_val, _ = out_val(node)
    return (Lazy(size, values_val.dtype, lambda idx: _value(key(idx), values_val.dtype), x.origins),
            Lazy(size, I64, lambda idx: _position(key(idx), n, False), x.origins))


def _isnan(x, idx) -> ir.Expr:
    """Whether x is NaN at idx (16-bit floats tested in float32)."""
    return ir.op("isnan", ir.cast(x.load(idx), torch.float32), dtype=torch.bool)


def _dim_size(size, dim: int, keepdim: bool) -> tuple:
    """size reduced along dim, kept as 1 or dropped."""
    return tuple(1 if d == dim else s for d, s in enumerate(size)) if keepdim else tuple(size[:dim]) + tuple(size[dim + 1:])


def _at(t, dim: int, pos: int, keepdim: bool) -> Lazy:
    """Element `pos` of t along `dim`, that dim kept (as 1) or dropped."""
    size = _dim_size(t.size, dim, keepdim)

    def body(idx):
        full = list(idx)
        if keepdim:
            full[dim] = pos
        else:
            full.insert(dim, pos)
        return t.load(full)

    return Lazy(size, t.dtype, body, t.origins)


def sorted_rows(g, node, x, dim, descending: bool, k: int | None):
    """(values, indices) of x's rows along `dim` sorted, the first k of them."""
    values_val, _ = out_val(node)
    dim = dim % max(x.ndim, 1)
    n = x.size[dim] if x.ndim else 1
    k = n if k is None else k
    keys = sorted_keys(g, node, x, dim, descending, k)
    out = list(x.size)
    out[dim] = k  # the first k of each sorted row
    origins = origins_of(g, node, x)
    values = Lazy(tuple(out), values_val.dtype, lambda idx: _value(keys.load(idx), values_val.dtype), origins)
    indices = Lazy(tuple(out), I64, lambda idx: _position(keys.load(idx), n, descending), origins)
    return values, indices


def sorted_keys(g, node, x, dim, descending: bool, k: int) -> View:
    """x's rows along `dim` as int64 keys (value, then position) sorted, the first k
    of them meant to be read."""
    if x.ndim == 0:
        raise Unsupported("sort of a 0-d tensor")
    n = x.size[dim]
    if x.dtype not in PACKABLE:
        raise Unsupported(f"sort of {x.dtype}: its values do not fit a 64-bit key with their position")
    if 0 in x.size or k == 0:
        raise Unsupported("sort of an empty tensor")
    if config.target_for(g.device) == "triton" and n > TRITON_MAX_SORTED:
        raise Unsupported(f"sort of rows over {TRITON_MAX_SORTED} long in Triton (a row is one block)")
    size = tuple(x.size)
    stride = contiguous_strides(size)

    def full(index, rindex):
        return [*index[:dim], rindex[0], *index[dim:]]

    def key(index, rindex):
        return _pack(x.load(full(index, rindex)), rindex[0], n, descending)

    origins = origins_of(g, node, x)
    keys = g.register(ir.ComputedBuffer(
        name=g.new_name(), size=size, stride=stride, dtype=I64, device=g.device, kind="scan",
        ranges=tuple(s for d, s in enumerate(size) if d != dim), reduction_ranges=(n,),
        reduction_type="sort_desc" if descending else "sort_asc", sort_keep=k, body=key, origins=origins,
        origin_ops=g.ops_of(origins), out_index=lambda index, rindex: linear_index(full(index, rindex), stride)))
    return View(keys, size, stride)


def _c(v, dtype=I64) -> ir.Expr:
    return ir.const(v, dtype)


def _pack(v: ir.Expr, r, n: int, descending: bool) -> ir.Expr:
    """v and its position r as one int64 that sorts as (v, then r in order)."""
    if v.dtype.is_floating_point:
        f = ir.cast(v, torch.float32)
        f = ir.op("add", f, _c(0.0, torch.float32), dtype=torch.float32)  # -0.0 ties with 0.0
        f = ir.op("where", ir.op("ne", f, f, dtype=torch.bool), _c(float("nan"), torch.float32), f, dtype=torch.float32)
        ordered = flip_negatives(ir.bitcast(f, I32))
    else:
        ordered = ir.cast(v, I32)
    # a descending sort takes larger keys first: ties then keep their order by n - 1 - r
    pos = ir.index_value(n - 1 - r if descending else r)
    high = ir.op("lshift", ir.cast(ordered, I64), _c(32), dtype=I64)
    return ir.op("bitwise_or", high, pos, dtype=I64)


def _value(key: ir.Expr, dtype: torch.dtype) -> ir.Expr:
    ordered = ir.cast(ir.op("rshift", key, _c(32), dtype=I64), I32)
    if not dtype.is_floating_point:
        return ir.cast(ordered, dtype)
    return ir.cast(ir.bitcast(flip_negatives(ordered), torch.float32), dtype)


def flip_negatives(b: ir.Expr) -> ir.Expr:
    """A float32's bits (int32) flipped, but for the sign, where negative: then
    they order as the floats do. Its own inverse."""
    flip = ir.op("bitwise_and", ir.op("rshift", b, _c(31, I32), dtype=I32), _c(0x7FFFFFFF, I32), dtype=I32)
    return ir.op("bitwise_xor", b, flip, dtype=I32)


def _position(key: ir.Expr, n: int, descending: bool) -> ir.Expr:
    low = ir.op("bitwise_and", key, _c(0xFFFFFFFF), dtype=I64)
    return ir.op("sub", _c(n - 1), low, dtype=I64) if descending else low
