"""Views are index arithmetic, never a kernel. On a View (a buffer in memory)
they compute new strides, so an extern can take the result as it is; on a Lazy
they compose the index function."""
from __future__ import annotations

import math

import sympy
import torch

from .. import ir
from ..graph import Lazy, View
from ..index import contiguous_strides, linear_index, unflatten
from .registry import Unsupported, broadcast_load, is_tensor, out_val, register, upcast

aten = torch.ops.aten


def _reindex(x, size, index_fn, origins=None):
    """A value of `size` whose element at `index` is x at index_fn(index)."""
    if isinstance(x, View):
        raise AssertionError("use strides for Views")
    return Lazy(size, x.dtype, lambda idx: x.load(index_fn(idx)), x.origins if origins is None else origins)


def _strided(x: View, size, stride, offset):
    v = View(x.buffer, size, stride, offset)
    return v


def _view_strides(old_size, old_stride, new_size):
    """ATen's computeStride: strides for viewing (old_size, old_stride) as new_size,
    or None when it needs a copy."""
    if math.prod(old_size) == 0:
        return contiguous_strides(new_size)
    new_stride = [0] * len(new_size)
    view_d = len(new_size) - 1
    chunk_base_stride = old_stride[-1] if old_stride else 1
    tensor_numel, view_numel = 1, 1
    for tensor_d in range(len(old_size) - 1, -1, -1):
        tensor_numel *= old_size[tensor_d]
        if tensor_d == 0 or (old_size[tensor_d - 1] != 1 and old_stride[tensor_d - 1] != tensor_numel * chunk_base_stride):
            while view_d >= 0 and (view_numel < tensor_numel or new_size[view_d] == 1):
                new_stride[view_d] = view_numel * chunk_base_stride
                view_numel *= new_size[view_d]
                view_d -= 1
            if view_numel != tensor_numel:
                return None
            if tensor_d > 0:
                chunk_base_stride = old_stride[tensor_d - 1]
                tensor_numel, view_numel = 1, 1
    if view_d != -1:
        return None
    return tuple(new_stride)


def reshape_value(x, new_size):
    new_size = tuple(new_size)
    if isinstance(x, View):
        stride = _view_strides(x.size, x.stride, new_size)
        if stride is not None:
            return _strided(x, new_size, stride, x.offset)
    old_size = x.size
    new_contig = contiguous_strides(new_size)

    def fn(idx):
        flat = linear_index(idx, new_contig)
        return unflatten(flat, old_size)

    if isinstance(x, View):
        return Lazy(new_size, x.dtype, lambda idx: x.load(fn(idx)), ())
    return _reindex(x, new_size, fn)


@register(aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.view_copy.default)
def view(g, node, x, size):
    return reshape_value(x, tuple(out_val(node).shape))


@register(aten.view.dtype)
def view_dtype(g, node, x, dtype):
    raise Unsupported("bit reinterpretation")


@register(aten.permute.default, aten.permute_copy.default)
def permute(g, node, x, dims):
    dims = [d % x.ndim for d in dims]
    size = tuple(x.size[d] for d in dims)
    if isinstance(x, View):
        return _strided(x, size, tuple(x.stride[d] for d in dims), x.offset)

    def fn(idx):
        old = [None] * x.ndim
        for new_pos, d in enumerate(dims):
            old[d] = idx[new_pos]
        return old

    return _reindex(x, size, fn)


@register(aten.expand.default, aten.expand_copy.default)
def expand(g, node, x, size, *, implicit=False):
    size = tuple(out_val(node).shape)
    lead = len(size) - x.ndim
    if isinstance(x, View):
        stride = [0] * lead + [0 if (x.size[k] == 1 and size[lead + k] != 1) else x.stride[k] for k in range(x.ndim)]
        return _strided(x, size, tuple(stride), x.offset)
    return Lazy(size, x.dtype, lambda idx: broadcast_load(x, size, idx), x.origins)


@register(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(g, node, x, dim=0, start=None, end=None, step=1):
    dim = dim % x.ndim
    n = x.size[dim]
    start = 0 if start is None else start
    start = min(max(start + n if start < 0 else start, 0), n)
    size = tuple(out_val(node).shape)
    return _slice(x, dim, start, size[dim], size, step)


@register(aten.flip.default)
def flip(g, node, x, dims):
    dims = {d % x.ndim for d in dims}
    # a Lazy, not negative strides: externs and as_strided cannot take those
    return Lazy(x.size, x.dtype, lambda idx: x.load([x.size[d] - 1 - i if d in dims else i for d, i in enumerate(idx)]), x.origins)


@register(aten.split_with_sizes.default, aten.split.Tensor, aten.unsafe_split.Tensor, aten.split_with_sizes_copy.default)
def split(g, node, x, sizes, dim=0):
    """Every piece is a slice: a view of x."""
    dim = dim % x.ndim
    out, start = [], 0
    for val in out_val(node):
        n = val.shape[dim]
        out.append(_slice(x, dim, start, n, tuple(val.shape)))
        start += n
    return tuple(out)


def _slice(x, dim, start, size, out_size, step=1):
    if isinstance(x, View):
        stride = list(x.stride)
        stride[dim] *= step
        return _strided(x, out_size, tuple(stride), x.offset + start * x.stride[dim])

    def fn(idx):
        idx = list(idx)
        idx[dim] = start + step * idx[dim]
        return idx

    return _reindex(x, out_size, fn)


@register(aten.select.int, aten.select_copy.int)
def select(g, node, x, dim, index):
    dim = dim % x.ndim
    index = index + x.size[dim] if index < 0 else index
    size = x.size[:dim] + x.size[dim + 1 :]
    if isinstance(x, View):
        return _strided(x, size, x.stride[:dim] + x.stride[dim + 1 :], x.offset + index * x.stride[dim])
    return _reindex(x, size, lambda idx: list(idx[:dim]) + [sympy.Integer(index)] + list(idx[dim:]))


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default, aten.alias.default, aten.squeeze_copy.dims, aten.unsqueeze_copy.default)
def squeeze_unsqueeze(g, node, x, *args):
    return reshape_value(x, tuple(out_val(node).shape))


@register(aten.as_strided.default)
def as_strided(g, node, x, size, stride, storage_offset=None):
    if not isinstance(x, View):
        x = g.realize(x)
    if x.stride != contiguous_strides(x.size) and storage_offset is None:
        pass  # as_strided is relative to the storage, which the View's buffer is
    off = x.offset if storage_offset is None else storage_offset
    return View(x.buffer, tuple(size), tuple(stride), off)


@register(aten.cat.default)
def cat(g, node, tensors, dim=0):
    val = out_val(node)
    size = tuple(val.shape)
    tensors = [t for t in tensors if is_tensor(t) and not (t.ndim == 1 and t.size[0] == 0)]
    dim = dim % len(size)
    cdt = upcast(val.dtype)
    offsets, o = [], 0
    for t in tensors:
        offsets.append(o)
        o += t.size[dim]

    def body(idx):
        # pick the piece whose range holds idx[dim]; every piece is loaded at a
        # clamped, in-bounds index and the unused values are discarded
        result = None
        for t, off in reversed(list(zip(tensors, offsets))):
            local = list(idx)
            local[dim] = sympy.Min(sympy.Max(idx[dim] - off, 0), t.size[dim] - 1)
            v = ir.cast(t.load(local), cdt)
            if result is None:
                result = v
            else:
                cond = ir.op("lt", ir.index_value(idx[dim]), ir.const(off + t.size[dim], torch.int64), dtype=torch.bool)
                result = ir.op("where", cond, v, result, dtype=cdt)
        return ir.cast(result, val.dtype)

    from .registry import origins_of

    return Lazy(size, val.dtype, body, origins_of(g, node, *tensors))


@register(aten.constant_pad_nd.default)
def constant_pad_nd(g, node, x, pad, value=0):
    val = out_val(node)
    size = tuple(val.shape)
    cdt = upcast(val.dtype)
    nd = len(size)
    before = [0] * nd
    for k in range(len(pad) // 2):
        before[nd - 1 - k] = pad[2 * k]

    def body(idx):
        local, conds = [], []
        for d in range(nd):
            src = idx[d] - before[d]
            if before[d] == 0 and size[d] == x.size[d]:
                local.append(idx[d])
                continue
            lo, hi = max(-before[d], 0), x.size[d] - 1
            local.append(sympy.Min(sympy.Max(src, 0), hi) if x.size[d] > 0 else 0)
            i = ir.index_value(src)
            conds.append(ir.op("ge", i, ir.const(0, torch.int64), dtype=torch.bool))
            conds.append(ir.op("lt", i, ir.const(x.size[d], torch.int64), dtype=torch.bool))
            del lo
        v = ir.cast(x.load(local), cdt)
        if conds:
            ok = conds[0]
            for c in conds[1:]:
                ok = ir.op("logical_and", ok, c, dtype=torch.bool)
            v = ir.op("where", ok, v, ir.const(value, cdt), dtype=cdt)
        return ir.cast(v, val.dtype)

    from .registry import origins_of

    return Lazy(size, val.dtype, body, origins_of(g, node, x))
