"""Calls into ATen: externs (mm, conv, attention: cuBLAS/cuDNN/ATen do them best)
and the fallback for every op we do not lower."""
from __future__ import annotations

import operator

import torch
import torch.utils._pytree as pytree

from .. import ir
from ..graph import Lazy, View
from ..index import contiguous_strides, is_dense
from .registry import make_pointwise, out_val, register, upcast

aten = torch.ops.aten


def _to_ref(g, a, fx=None):
    """The tensor argument for an ATen call. A computed value is realized in the
    layout eager had (fx: the FX argument): some ops (attention, convolution)
    stride their outputs like their inputs, and we read those outputs with the
    strides the graph recorded."""
    if isinstance(a, Lazy):
        view = g.view_of_realized(a)
        if view is not None:
            return view.ref()
        val = fx.meta.get("val") if isinstance(fx, torch.fx.Node) else None
        dense = isinstance(val, torch.Tensor) and tuple(val.shape) == a.size and is_dense(val.shape, val.stride())
        return g.realize(a, tuple(val.stride()) if dense else None).ref()
    if isinstance(a, View):
        return a.ref()
    if isinstance(a, (list, tuple)):
        fxs = fx if isinstance(fx, (list, tuple)) and len(fx) == len(a) else [None] * len(a)
        return type(a)(_to_ref(g, x, f) for x, f in zip(a, fxs))
    return a


def call_aten(g, node, args, kwargs, kind, reason="", target=None, fx_args=None):
    """`target`, `fx_args`: the op to call instead of the node's own, and its FX
    arguments (addmm called as mm)."""
    val = _value_of(node)
    call_args = tuple(_to_ref(g, a, f) for a, f in zip(args, node.args if fx_args is None else fx_args))
    call_kwargs = {k: _to_ref(g, v, node.kwargs.get(k)) for k, v in kwargs.items()}
    origins = (node.name,)
    common = dict(
        device=g.device, target=target or node.target, args=call_args, kwargs=call_kwargs,
        origins=origins, origin_ops=g.ops_of(origins), kind=kind, reason=reason,
    )
    if isinstance(val, torch.Tensor):
        buf = g.register(ir.ExternCall(name=g.new_name(), size=tuple(val.shape), stride=tuple(val.stride()), dtype=val.dtype, **common))
        return View(buf, buf.size, buf.stride, 0)
    if isinstance(val, (list, tuple)):
        tensors = [v for v in pytree.tree_leaves(val) if isinstance(v, torch.Tensor)]
        parent = g.register(ir.ExternCall(name=g.new_name(), size=(), stride=(), dtype=torch.float32,
                                          outputs=len(tensors), sequence=True, **common))

        def element(v, path):
            if isinstance(v, (list, tuple)):  # a list inside the tuple (_amp_foreach_non_finite_check_and_unscale)
                return tuple(element(w, path + (k,)) for k, w in enumerate(v))
            if not isinstance(v, torch.Tensor):
                return None
            m = g.register(ir.MultiOutput(name=g.new_name(), size=tuple(v.shape), stride=tuple(v.stride()), dtype=v.dtype,
                                          device=g.device, parent=parent, path=path))
            return View(m, m.size, m.stride, 0)

        return element(val, ())
    if val is None:  # a check (F.one_hot's range check)
        run_for_effect(g, node, common["target"], call_args, call_kwargs, kind, reason)
        return None
    raise NotImplementedError(f"{node.target} returns {type(val).__name__}, which cannot be lowered or called")


def _value_of(node):
    """The node's traced value, or for a higher-order op AOTAutograd left without
    one, what hop_value finds."""
    val = node.meta.get("val")
    if val is None and isinstance(node.target, torch._ops.HigherOrderOperator):
        return hop_value(node)
    return val


def hop_value(node):
    """The value of a higher-order op that AOTAutograd leaves untraced, or None
    where it cannot be told: the tuple its getitem users read
    (run_and_save_rng_state: a checkpointed region's random numbers and the
    generator state it saves), or what the op it replays gives
    (run_with_rng_state, in the backward), computed on meta tensors."""
    items = {u.args[1]: u.meta.get("val") for u in node.users if u.target is operator.getitem}
    if items and len(items) == len(node.users):
        return tuple(items.get(k) for k in range(max(items) + 1))
    if node.target is torch.ops.higher_order.run_with_rng_state:
        def meta(a):
            v = a.meta.get("val") if isinstance(a, torch.fx.Node) else None
            return torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else a

        op, args = node.args[1], node.args[2:]
        return op(*map(meta, args), **{k: meta(v) for k, v in node.kwargs.items()})
    return None


def run_for_effect(g, node, target, args, kwargs=None, kind="extern", reason="") -> None:
    """A call run for what it does, not for a value (an assert): it runs where
    eager ran it, and may raise. A computed argument is realized first (it takes
    a name)."""
    args = tuple(_to_ref(g, a) for a in args)  # before the call takes its name: its arguments come first
    origins = (node.name,)
    g.effects.append(g.register(ir.ExternCall(
        name=g.new_name(), size=(), stride=(), dtype=torch.float32, outputs=0, device=g.device, target=target,
        args=args, kwargs=dict(kwargs or {}), origins=origins, origin_ops=g.ops_of(origins), kind=kind, reason=reason)))


def _on(g, device: torch.device) -> torch.device:
    """`device`, as the graph names it where it is the graph's (cuda is cuda:0)."""
    same = device.type == g.device.type and device.index in (None, g.device.index)
    return g.device if same else device


def node_device(g, node) -> torch.device | None:
    """The device of the node's (first) tensor result; None without one."""
    val = node.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    return next((_on(g, v.device) for v in vals if isinstance(v, torch.Tensor)), None)


def foreign_inputs(g, node) -> list:
    """The node's inputs in memory on another device than the graph's: inputs and
    constants of another, and results of ops that ATen ran there (a tensor created
    there, torch.zeros(()), is a constant expression to us, in no memory)."""
    def elsewhere(a):
        v = a.meta.get("val")
        placed = a.op in ("placeholder", "get_attr") and isinstance(v, torch.Tensor) and _on(g, v.device) != g.device
        return placed or a in g.elsewhere

    return [a for a in node.all_input_nodes if elsewhere(a)]


def device_copy(g, fx_node) -> View:
    """The value of `fx_node` (on another device) copied to the graph's, once a call."""
    if fx_node not in g.device_copies:
        val = fx_node.meta["val"]
        buf = g.register(ir.ExternCall(
            name=g.new_name(), size=tuple(val.shape), stride=contiguous_strides(tuple(val.shape)), dtype=val.dtype,
            device=g.device, target=aten._to_copy.default, args=(_to_ref(g, g.env[fx_node], fx_node),),
            kwargs=dict(device=g.device, memory_format=torch.contiguous_format), origins=(fx_node.name,),
            origin_ops=g.ops_of((fx_node.name,)), kind="extern", reason=f"{val.device} to {g.device}"))
        g.device_copies[fx_node] = View(buf, buf.size, buf.stride, 0)
    return g.device_copies[fx_node]


def fallback(g, node, args, kwargs, reason):
    return call_aten(g, node, args, kwargs, "fallback", reason)


@register(aten.addmm.default)
def addmm(g, node, bias, a, b, *, beta=1, alpha=1):
    """Where only pointwise ops consume the product, call mm and add the bias
    in their kernel, as TorchInductor does: bias and activation then cost one
    kernel, and cuBLAS runs its plain GEMM. Otherwise one ATen addmm."""
    users = list(node.users)
    only_pointwise = users and all(
        isinstance(u.target, torch._ops.OpOverload) and torch.Tag.pointwise in u.target.tags for u in users
    )
    if beta == 1 and alpha == 1 and only_pointwise and getattr(bias, "ndim", 0) >= 1:
        product = call_aten(g, node, (a, b), {}, "extern", target=aten.mm.default, fx_args=node.args[1:3])
        cdt = upcast(out_val(node).dtype)
        return make_pointwise(g, node, lambda p, c: ir.op("add", p, c, dtype=cdt), [product, bias])
    return extern(g, node, bias, a, b, beta=beta, alpha=alpha)


@register(aten.mm.default, aten.bmm.default, aten.baddbmm.default, aten.convolution.default,
          aten.convolution_backward.default,
          aten._scaled_dot_product_flash_attention_for_cpu.default,
          aten._scaled_dot_product_flash_attention_for_cpu_backward.default,
          aten._scaled_dot_product_flash_attention.default, aten._scaled_dot_product_flash_attention_backward.default,
          aten._scaled_dot_product_efficient_attention.default,
          aten._scaled_dot_product_efficient_attention_backward.default,
          # cuDNN's, which SDPA picks for 16-bit attention on an H100/H200 (torch 2.11)
          aten._scaled_dot_product_cudnn_attention.default,
          aten._scaled_dot_product_cudnn_attention_backward.default)
def extern(g, node, *args, **kwargs):
    out_val(node)
    return call_aten(g, node, args, kwargs, "extern")
