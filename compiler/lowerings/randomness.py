"""Random numbers: rand, randn, bernoulli (and through their decompositions
dropout) are pointwise values of a counter-based generator, Philox4x32-10
as Triton's tl.randint, at (a seed drawn once a call, the element's place among
the graph's random numbers). A value is then the same wherever it is computed,
so it fuses into any kernel, and into several, as any pointwise value does. The
seed comes from torch's generator of the graph's device (torch.manual_seed
repeats a run); the numbers are not eager's, whose generators differ."""
from __future__ import annotations

import math

import sympy
import torch

from .. import ir
from ..graph import Lazy, View
from ..index import contiguous_strides, linear_index
from .extern import node_device
from .registry import Unsupported, origins_of, out_val, register

aten = torch.ops.aten

# significant bits of a uniform value of each dtype: k * 2^-bits for k < 2^bits,
# all exact in it and below 1, as ATen's uniform
BITS = {torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
# a graph's random numbers are numbered by int32 offsets
MAX_NUMBERS = 2**31 - 1
F32 = torch.float32


@register(aten.rand.default)
def rand(g, node, size, **kwargs):
    return _random(g, node, lambda u: u(BITS[out_val(node).dtype]))


@register(aten.rand_like.default)
def rand_like(g, node, x, **kwargs):
    return rand(g, node, None)


@register(aten.randn.default)
def randn(g, node, size, **kwargs):
    """Normal values by Box-Muller, of two uniform numbers each."""
    def normal(u):
        radius = ir.op("sqrt", ir.op("mul", ir.op("log", ir.op("sub", ir.const(1.0, F32), u(24), dtype=F32), dtype=F32),
                                     ir.const(-2.0, F32), dtype=F32), dtype=F32)  # 1 - u in (0, 1]
        angle = ir.op("mul", u(24), ir.const(2 * math.pi, F32), dtype=F32)
        return ir.op("mul", radius, ir.op("cos", angle, dtype=F32), dtype=F32)
    return _random(g, node, normal, per_value=2)


@register(aten.randn_like.default)
def randn_like(g, node, x, **kwargs):
    return randn(g, node, None)


@register(aten.bernoulli.p)
def bernoulli_p(g, node, x, p=0.5, *, generator=None):
    """1 with probability p, else 0, in x's shape and dtype (x's values unread)."""
    if generator is not None:
        raise Unsupported("bernoulli with a generator of its own")
    return _random(g, node, lambda u: ir.op("lt", u(24), ir.const(float(p), F32), dtype=torch.bool))


def _random(g, node, value, per_value: int = 1) -> Lazy:
    """node's result: value(u) at each element, where each call u(bits) is a
    further uniform number in [0, 1), a multiple of 2^-bits (float32)."""
    val, device = out_val(node), node_device(g, node)
    if val.dtype not in BITS:
        raise Unsupported(f"random {val.dtype} numbers (float32, float16 and bfloat16 only)")
    if device != g.device:
        raise Unsupported(f"random numbers on {device}, where the graph's kernels run on {g.device}")
    size, n = tuple(val.shape), math.prod(val.shape) * per_value
    first = g.random_numbers
    if first + n > MAX_NUMBERS:
        raise Unsupported(f"more than {MAX_NUMBERS} random numbers in one graph")
    g.random_numbers += n
    seed, stride = call_seed(g, node), contiguous_strides(size)

    def body(idx):
        place = linear_index(idx, stride) * per_value + first
        taken = iter(range(per_value))

        def uniform(bits: int) -> ir.Expr:
            offset = ir.index_value(place + next(taken))
            word = ir.op("philox", seed.load([sympy.Integer(0)]), offset, dtype=torch.int64)  # in [0, 2^32)
            top = ir.op("rshift", word, ir.const(32 - bits, torch.int64), dtype=torch.int64)
            return ir.op("mul", ir.cast(top, F32), ir.const(2.0 ** -bits, F32), dtype=F32)

        return ir.cast(value(uniform), val.dtype)

    return Lazy(size, val.dtype, body, origins_of(g, node))


def call_seed(g, node) -> View:
    """The graph's seed, drawn from torch's generator once a call (first asked for by `node`)."""
    if g.random_seed is None:
        origins = (node.name,)
        buf = g.register(ir.ExternCall(
            name=g.new_name(), size=(1,), stride=(1,), dtype=torch.int64, device=g.device,
            target=aten.randint.low, args=(0, MAX_NUMBERS, [1]), kwargs=dict(dtype=torch.int64, device=g.device),
            origins=origins, origin_ops=g.ops_of(origins), kind="extern", reason="the seed of this call's random numbers"))
        g.random_seed = View(buf, buf.size, buf.stride, 0)
    return g.random_seed
