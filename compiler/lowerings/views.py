"""Views are index arithmetic, never a kernel. On a View (a buffer in memory)
they compute new strides, so an extern can take the result as it is; on a Lazy
they compose the index function."""
from __future__ import annotations

import math

import sympy
import torch

from .. import ir
from ..graph import Lazy, View
from ..index import FloorDiv, ModularIndexing, clamp, contiguous_strides, linear_index, unflatten
from .registry import Unsupported, is_tensor, make_pointwise, origins_of, out_val, register, upcast

aten = torch.ops.aten


def _layout(x):
    """(stride, offset) of x in its storage: a View's own; a computed value (Lazy)
    is laid out in the contiguous buffer its root would be realized into."""
    if isinstance(x, View):
        return x.stride, x.offset
    base = getattr(x, "view_of", None)
    return (base[1], base[2]) if base else (contiguous_strides(x.size), 0)


def _view(x, size, stride, offset, index_fn):
    """x seen through (size, stride, offset) of its storage. On a View: a View of
    the same buffer. On a Lazy: a Lazy reading x at index_fn(index), which keeps
    its layout in its root for as_strided (whose offsets count from the root)."""
    if isinstance(x, View):
        return View(x.buffer, size, stride, offset)
    out = Lazy(size, x.dtype, lambda idx: x.load(index_fn(idx)), x.origins)
    root = x.view_of[0] if getattr(x, "view_of", None) else x
    out.view_of = (root, tuple(stride), offset)
    return out


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
    """A view when the strides allow one, else a copy (a new Lazy reading x in order)."""
    new_size = tuple(new_size)
    if new_size == x.size:
        return x  # alias/detach/no-op view: the same value, realized at most once
    old_size = x.size
    new_contig = contiguous_strides(new_size)

    def fn(idx):
        return unflatten(linear_index(idx, new_contig), old_size)

    stride, offset = _layout(x)
    view_stride = _view_strides(x.size, stride, new_size)
    if view_stride is not None:
        return _view(x, new_size, view_stride, offset, fn)
    return Lazy(new_size, x.dtype, lambda idx: x.load(fn(idx)), x.origins)


@register(aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.view_copy.default)
def view(g, node, x, size):
    return reshape_value(x, tuple(out_val(node).shape))


@register(aten.view.dtype)
def view_dtype(g, node, x, dtype):
    """x's bits read as another dtype of the same size (float32 as int32, bfloat16
    as int16): each element bitcast. Other sizes (and bool) are left to ATen."""
    if dtype == x.dtype:
        return x
    if dtype.itemsize != x.dtype.itemsize or torch.bool in (dtype, x.dtype):
        raise Unsupported(f"bit reinterpretation of {x.dtype} as {dtype}, of another size")
    return Lazy(tuple(x.size), dtype, lambda idx: ir.bitcast(x.load(idx), dtype), x.origins)


@register(aten.permute.default, aten.permute_copy.default)
def permute(g, node, x, dims):
    dims = [d % x.ndim for d in dims]
    stride, offset = _layout(x)

    def fn(idx):
        old = [None] * x.ndim
        for new_pos, d in enumerate(dims):
            old[d] = idx[new_pos]
        return old

    return _view(x, tuple(x.size[d] for d in dims), tuple(stride[d] for d in dims), offset, fn)


@register(aten.expand.default, aten.expand_copy.default)
def expand(g, node, x, size, *, implicit=False):
    size = tuple(out_val(node).shape)
    lead = len(size) - x.ndim
    stride, offset = _layout(x)
    new_stride = [0] * lead + [0 if (x.size[k] == 1 and size[lead + k] != 1) else stride[k] for k in range(x.ndim)]
    return _view(x, size, tuple(new_stride), offset,
                 lambda idx: [0 if x.size[k] == 1 and size[lead + k] != 1 else idx[lead + k] for k in range(x.ndim)])


@register(aten.slice.Tensor, aten.slice_copy.Tensor)
def slice_(g, node, x, dim=0, start=None, end=None, step=1):
    dim = dim % x.ndim
    n = x.size[dim]
    start = 0 if start is None else start
    start = min(max(start + n if start < 0 else start, 0), n)
    return _slice(x, dim, start, tuple(out_val(node).shape), step)


def _slice(x, dim, start, out_size, step=1):
    stride, offset = _layout(x)
    new_stride = list(stride)
    new_stride[dim] *= step

    def fn(idx):
        idx = list(idx)
        idx[dim] = start + step * idx[dim]
        return idx

    return _view(x, out_size, tuple(new_stride), offset + start * stride[dim], fn)


@register(aten.split_with_sizes.default, aten.split.Tensor, aten.unsafe_split.Tensor, aten.split_with_sizes_copy.default)
def split(g, node, x, sizes, dim=0):
    """Every piece is a slice: a view of x."""
    dim = dim % x.ndim
    out, start = [], 0
    for val in out_val(node):
        out.append(_slice(x, dim, start, tuple(val.shape)))
        start += val.shape[dim]
    return tuple(out)


@register(aten.select.int, aten.select_copy.int)
def select(g, node, x, dim, index):
    dim = dim % x.ndim
    index = index + x.size[dim] if index < 0 else index
    stride, offset = _layout(x)
    return _view(x, x.size[:dim] + x.size[dim + 1 :], stride[:dim] + stride[dim + 1 :], offset + index * stride[dim],
                 lambda idx: list(idx[:dim]) + [sympy.Integer(index)] + list(idx[dim:]))


@register(aten.unfold.default)
def unfold(g, node, x, dim, size, step):
    """Windows of `size` every `step` along dim, as a new last dim: a view."""
    dim = dim % max(x.ndim, 1)
    stride, offset = _layout(x)
    out_size = tuple(out_val(node).shape)
    new_stride = list(stride[: x.ndim]) + [stride[dim] if x.ndim else 1]
    if x.ndim:
        new_stride[dim] = stride[dim] * step

    def fn(idx):
        old = list(idx[: x.ndim])
        if x.ndim:
            old[dim] = idx[dim] * step + idx[-1]
        return old

    return _view(x, out_size, tuple(new_stride), offset, fn)


@register(aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.unsqueeze.default, aten.alias.default, aten.squeeze_copy.dims, aten.unsqueeze_copy.default)
def squeeze_unsqueeze(g, node, x, *args):
    return reshape_value(x, tuple(out_val(node).shape))


@register(aten.flip.default)
def flip(g, node, x, dims):
    dims = {d % x.ndim for d in dims}
    # a copy, as in ATen (negative strides are not a view)
    return Lazy(x.size, x.dtype, lambda idx: x.load([x.size[d] - 1 - i if d in dims else i for d, i in enumerate(idx)]), x.origins)


@register(aten.as_strided.default)
def as_strided(g, node, x, size, stride, storage_offset=None):
    """A window on x's storage: the input's, or the buffer x's root is realized into.
    storage_offset counts from the start of that storage (an input's own offset included).
    A computed x that eager lays out otherwise (transposed, channels_last: it keeps
    its inputs' layout) is stored in eager's layout first, where its storage is its own."""
    layout, offset = _layout(x)
    eager = node.args[0].meta["val"]
    if not _same_layout(x.size, layout, eager.stride()) and not _laid_out_by_aten(x):
        if eager.storage_offset() != 0:
            raise Unsupported("as_strided of a view of a computed value that eager lays out otherwise")
        x = g.realize(Lazy(x.size, x.dtype, x.load, x.origins), stride=eager.stride())
        offset = 0
    if not isinstance(x, View):
        root = x.view_of[0] if getattr(x, "view_of", None) else x
        size, stride = tuple(size), tuple(stride)
        start = storage_offset if storage_offset is not None else offset
        if root.realized is None and stride == contiguous_strides(size) and start + math.prod(size) <= math.prod(root.size):
            # a dense window of the contiguous buffer root would be realized into (a
            # decomposition's reshape, e.g. group_norm's [N, G, C/G] -> [N, C]): read
            # root there, so it stays fusible instead of being written and read back
            return _view(root, size, stride, start,
                         lambda idx: unflatten(start + linear_index(idx, stride), root.size))
        x = g.realize(root)
    if storage_offset is not None:
        offset = storage_offset - getattr(x.buffer, "offset", 0)
    return View(x.buffer, tuple(size), tuple(stride), offset)


def _same_layout(size, a, b) -> bool:
    """Whether strides a and b lay out `size` alike (b may be symbolic: then assumed so)."""
    return all(sa == sb for n, sa, sb in zip(size, a, b) if n > 1 and isinstance(sb, int))


def _laid_out_by_aten(x) -> bool:
    return isinstance(x, View) and not isinstance(x.buffer, ir.ComputedBuffer)


# a cat of more pieces is built in stored groups of this many: as one expression,
# every element would load every piece (and an unrolled loop's stack has hundreds)
CAT_MAX_PIECES = 16


@register(aten.cat.default)
def cat(g, node, tensors, dim=0):
    val = out_val(node)
    size = tuple(val.shape)
    dim = dim % len(size)
    # a piece with nothing along dim adds nothing (loading it at a clamped index would
    # read index -1), nor does a legacy 1-D empty one of any rank; with none left the
    # result is empty and any value will do
    tensors = [t for t in tensors if is_tensor(t) and not (t.ndim == 1 and t.size[0] == 0) and t.size[dim] != 0]
    if not tensors:
        return Lazy(size, val.dtype, lambda idx: ir.const(0, val.dtype), origins_of(g, node))
    while len(tensors) > CAT_MAX_PIECES:
        groups = [tensors[k:k + CAT_MAX_PIECES] for k in range(0, len(tensors), CAT_MAX_PIECES)]
        tensors = [g.realize(_joined(g, node, group, dim, val.dtype)) for group in groups]
    return _joined(g, node, tensors, dim, val.dtype)


def _joined(g, node, tensors, dim, dtype):
    """The pieces one after another along `dim`, as one expression."""
    cdt = upcast(dtype)
    offsets, o = [], 0
    for t in tensors:
        offsets.append(o)
        o += t.size[dim]
    size = list(tensors[0].size)
    size[dim] = o

    def body(idx):
        # pick the piece whose range holds idx[dim]; every piece is loaded at a
        # clamped, in-bounds index and the unused values are discarded
        result = None
        for t, off in reversed(list(zip(tensors, offsets))):
            local = list(idx)
            local[dim] = clamp(idx[dim] - off, 0, t.size[dim] - 1)
            v = ir.cast(t.load(local), cdt)
            if result is None:
                result = v
            else:
                cond = ir.op("lt", ir.index_value(idx[dim]), ir.const(off + t.size[dim], torch.int64), dtype=torch.bool)
                result = ir.op("where", cond, v, result, dtype=cdt)
        return ir.cast(result, dtype)

    return Lazy(tuple(size), dtype, body, origins_of(g, node, *tensors))


@register(aten.constant_pad_nd.default)
def constant_pad_nd(g, node, x, pad, value=0):
    val = out_val(node)
    size = tuple(val.shape)
    cdt = upcast(val.dtype)
    nd = len(size)
    before = [0] * nd
    for k in range(len(pad) // 2):
        before[nd - 1 - k] = pad[2 * k]
    if math.prod(x.size) == 0:  # every position is padding: no load (index 0 of nothing is out of bounds)
        return Lazy(size, val.dtype, lambda idx: ir.const(value, val.dtype), origins_of(g, node, x))

    def body(idx):
        local, conds = [], []
        for d in range(nd):
            src = idx[d] - before[d]
            if before[d] == 0 and size[d] == x.size[d]:
                local.append(idx[d])
                continue
            # an in-bounds (clamped) load; the padding positions discard it
            local.append(clamp(src, 0, x.size[d] - 1) if x.size[d] > 0 else 0)
            i = ir.index_value(src)
            conds.append(ir.op("ge", i, ir.const(0, torch.int64), dtype=torch.bool))
            conds.append(ir.op("lt", i, ir.const(x.size[d], torch.int64), dtype=torch.bool))
        v = ir.cast(x.load(local), cdt)
        if conds:
            v = ir.op("where", _all(conds), v, ir.const(value, cdt), dtype=cdt)
        return ir.cast(v, val.dtype)

    return Lazy(size, val.dtype, body, origins_of(g, node, x))


@register(aten.slice_scatter.default)
def slice_scatter(g, node, x, src, dim=0, start=None, end=None, step=1):
    """x with src written into x[start:end:step] along dim: each element picks src
    (loaded at a clamped, in-bounds index) or x by its position, a pointwise value
    that fuses (slice_backward, a cat's backward, an in-place slice assignment).
    torch._decomp's version indexes src with a computed arange: an indirect read,
    so src was written to memory first (LLaMA rotary embedding's backward, H200:
    two kernels, 116 us, against one)."""
    val = out_val(node)
    size = tuple(val.shape)
    dim = dim % len(size)
    count = src.size[dim]
    if count == 0 or math.prod(src.size) == 0:  # a copy of x, not x: outputs must not alias inputs
        return make_pointwise(g, node, lambda v: v, [x], compute_dtype=x.dtype)
    n = size[dim]
    start = 0 if start is None else start + n if start < 0 else start
    start = min(max(start, 0), n)
    last = start + (count - 1) * step  # the position of src's last element
    cdt = upcast(val.dtype)

    def body(idx):
        i = idx[dim]
        local = list(idx)
        offset = clamp(i - start, 0, None)
        local[dim] = clamp(offset if step == 1 else FloorDiv(offset, step), None, count - 1)
        pos = ir.index_value(i)
        conds = [ir.op("ge", pos, ir.const(start, torch.int64), dtype=torch.bool),
                 ir.op("le", pos, ir.const(last, torch.int64), dtype=torch.bool)]
        if step > 1:
            on_step = ir.index_value(ModularIndexing(offset, 1, step))
            conds.append(ir.op("eq", on_step, ir.const(0, torch.int64), dtype=torch.bool))
        picked = ir.op("where", _all(conds), ir.cast(src.load(local), cdt), ir.cast(x.load(list(idx)), cdt), dtype=cdt)
        return ir.cast(picked, val.dtype)

    return Lazy(size, val.dtype, body, origins_of(g, node, x, src))


def _all(conds: list) -> ir.Expr:
    out = conds[0]
    for c in conds[1:]:
        out = ir.op("logical_and", out, c, dtype=torch.bool)
    return out
