"""Calls Dynamo splits apart, joined again before AOTAutograd.

Dynamo rewrites a few calls into pieces (its `enable_dynamo_decompositions`, which
"can affect numerics for non-inductor backends"):

    torch.addcdiv(a, t1, t2, value=v)   a + (t1 / t2) * v
    a.addcdiv_(t1, t2, value=v)         a.copy_(fma(t1 / t2, v, a))
    a.addcmul_(t1, t2, value=v)         a.copy_(fma(t1 * t2, v, a))

We round each op to its dtype, as eager does for ops written apart, so the pieces
of a 16-bit call rounded where eager's one kernel did not, and on the CPU they
computed in another order than eager's kernel. The pieces of one call carry one
stack trace, to the column (Python marks the call's span); ops a user wrote apart
each carry their own.
"""
from __future__ import annotations

import numbers

import torch
from torch import fx


def rejoin_split_calls(gm: fx.GraphModule) -> fx.GraphModule:
    """gm with each split call (above) one call again; gm itself, changed in place."""
    joined = False
    for node in list(gm.graph.nodes):
        call = _split_call(node)
        if call is None:
            continue
        target, args, value, pieces = call
        with gm.graph.inserting_before(node):
            whole = gm.graph.call_function(target, args, {"value": value})
        whole.meta = dict(node.meta)
        node.replace_all_uses_with(whole)
        for piece in [node, *pieces]:
            gm.graph.erase_node(piece)
        joined = True
    if joined:
        gm.recompile()
    return gm


def _split_call(node: fx.Node):
    """(torch.addcdiv or torch.addcmul, (a, t1, t2), value, [the inner pieces]) where
    `node` is the last piece of a split call, else None."""
    if node.op != "call_function" or node.kwargs:
        return None
    if str(node.target) == "prims.fma.default" and len(node.args) == 3:
        inner, value, a = node.args
        for op, whole in ((torch.div, torch.addcdiv), (torch.mul, torch.addcmul)):
            if _piece_of(inner, op, node):
                return _checked(whole, (a, *inner.args), value, [inner])
    if node.target is torch.add and len(node.args) == 2:
        a, scaled = node.args
        if _piece_of(scaled, torch.mul, node) and len(scaled.args) == 2 and _piece_of(scaled.args[0], torch.div, node):
            quotient, value = scaled.args
            return _checked(torch.addcdiv, (a, *quotient.args), value, [scaled, quotient])
    return None


def _piece_of(x, op, last: fx.Node) -> bool:
    """x is `op`'s call of two operands, read only by the next piece, from the
    same source span as the call's last piece."""
    trace = last.meta.get("stack_trace")
    return (isinstance(x, fx.Node) and x.op == "call_function" and x.target is op and not x.kwargs
            and len(x.args) == 2 and len(x.users) == 1 and bool(trace) and x.meta.get("stack_trace") == trace)


def _checked(target, args, value, pieces):
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
    return target, args, value, pieces
