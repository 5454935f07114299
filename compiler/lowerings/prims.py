"""prims.* ops: some torch._refs decompositions (var_mean, layer_norm) produce them.
Elementwise prims share the ATen lowerings; the rest map onto the same machinery."""
from __future__ import annotations

import torch

from .. import ir
from ..graph import Lazy, View
from . import pointwise, reduction, views
from .registry import is_tensor, make_pointwise, out_val, register

prims = torch.ops.prims

for table, make in ((pointwise.UNARY, pointwise._unary), (pointwise.BINARY, pointwise._binary),
                    (pointwise.COMPARE, pointwise._compare), (pointwise.PREDICATE, pointwise._predicate)):
    for packet, name in table.items():
        p = getattr(prims, packet.__name__, None)
        if p is not None:
            register(p.default)(make(name))

register(prims.where.default)(pointwise.where)
register(prims.pow.default)(pointwise.pow_)
register(prims.shift_left.default)(pointwise._binary("lshift"))
register(prims.shift_right_arithmetic.default)(pointwise._binary("rshift"))


@register(prims.div.default)
def div(g, node, a, b):
    mode = None if out_val(node).dtype.is_floating_point else "trunc"
    return pointwise.div(g, node, a, b, rounding_mode=mode)


@register(prims.convert_element_type.default)
def convert_element_type(g, node, x, dtype):
    return make_pointwise(g, node, lambda v: v, [x], compute_dtype=x.dtype if is_tensor(x) else None)


@register(prims.sum.default)
def sum_(g, node, x, dims, *, output_dtype=None):
    return reduction.reduce(g, node, x, reduction._dims(x, dims), "sum")


@register(prims.prod.default)
def prod(g, node, x, dims, *, output_dtype=None):
    return reduction.reduce(g, node, x, reduction._dims(x, dims), "prod")


@register(prims.amax.default)
def amax(g, node, x, dims, *, output_dtype=None):
    return reduction.reduce(g, node, x, reduction._dims(x, dims), "max")


@register(prims.amin.default)
def amin(g, node, x, dims, *, output_dtype=None):
    return reduction.reduce(g, node, x, reduction._dims(x, dims), "min")


@register(prims.var.default)
def var(g, node, x, dims, correction=1, *, output_dtype=None):
    return reduction.var(g, node, x, dims, correction=correction)


@register(prims.broadcast_in_dim.default)
def broadcast_in_dim(g, node, x, shape, broadcast_dimensions):
    shape = tuple(out_val(node).shape)
    dims = list(broadcast_dimensions)
    if isinstance(x, View):
        stride = [0] * len(shape)
        for k, d in enumerate(dims):
            stride[d] = 0 if x.size[k] == 1 and shape[d] != 1 else x.stride[k]
        return View(x.buffer, shape, tuple(stride), x.offset)

    def fn(idx):
        return [0 if x.size[k] == 1 and shape[d] != 1 else idx[d] for k, d in enumerate(dims)]

    return Lazy(shape, x.dtype, lambda idx: x.load(fn(idx)), x.origins)


@register(prims.transpose.default)
def transpose(g, node, x, permutation):
    return views.permute(g, node, x, permutation)


@register(prims.squeeze.default, prims.reshape.default, prims.collapse_view.default,
          prims.collapse.default, prims.split_dim.default, prims.view_of.default)
def reshape(g, node, x, *args):
    return views.reshape_value(x, tuple(out_val(node).shape))


@register(prims.iota.default)
def iota(g, node, length, *, start, step, dtype, device, requires_grad):
    def body(idx):
        t = torch.float32 if dtype.is_floating_point else torch.int64
        i = ir.cast(ir.index_value(idx[0]), t)
        v = ir.op("add", ir.const(start, t), ir.op("mul", i, ir.const(step, t), dtype=t), dtype=t)
        return ir.cast(v, dtype)

    return Lazy((length,), dtype, body, (node.name,))


@register(prims.full.default, prims.scalar_tensor.default)
def full(g, node, *args, **kwargs):
    value = args[1] if node.target is prims.full.default else args[0]
    return pointwise.full(g, node, None, value)
