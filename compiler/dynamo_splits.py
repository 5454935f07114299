"""Calls Dynamo splits apart, joined again before AOTAutograd.

Dynamo rewrites a few calls into pieces (its `enable_dynamo_decompositions`, which
"can affect numerics for non-inductor backends"):

    torch.addcdiv(a, t1, t2, value=v)   a + (t1 / t2) * v
    a.addcdiv_(t1, t2, value=v)         a.copy_(fma(t1 / t2, v, a))   torch 2.11: a.add_((t1 / t2) * v)
    a.addcmul_(t1, t2, value=v)         a.copy_(fma(t1 * t2, v, a))   torch 2.11: a.add_(t1 * t2 * v)

We round each op to its dtype, as eager does for ops written apart, so the pieces
of a 16-bit call rounded where eager's one kernel did not, and they computed in
another order than eager's kernel. The pieces of one call carry one stack trace,
to the column where Python marks the call's span (3.11 on); ops a user wrote apart
each carry their own.
"""
from __future__ import annotations

import numbers
import operator

import torch
from torch import fx

_MUL = (torch.mul, operator.mul)
_DIV = (torch.div, operator.truediv)


def rejoin_split_calls(gm: fx.GraphModule) -> fx.GraphModule:
    """gm with each split call (above) one call again; gm itself, changed in place."""
    joined = False
    for node in list(gm.graph.nodes):
        call = _split_call(node)
        if call is None:
            continue
        kind, target, args, value, pieces = call
        with gm.graph.inserting_before(node):
            whole = gm.graph.create_node(kind, target, args, {"value": value})
        whole.meta = dict(node.meta)
        node.replace_all_uses_with(whole)
        for piece in [node, *pieces]:
            gm.graph.erase_node(piece)
        joined = True
    if joined:
        gm.recompile()
    return gm


def _split_call(node: fx.Node):
    """(node kind, target, (a, t1, t2), value, [the inner pieces]) of the call whose
    last piece `node` is, else None."""
    if node.kwargs or node.op not in ("call_function", "call_method"):
        return None
    if str(node.target) == "prims.fma.default" and len(node.args) == 3:  # a.copy_(fma(t1 op t2, v, a))
        inner, value, a = node.args
        for ops, whole in ((_DIV, torch.addcdiv), (_MUL, torch.addcmul)):
            if _piece_of(inner, ops, node):
                return _checked("call_function", whole, (a, *inner.args), value, [inner])
        return None
    in_place = node.op == "call_method" and node.target == "add_"
    if len(node.args) != 2 or not (in_place or node.op == "call_function" and node.target is torch.add):
        return None
    a, scaled = node.args  # a + (t1 op t2) * v
    if not _piece_of(scaled, _MUL, node):
        return None
    inner, value = scaled.args
    for ops, name in ((_DIV, "addcdiv"), (_MUL, "addcmul")):
        if _piece_of(inner, ops, node) and (in_place or name == "addcdiv"):
            kind, target = ("call_method", name + "_") if in_place else ("call_function", getattr(torch, name))
            return _checked(kind, target, (a, *inner.args), value, [scaled, inner])
    return None


def _piece_of(x, ops, last: fx.Node) -> bool:
    """x is a call of one of `ops` on two operands, read only by the next piece, from the
    same source span as the call's last piece."""
    trace = last.meta.get("stack_trace")
    return (isinstance(x, fx.Node) and x.op == "call_function" and x.target in ops and not x.kwargs
            and len(x.args) == 2 and len(x.users) == 1 and bool(trace) and x.meta.get("stack_trace") == trace)


def _checked(kind, target, args, value, pieces):
    """The joined call, where its value is a Python number and its three tensors
    share one floating dtype (ATen's addcdiv refuses integers; mixed dtypes would
    promote otherwise); else None. A tensor value stays split: ATen's call needs a number."""
    if not isinstance(value, numbers.Number) or isinstance(value, bool):
        return None
    vals = [a.meta.get("example_value") if isinstance(a, fx.Node) else None for a in args]
    if not all(isinstance(v, torch.Tensor) for v in vals) or len({v.dtype for v in vals}) != 1:
        return None
    if not vals[0].dtype.is_floating_point:
        return None
    return kind, target, args, value, pieces
