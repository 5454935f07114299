"""ATen op -> loop IR. `LOWERINGS` maps an op (overload or packet) to a function
(graph, node, *args, **kwargs) -> TensorValue (or a tuple of them). Any op with
no entry, or whose lowering declines with `Unsupported` (or fails), runs through
ATen as a fallback: always correct, and listed in the graph's record."""
from __future__ import annotations

from .registry import LOWERINGS, Unsupported, register  # noqa: F401
from . import pointwise, reduction, views, indexing, extern, prims  # noqa: F401  (fill the registry)
from .extern import fallback


def lower_node(graph, node, args, kwargs):
    fn = LOWERINGS.get(node.target) or LOWERINGS.get(getattr(node.target, "overloadpacket", None))
    if fn is None:
        return fallback(graph, node, args, kwargs, reason="no lowering")
    try:
        return fn(graph, node, *args, **kwargs)
    except Unsupported as e:
        return fallback(graph, node, args, kwargs, reason=str(e))
    except Exception as e:  # a lowering bug must not break compilation: ATen runs it, the record says why
        return fallback(graph, node, args, kwargs, reason=f"lowering failed: {type(e).__name__}: {e}")
