"""Calls into ATen: externs (mm, conv: cuBLAS/cuDNN do them best) and the
fallback for every op we do not lower."""
from __future__ import annotations

import torch

from .. import ir
from ..graph import Lazy, View
from .registry import out_val, register

aten = torch.ops.aten


def _to_ref(g, a):
    if isinstance(a, (View, Lazy)):
        return g.realize(a).ref()
    if isinstance(a, (list, tuple)):
        return type(a)(_to_ref(g, x) for x in a)
    return a


def call_aten(g, node, args, kwargs, kind, reason=""):
    val = node.meta.get("val")
    call_args = tuple(_to_ref(g, a) for a in args)
    call_kwargs = {k: _to_ref(g, v) for k, v in kwargs.items()}
    origins = (node.name,)
    common = dict(
        device=g.device, target=node.target, args=call_args, kwargs=call_kwargs,
        origins=origins, origin_ops=g.ops_of(origins), kind=kind, reason=reason,
    )
    if isinstance(val, torch.Tensor):
        buf = g.register(ir.ExternCall(name=g.new_name(), size=tuple(val.shape), stride=tuple(val.stride()), dtype=val.dtype, **common))
        return View(buf, buf.size, buf.stride, 0)
    if isinstance(val, (list, tuple)):
        parent = g.register(ir.ExternCall(name=g.new_name(), size=(), stride=(), dtype=torch.float32, outputs=len(val), **common))
        outs = []
        for k, v in enumerate(val):
            if isinstance(v, torch.Tensor):
                m = g.register(ir.MultiOutput(name=g.new_name(), size=tuple(v.shape), stride=tuple(v.stride()), dtype=v.dtype, device=g.device, parent=parent, item=k))
                outs.append(View(m, m.size, m.stride, 0))
            else:
                outs.append(None)
        return tuple(outs)
    raise NotImplementedError(f"{node.target} returns {type(val).__name__}, which cannot be lowered or called")


def fallback(g, node, args, kwargs, reason):
    return call_aten(g, node, args, kwargs, "fallback", reason)


@register(aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default, aten.convolution.default)
def extern(g, node, *args, **kwargs):
    out_val(node)
    return call_aten(g, node, args, kwargs, "extern")
