"""Calls in Dynamo's graph that ATen refuses but that AOTAutograd would compute:
the backend runs such a graph uncompiled, so it raises as eager does."""
from __future__ import annotations

import contextlib
import operator

import torch

from .graph import share_memory
from .index import is_dense
from .ir import overflows

# `a += b` and the like on tensors, as Dynamo records them
_IN_PLACE_OPERATORS = {operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                       operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor,
                       operator.ilshift, operator.irshift}


def refused_by_aten(gm: torch.fx.GraphModule) -> str | None:
    """Why ATen would raise at a call in the graph, or None."""
    for n in gm.graph.nodes:
        reason = _hardshrink_overflows(n) or _writes_over_its_inputs(n)
        if reason:
            return reason
    return None


def _hardshrink_overflows(n: torch.fx.Node) -> str | None:
    """hardshrink with a lambda its input's dtype cannot hold: eager raises "value
    cannot be converted"; torch._refs' decomposition, applied at the Autograd key
    before any table of ours, gave zeros."""
    if (n.op, n.target) not in (("call_function", torch.hardshrink), ("call_method", "hardshrink")):
        return None
    x = _value(n.args[0])
    lambd = n.args[1] if len(n.args) > 1 else n.kwargs.get("lambd", 0.5)
    if isinstance(x, torch.Tensor) and overflows(lambd, x.dtype):
        return f"hardshrink's lambda {lambd} overflows {x.dtype}"
    return None


def _writes_over_its_inputs(n: torch.fx.Node) -> str | None:
    """An elementwise in-place call (`a[1:].add_(a[:-1])`, `a[1:] += a[:-1]`,
    `copy_`, `a[1:] = a[:-1]`) whose written-to tensor overlaps itself, or in part
    another input: ATen's TensorIterator refuses it; the functional graph
    AOTAutograd makes of it reads the inputs' old values and returned a result."""
    out = _written(n)
    if out is None:
        return None
    if torch._debug_has_internal_overlap(out) == 1:  # 1: yes; 2: too hard to tell, which ATen lets through
        return f"{_name(n)} writes a tensor more than one of whose elements share a memory location"
    for other in n.all_input_nodes[1:]:
        v = _value(other)
        if isinstance(v, torch.Tensor) and _overlap(out, v) == "partial":
            return f"{_name(n)} writes a tensor that overlaps its input {other.name} in part"
    return None


def _written(n: torch.fx.Node) -> torch.Tensor | None:
    """The tensor an elementwise in-place call writes (a fake tensor of Dynamo's):
    its first argument, or the view `a[i]` that `a[i] = v` copies v into where i
    is basic indexing (slices, ints, None, ...; a tensor index is index_put_)."""
    if n.op == "call_function" and n.target is operator.setitem:
        base, index = _value(n.args[0]), n.args[1]
        parts = index if isinstance(index, tuple) else (index,)
        if not isinstance(base, torch.Tensor) or not all(
                isinstance(p, (int, slice, type(None), type(Ellipsis))) and not isinstance(p, bool) for p in parts):
            return None
        with getattr(base, "fake_mode", None) or contextlib.nullcontext():  # Dynamo's values are fake
            return base[index]
    out = _value(n.args[0]) if _elementwise_in_place(n) else None
    return out if isinstance(out, torch.Tensor) else None


def _elementwise_in_place(n: torch.fx.Node) -> bool:
    if n.op == "call_function":
        return n.target in _IN_PLACE_OPERATORS
    if n.op != "call_method" or not n.target.endswith("_") or n.target.startswith("_"):
        return False
    if n.target == "copy_":
        return True
    packet = getattr(torch.ops.aten, n.target, None)
    return packet is not None and any(
        torch.Tag.pointwise in getattr(packet, overload).tags for overload in packet.overloads())


def _overlap(a: torch.Tensor, b: torch.Tensor) -> str:
    """ATen's get_overlap_status of two tensors: "full", "partial", "no", or "too hard"
    (either not dense, which ATen lets through)."""
    if a is b:
        return "full"
    if a.numel() == 0 or b.numel() == 0:
        return "no"
    if not (is_dense(a.shape, a.stride()) and is_dense(b.shape, b.stride())):
        return "too hard"
    if not share_memory(a, b):
        return "no"
    a0, b0 = a.storage_offset() * a.itemsize, b.storage_offset() * b.itemsize
    a1, b1 = a0 + a.numel() * a.itemsize, b0 + b.numel() * b.itemsize
    if (a0, a1) == (b0, b1):
        return "full" if a.stride() == b.stride() else "partial"
    return "partial" if a0 < b1 and b0 < a1 else "no"


def _value(arg):
    return arg.meta.get("example_value") if isinstance(arg, torch.fx.Node) else None


def _name(n: torch.fx.Node) -> str:
    return n.target if isinstance(n.target, str) else f"operator.{n.target.__name__}"
