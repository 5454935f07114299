"""Random numbers: rand, randn, randint, bernoulli, uniform_, normal_ and
exponential_ (and through them dropout) are pointwise values of a counter-based
generator, Philox4x32-10, at (a seed drawn once a call, the element's place among
the graph's random numbers): number n is word n % 4 of counter n // 4, as Triton's
tl.randint4x gives them, so a block of consecutive numbers takes one Philox call
for every 4 (codegen.triton's _philox_block). A value is then the same
wherever it is computed, so it fuses into any kernel, and into several, as any
pointwise value does. The seed comes from torch's generator of the graph's
device (torch.manual_seed repeats a run); the numbers are not eager's, whose
generators differ."""
from __future__ import annotations

import math

import sympy
import torch

from .. import ir
from ..graph import Lazy, View
from ..index import contiguous_strides, linear_index
from . import reduction
from .extern import node_device, run_for_effect
from .registry import Unsupported, broadcast_load, is_tensor, make_pointwise, origins_of, out_val, register

aten = torch.ops.aten

# significand bits of each dtype a uniform value is drawn in
BITS = {torch.float64: 53, torch.float32: 24, torch.float16: 11, torch.bfloat16: 8}
# a graph's random numbers are numbered by int32 offsets
MAX_NUMBERS = 2**31 - 1
F32, F64 = torch.float32, torch.float64


@register(aten.rand.default)
def rand(g, node, size, **kwargs):
    """Uniform in [0, 1): a multiple of 2^-53 in float64, of 2^-24 in float32, its
    bits past a 16-bit dtype's significand cut (rounded down: all of its values
    below 1 can come, none rounds up to 1)."""
    cut = 24 - BITS.get(out_val(node).dtype, 24)

    def value(draw):
        u = draw.uniform()
        if cut <= 0:
            return u
        bits = ir.bitcast(u, torch.int32)
        return ir.bitcast(ir.op("bitwise_and", bits, ir.const(-(1 << cut), torch.int32), dtype=torch.int32), F32)
    return _random(g, node, value)


@register(aten.rand_like.default)
def rand_like(g, node, x, **kwargs):
    return rand(g, node, None)


@register(aten.uniform.default)
def uniform(g, node, x, low=0.0, high=1.0, *, generator=None):
    """x's shape, uniform in [low, high) (x's values unread): one that rounds to
    high in x's dtype is low, as in ATen."""
    _own_generator(generator)
    _check(low <= high, f"uniform_ from {low} to {high}")
    dtype = out_val(node).dtype

    def value(draw):
        t = draw.dtype
        v = ir.cast(ir.cast(_affine(draw.uniform(), high - low, low), dtype), t)
        return ir.op("where", ir.op("ge", v, ir.const(float(high), t), dtype=torch.bool), ir.const(float(low), t), v,
                     dtype=t)
    return _random(g, node, value)


@register(aten.randn.default)
def randn(g, node, size, **kwargs):
    return _random(g, node, _normal, per_value=2)


@register(aten.randn_like.default)
def randn_like(g, node, x, **kwargs):
    return randn(g, node, None)


@register(aten.normal_functional.default)
def normal(g, node, x, mean=0.0, std=1.0, *, generator=None):
    _own_generator(generator)
    return _random(g, node, lambda draw: _affine(_normal(draw), std, mean), per_value=2)


@register(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor, aten.normal.float_float)
def normal_of_tensors(g, node, mean, std=1.0, size=None, *, generator=None, **kwargs):
    """mean + std * a standard normal value, either of them a tensor (broadcast to
    the output) or a number. A negative std in a tensor is not refused (ATen's
    check reads std, a sync; nor do Inductor's decompositions refuse it): it draws
    as its absolute value does (a negative number std was refused in tracing)."""
    _own_generator(generator)
    tensors = [v for v in (mean, std) if is_tensor(v)]

    def value(draw, *loads):
        tensor_loads = iter(loads)
        m, s = (next(tensor_loads) if is_tensor(v) else ir.const(float(v), draw.dtype) for v in (mean, std))
        return _affine(_normal(draw), s, m)
    return _random(g, node, value, per_value=2, inputs=tensors)


@register(aten.log_normal.default)
def log_normal(g, node, x, mean=1.0, std=2.0, *, generator=None):
    """exp(mean + std * a standard normal value)."""
    _own_generator(generator)
    return _random(g, node, lambda draw: _same("exp", _affine(_normal(draw), std, mean)), per_value=2)


@register(aten.cauchy.default)
def cauchy(g, node, x, median=0.0, sigma=1.0, *, generator=None):
    """median + sigma * tan(pi * (u - 1/2)), as ATen's."""
    _own_generator(generator)
    angle = lambda draw: _num("mul", _num("sub", draw.uniform(), 0.5), math.pi)  # noqa: E731
    return _random(g, node, lambda draw: _affine(_same("tan", angle(draw)), sigma, median))


@register(aten.geometric.default)
def geometric(g, node, x, p, *, generator=None):
    """The number of tries up to the first success at chance p: ceil(log(u) /
    log(1 - p)), u in (0, 1), as ATen's (which takes p in (0, 1) only)."""
    _own_generator(generator)
    _check(0 < p < 1, f"geometric with p = {p}")
    tries = lambda draw: _num("mul", _same("log", draw.open_uniform()), 1 / math.log1p(-p))  # noqa: E731
    return _random(g, node, lambda draw: _same("ceil", tries(draw)))


@register(aten.exponential.default)
def exponential(g, node, x, lambd=1.0, *, generator=None):
    """-log(1 - u) / lambd, u in (0, 1) (never 0, never inf): what sampling by the
    Gumbel-max trick divides by (argmax(probs / exponential), gpt-fast's sample
    without a sync), where a 0 would pick an entry of probability 0."""
    _own_generator(generator)
    return _random(g, node, lambda draw: _exponential(draw, lambd))


@register(aten.multinomial.default)
def multinomial(g, node, probs, num_samples, replacement=False, *, generator=None):
    """One sample of each row: the argmax of p / e, e exponential (the exponential
    race: entry j wins with chance p_j / sum p, as ATen's own path for one sample),
    in one reduction kernel. Rows with a negative, infinite or NaN entry, or
    summing to 0, fail an assert (_assert_async: on a GPU a device-side assert, as
    eager's for the entries; eager finds a row of zeros with a sync)."""
    _own_generator(generator)
    if num_samples != 1:
        raise Unsupported("multinomial of more than one sample a row")
    if not probs.dtype.is_floating_point or probs.ndim not in (1, 2):
        raise Unsupported(f"multinomial of a {probs.ndim}-d {probs.dtype} tensor (ATen refuses it)")
    _check(0 < probs.size[-1] <= 2**24, f"multinomial over {probs.size[-1]} categories")
    sample = out_val(node)
    last = probs.ndim - 1
    dtype = F64 if probs.dtype == F64 else F32
    race = _random(g, node, lambda draw, p: ir.op("truediv", p, _exponential(draw), dtype=p.dtype),
                   inputs=[probs], val=torch.empty(probs.size, dtype=dtype, device="meta"))
    picks = reduction.reduce(g, node, race, [last], "argmax", torch.int64, tuple(sample.shape))
    _assert_a_distribution(g, node, probs, last, dtype)
    return picks


def _assert_a_distribution(g, node, probs, last: int, dtype: torch.dtype) -> None:
    """An assert, run with the call, that each row of probs is a distribution (row
    reductions beside the sampling one, then one over the rows), checked in dtype
    (float64 for float64 weights: a float32 would make 1e300 inf)."""
    rows = probs.size[:last] + (1,)
    entries = Lazy(probs.size, torch.bool, lambda idx: _a_chance(ir.cast(probs.load(idx), dtype)), probs.origins)
    chances = reduction.reduce(g, node, entries, [last], "all", torch.bool, rows)
    sums = reduction.reduce(g, node, probs, [last], "sum", dtype, rows)
    row_ok = Lazy(rows, torch.bool, lambda idx: ir.op("logical_and", chances.load(idx), ir.op(
        "gt", sums.load(idx), ir.const(0.0, dtype), dtype=torch.bool), dtype=torch.bool), probs.origins)
    both = reduction.reduce(g, node, row_ok, list(range(len(rows))), "all", torch.bool, ())
    message = "multinomial: probability tensor contains either `inf`, `nan` or element < 0, or a row sums to 0"
    run_for_effect(g, node, aten._assert_async.msg, (both, message),
                   reason="the check that the probabilities are a distribution")


def _a_chance(p: ir.Expr) -> ir.Expr:
    """Whether p is a chance: finite, not negative (NaN is not)."""
    finite = ir.op("logical_not", ir.op("isinf", p, dtype=torch.bool), dtype=torch.bool)
    return ir.op("logical_and", ir.op("ge", p, ir.const(0.0, p.dtype), dtype=torch.bool), finite, dtype=torch.bool)


@register(aten.bernoulli.p)
def bernoulli_p(g, node, x, p=0.5, *, generator=None):
    """1 with probability p, else 0, in x's shape and dtype (x's values unread)."""
    _own_generator(generator)
    _check(0 <= p <= 1, f"bernoulli with p = {p}")
    return _random(g, node, lambda draw: ir.op("lt", draw.uniform(), ir.const(float(p), draw.dtype), dtype=torch.bool))


@register(aten.bernoulli.Tensor)
def bernoulli_tensor(g, node, x, p, *, generator=None):
    """1 with probability p (a tensor, broadcast to x's shape), else 0, in x's dtype.
    A chance outside [0, 1] is not refused (ATen's check reads p, a sync; nor do
    Inductor's decompositions refuse it): below 0 it is 0, above 1 it is 1."""
    _own_generator(generator)
    return _random(g, node, lambda draw, p: ir.op("lt", draw.uniform(), p, dtype=torch.bool), inputs=[p])


@register(aten.rrelu_with_noise_functional.default)
def rrelu_with_noise(g, node, x, noise, lower=1 / 8, upper=1 / 3, training=False, generator=None):
    """RReLU in training: x * r where x <= 0, r uniform in [lower, upper), and x
    elsewhere; the noise returned is r there and 1 elsewhere, as ATen's. Out of
    training: a leaky relu of slope (lower + upper) / 2, the noise kept."""
    _own_generator(generator)
    values, kept = out_val(node)
    if not training:
        def leaky(v):
            return ir.op("where", ir.op("gt", v, ir.const(0.0, v.dtype), dtype=torch.bool), v,
                         _num("mul", v, (lower + upper) / 2), dtype=v.dtype)
        return (make_pointwise(g, node, leaky, [x], out_dtype=values.dtype, size=values.shape),
                make_pointwise(g, node, lambda n: n, [noise], out_dtype=kept.dtype, size=kept.shape))

    def slope(draw, v):
        r = _affine(draw.uniform(), upper - lower, lower)
        return ir.op("where", ir.op("le", v, ir.const(0.0, v.dtype), dtype=torch.bool), r, ir.const(1.0, r.dtype),
                     dtype=r.dtype)
    slopes = _random(g, node, slope, inputs=[x], val=values)
    return make_pointwise(g, node, lambda a, r: _same("mul", a, r), [x, slopes], out_dtype=values.dtype,
                          size=values.shape), slopes


@register(aten.randint.low, aten.randint.default, aten.randint_like.low_dtype, aten.randint_like.default)
def randint(g, node, *args, **kwargs):
    """Integers in [low, high): a 32-bit word scaled to the range ((word * n) >> 32,
    uneven by at most n / 2^32)."""
    low, high = {aten.randint.low: args[:2], aten.randint.default: (0, args[0]),
                 aten.randint_like.low_dtype: args[1:3], aten.randint_like.default: (0, args[1])}[node.target]
    if not isinstance(low, int) or not isinstance(high, int) or not 0 < high - low <= 2**31:
        raise Unsupported(f"randint over [{low}, {high}): a range of 1 to 2^31 integers")
    i64 = torch.int64

    def value(draw):
        scaled = ir.op("rshift", ir.op("mul", draw.word(), ir.const(high - low, i64), dtype=i64), ir.const(32, i64), dtype=i64)
        return ir.op("add", scaled, ir.const(low, i64), dtype=i64)
    return _random(g, node, value, dtypes=ir.KERNEL_DTYPES)


def _num(name: str, a: ir.Expr, b: float) -> ir.Expr:
    """a `name` the number b, in a's dtype."""
    return ir.op(name, a, ir.const(float(b), a.dtype), dtype=a.dtype)


def _same(name: str, a: ir.Expr, *more: ir.Expr) -> ir.Expr:
    """op `name` of a (and more), in a's dtype."""
    return ir.op(name, a, *more, dtype=a.dtype)


def _affine(x: ir.Expr, scale, shift) -> ir.Expr:
    """x * scale + shift, each of them a number or a value in x's dtype."""
    def value(v):
        return v if isinstance(v, ir.Expr) else ir.const(float(v), x.dtype)
    return _same("add", _same("mul", x, value(scale)), value(shift))


def _exponential(draw, lambd: float = 1.0) -> ir.Expr:
    """-log(1 - u) / lambd, u in (0, 1): never 0, never inf."""
    return _num("mul", _log1m(draw.open_uniform()), -1.0 / lambd)


def _log1m(u: ir.Expr) -> ir.Expr:
    """log(1 - u), finite for u in [0, 1)."""
    return _same("log", ir.op("sub", ir.const(1.0, u.dtype), u, dtype=u.dtype))


def _normal(draw) -> ir.Expr:
    """A standard normal value by Box-Muller, of two uniform numbers."""
    radius = _same("sqrt", _num("mul", _log1m(draw.uniform()), -2.0))
    angle = _num("mul", draw.uniform(), 2 * math.pi)
    return ir.op("mul", radius, _same("cos", angle), dtype=radius.dtype)


def _check(valid: bool, what: str) -> None:
    """Arguments ATen refuses are left to it, which raises its error."""
    if not valid:
        raise Unsupported(f"{what}, which ATen refuses")


def _own_generator(generator) -> None:
    if generator is not None:
        raise Unsupported("random numbers of a generator of their own")


class _Draws:
    """The random numbers of one element, in turn: its `per_value` places; uniform
    values in `dtype`, float64 (of two numbers, 53 bits) or float32 (of one, 24)."""

    def __init__(self, seed: View, place: sympy.Expr, dtype: torch.dtype):
        self.seed, self.place, self.taken, self.dtype = seed, place, 0, dtype
        self.bits = BITS[dtype]

    def word(self) -> ir.Expr:
        """32 random bits, in [0, 2^32) (int64)."""
        offset = ir.index_value(self.place + self.taken)
        self.taken += 1
        return ir.op("philox", self.seed.load([sympy.Integer(0)]), offset, dtype=torch.int64)

    def uniform(self, bits: int | None = None) -> ir.Expr:
        """A multiple of 2^-bits in [0, 1) (bits: the dtype's significand)."""
        bits = bits or self.bits
        i64 = torch.int64
        top = ir.op("rshift", self.word(), ir.const(max(32 - bits, 0), i64), dtype=i64)
        if bits > 32:  # the top bits - 32 of one number, then all 32 of the next
            top = ir.op("bitwise_or", ir.op("lshift", ir.op("rshift", top, ir.const(64 - bits, i64), dtype=i64),
                                            ir.const(32, i64), dtype=i64), self.word(), dtype=i64)
        return _num("mul", ir.cast(top, self.dtype), 2.0 ** -bits)

    def open_uniform(self) -> ir.Expr:
        """Uniform in (0, 1): never 0, never 1 (a log of it is finite)."""
        return _num("add", self.uniform(self.bits - 1), 2.0 ** -self.bits)


def _random(g, node, value, per_value: int = 1, dtypes=tuple(BITS), inputs=(), val=None) -> Lazy:
    """node's result (or `val`'s shape and dtype): value(draws, *loads) at each
    element, drawing at most `per_value` uniform values of its own (twice the
    numbers in float64); loads: the tensors `inputs` there (broadcast), in the
    draws' dtype."""
    val, device = val if val is not None else out_val(node), node_device(g, node)
    if val.dtype not in dtypes:
        raise Unsupported(f"random {val.dtype} numbers")
    dtype = F64 if val.dtype == F64 else F32
    per_value *= 2 if dtype == F64 else 1
    if device != g.device:
        raise Unsupported(f"random numbers on {device}, where the graph's kernels run on {g.device}")
    size, n = tuple(val.shape), math.prod(val.shape) * per_value
    first = -(-g.random_numbers // 4) * 4  # a Philox counter's first word
    if first + n > MAX_NUMBERS:
        raise Unsupported(f"more than {MAX_NUMBERS} random numbers in one graph")
    g.random_numbers = first + n
    seed, stride = call_seed(g, node), contiguous_strides(size)

    def body(idx):
        draws = _Draws(seed, linear_index(idx, stride) * per_value + first, dtype)
        out = value(draws, *(ir.cast(broadcast_load(v, size, idx, dtype), dtype) for v in inputs))
        assert draws.taken <= per_value, (node, draws.taken)
        return ir.cast(out, val.dtype)

    return Lazy(size, val.dtype, body, origins_of(g, node, *inputs))


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
