"""Reads through an index tensor (gather, advanced indexing, embedding) and
writes back into graph inputs (functionalized in-place ops)."""
from __future__ import annotations

import torch

from .. import ir
from ..graph import Lazy, View
from ..index import linear_index, symbol
from .registry import Unsupported, broadcast_load, is_tensor, origins_of, out_val, register

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
    x = g.realize(x)
    positions = [k for k, t in enumerate(indices) if t is not None]
    if not positions:
        raise Unsupported("index with no index tensors")
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
        return ir.load(x.buffer.name, linear_index(full, x.stride, x.offset), x.dtype, tuple(binds))

    return Lazy(size, val.dtype, body, origins_of(g, node, *idx_tensors))


@register(aten.gather.default)
def gather(g, node, x, dim, index_t, *, sparse_grad=False):
    val = out_val(node)
    x = g.realize(x)
    dim = dim % max(x.ndim, 1)

    def body(idx):
        s, e = _indirect(g, index_t.load(list(idx)), x.size[dim])
        full = list(idx)
        full[dim] = s
        return ir.load(x.buffer.name, linear_index(full, x.stride, x.offset), x.dtype, ((s, e),))

    return Lazy(tuple(val.shape), val.dtype, body, origins_of(g, node, index_t))


@register(aten.copy_.default)
def copy_(g, node, dst, src, non_blocking=False):
    """A functionalized in-place op: write the new value into the graph input."""
    if not (isinstance(dst, View) and isinstance(dst.buffer, ir.InputBuffer)) or isinstance(dst.buffer, ir.ConstantBuffer):
        raise Unsupported("copy_ into something other than a graph input")
    if not is_tensor(src):
        raise Unsupported("copy_ from a scalar")
    size, dtype = dst.size, dst.dtype

    def body(idx):
        return ir.cast(broadcast_load(src, size, idx), dtype)

    origins = origins_of(g, node, src)
    buf = g.register(
        ir.ComputedBuffer(
            name=g.new_name(),
            size=size,
            stride=dst.stride,
            dtype=dtype,
            device=g.device,
            kind="pointwise",
            ranges=size,
            body=body,
            origins=origins,
            origin_ops=g.ops_of(origins),
            store_target=dst.buffer,
            store_offset=dst.offset,
        )
    )
    g.mutations.append(buf)
    return dst
