from __future__ import annotations

from typing import Callable

import torch

from .. import ir
from ..ir import upcast  # noqa: F401  (the lowerings import it from here)
from ..graph import Lazy, TensorValue

LOWERINGS: dict = {}


class Unsupported(Exception):
    """A lowering declines this call (an argument it does not handle): fall back."""


def register(*ops) -> Callable:
    def deco(fn):
        for op in ops:
            LOWERINGS[op] = fn
        return fn

    return deco


def out_val(node):
    val = node.meta.get("val")
    if val is None:
        raise Unsupported("no shape information on the node")
    return val


def is_tensor(x) -> bool:
    return isinstance(x, TensorValue)


def broadcast_load(value, out_size, index, dtype=None) -> ir.Expr:
    """Load `value` (TensorValue or python scalar) broadcast to `out_size`."""
    if not is_tensor(value):
        return ir.const(value, dtype or _scalar_dtype(value))
    nd = value.ndim
    lead = len(out_size) - nd
    idx = [0 if value.size[k] == 1 and out_size[lead + k] != 1 else index[lead + k] for k in range(nd)]
    return value.load(idx)


def _scalar_dtype(v):
    if isinstance(v, bool):
        return torch.bool
    if isinstance(v, int):
        return torch.int64
    return torch.float32


def promote(*values) -> torch.dtype:
    """The dtype a binary op computes in (tensor dtypes first, scalars by category)."""
    tensors = [v.dtype for v in values if is_tensor(v)]
    dtype = tensors[0] if tensors else _scalar_dtype(values[0])
    for d in tensors[1:]:
        dtype = torch.promote_types(dtype, d)

    def cat(d):
        return 0 if d == torch.bool else 2 if d.is_floating_point else 1

    for v in values:
        if not is_tensor(v) and cat(_scalar_dtype(v)) > cat(dtype):
            dtype = torch.get_default_dtype() if isinstance(v, float) else torch.int64
    return dtype


def origins_of(graph, node, *values) -> tuple[str, ...]:
    out = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out.extend(origins_of(graph, node, *v))
        elif isinstance(v, Lazy):
            out.extend(v.origins)
    out.append(node.name)
    return tuple(dict.fromkeys(out))


def make_pointwise(graph, node, fn, inputs, compute_dtype=None, out_dtype=None, size=None) -> Lazy:
    """A Lazy computing fn(*loads) with broadcasting and dtype handling.

    compute_dtype: what the loads are cast to before fn (default: the output
    dtype, upcast), or a list with one dtype per input; fn returns an Expr
    that is cast to the output dtype."""
    val = out_val(node) if (out_dtype is None or size is None) else None
    out_dtype = out_dtype or val.dtype
    size = tuple(size if size is not None else val.shape)
    cdt = compute_dtype or upcast(out_dtype)
    cdts = list(cdt) if isinstance(cdt, (list, tuple)) else [cdt] * len(inputs)

    def body(index):
        loads = [ir.cast(broadcast_load(v, size, index, t), t) for v, t in zip(inputs, cdts)]
        return ir.cast(fn(*loads), out_dtype)

    return Lazy(size, out_dtype, body, origins_of(graph, node, *inputs))
