"""ATen op -> loop IR. `LOWERINGS` maps an op (overload or packet) to a function
(graph, node, *args, **kwargs) -> TensorValue (or a tuple of them). Any op with
no entry, or whose lowering declines with `Unsupported` (or fails), runs through
ATen as a fallback: always correct, and listed in the graph's record."""
from __future__ import annotations

import torch
from torch.utils._python_dispatch import _disable_current_modes

from .. import ir
from ..decompositions import CONVERTED_SCALARS, overflowing_scalar
from ..graph import Lazy
from .registry import LOWERINGS, Unsupported, register  # noqa: F401
from . import pointwise, reduction, views, indexing, extern, prims, sorting, randomness  # noqa: F401  (fill the registry)
from .extern import call_aten, device_copy, fallback, foreign_inputs, node_device

aten = torch.ops.aten


def lower_node(graph, node, args, kwargs):
    """Kernels only touch memory on the graph's device: an op on tensors that
    computes on another device, or copies between devices, runs in ATen; a tensor
    in memory on another device read by one of ours (a 0-d CPU tensor, CPU
    indices) is copied over first."""
    out, foreign = node_device(graph, node), foreign_inputs(graph, node)
    if node.target is aten.lift_fresh_copy.default and foreign:  # x[mask] = 0.0 on a GPU: a CPU constant
        folded = scalar_constant(graph, node.args[0])
        if folded is not None:
            return folded
    copies = node.target in (aten._to_copy.default, aten.copy.default)
    elsewhere = out is not None and out != graph.device and (bool(node.all_input_nodes) or _stays_there(graph, node, out))
    if elsewhere or (foreign and copies):
        graph.crosses_devices = True
        if elsewhere:
            graph.elsewhere.add(node)
        reason = f"on {out}, across devices" if copies else f"on {out}; the graph's kernels run on {graph.device}"
        return call_aten(graph, node, args, kwargs, "extern" if copies else "fallback", reason)
    if foreign:
        folded = {a: scalar_constant(graph, a) for a in foreign}
        graph.crosses_devices |= any(v is None for v in folded.values())
        args, kwargs = graph.args_with(node, {a: device_copy(graph, a) if v is None else v for a, v in folded.items()})
    # an op registered by name (prims.fma: TorchInductor's prim, there once Dynamo imports it)
    fn = (LOWERINGS.get(node.target) or LOWERINGS.get(getattr(node.target, "overloadpacket", None))
          or LOWERINGS.get(str(node.target)))
    odd = _dtype_without_kernels(node)
    if odd is not None:
        return fallback(graph, node, args, kwargs, reason=f"{odd} tensors: no kernels of ours")
    if fn is None:
        return fallback(graph, node, args, kwargs, reason="no lowering")
    big = overflowing_scalar(node.target, node.args, node.kwargs, node.meta["val"].dtype) if node.target in CONVERTED_SCALARS else None
    if big is not None:  # ATen raises, as in eager; a kernel would wrap or round it
        return fallback(graph, node, args, kwargs, reason=f"{big} overflows {node.meta['val'].dtype}")
    try:
        return fn(graph, node, *args, **kwargs)
    except Unsupported as e:
        return fallback(graph, node, args, kwargs, reason=str(e))
    except Exception as e:  # a lowering bug must not break compilation: ATen runs it, the record says why
        return fallback(graph, node, args, kwargs, reason=f"lowering failed: {type(e).__name__}: {e}")


def _stays_there(graph, node, device) -> bool:
    """Whether a tensor made from nothing on another device (torch.zeros(3) in a
    GPU graph) must be made there: returned, or read by an op there. Else it is
    a constant expression of our kernels (torch.zeros(()) added to a GPU tensor)."""
    return graph.returned(node) or any(node_device(graph, u) == device for u in node.users)


def scalar_constant(graph, fx_node):
    """A one-element constant of the graph held on another device (torch.tensor(0.0)
    in the code, on the CPU): its value, known now, read as a constant of the
    kernels (no copy to the graph's device). None for any other value."""
    value = getattr(graph.gm, fx_node.target, None) if fx_node.op == "get_attr" else None
    if not isinstance(value, torch.Tensor) or value.numel() != 1 or value.dtype not in ir.KERNEL_DTYPES:
        return None
    with _disable_current_modes():  # compiling runs under fake tensors; the constant is real
        number = value.item()
    return Lazy(tuple(value.shape), value.dtype, lambda idx: ir.const(number, value.dtype), (fx_node.name,))


def _dtype_without_kernels(node) -> torch.dtype | None:
    """A dtype of the node's tensors (its results, its inputs) that no kernel of ours handles."""
    vals = [node.meta.get("val")] + [a.meta.get("val") for a in node.all_input_nodes]
    for v in vals:
        for t in v if isinstance(v, (list, tuple)) else [v]:
            if isinstance(t, torch.Tensor) and t.dtype not in ir.KERNEL_DTYPES:
                return t.dtype
    return None
