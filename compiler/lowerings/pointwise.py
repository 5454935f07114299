"""Elementwise ops. Each becomes a Lazy: a function of the output index."""
from __future__ import annotations

import math

import torch

from .. import ir
from ..graph import Lazy
from . import indexing
from .registry import Unsupported, is_tensor, make_pointwise, out_val, promote, register, upcast

aten = torch.ops.aten


def _op(name):
    return lambda *xs: ir.op(name, *xs, dtype=xs[0].dtype)


# ATen op packet -> IR op, computed in the (upcast) output dtype
UNARY = {
    aten.abs: "abs", aten.neg: "neg", aten.exp: "exp", aten.exp2: "exp2", aten.expm1: "expm1",
    aten.log: "log", aten.log2: "log2", aten.log10: "log10", aten.log1p: "log1p",
    aten.sqrt: "sqrt", aten.rsqrt: "rsqrt", aten.sin: "sin", aten.cos: "cos", aten.tan: "tan",
    aten.asin: "asin", aten.acos: "acos", aten.atan: "atan", aten.sinh: "sinh", aten.cosh: "cosh",
    aten.tanh: "tanh", aten.asinh: "asinh", aten.acosh: "acosh", aten.atanh: "atanh",
    aten.erf: "erf", aten.erfc: "erfc", aten.erfinv: "erfinv", aten.lgamma: "lgamma",
    aten.sigmoid: "sigmoid", aten.reciprocal: "reciprocal", aten.floor: "floor", aten.ceil: "ceil",
    aten.trunc: "trunc", aten.round: "round", aten.sign: "sign", aten.bitwise_not: "bitwise_not",
    aten.relu: "relu",
}

BINARY = {
    aten.add: "add", aten.sub: "sub", aten.mul: "mul", aten.maximum: "maximum",
    aten.minimum: "minimum", aten.fmax: "fmax", aten.fmin: "fmin", aten.atan2: "atan2",
    aten.hypot: "hypot", aten.copysign: "copysign", aten.fmod: "fmod", aten.remainder: "remainder",
    aten.bitwise_and: "bitwise_and", aten.bitwise_or: "bitwise_or", aten.bitwise_xor: "bitwise_xor",
    aten.bitwise_left_shift: "lshift", aten.bitwise_right_shift: "rshift", aten.__lshift__: "lshift",
    aten.__rshift__: "rshift",
    aten.nextafter: "nextafter",
}

COMPARE = {
    aten.eq: "eq", aten.ne: "ne", aten.lt: "lt", aten.le: "le", aten.gt: "gt", aten.ge: "ge",
    aten.logical_and: "logical_and", aten.logical_or: "logical_or", aten.logical_xor: "logical_xor",
}

PREDICATE = {aten.isnan: "isnan", aten.isinf: "isinf", aten.signbit: "signbit", aten.logical_not: "logical_not"}


def _unary(name):
    def lower(g, node, x, **kwargs):
        if name == "round" and set(kwargs) == {"decimals"} and out_val(node).dtype.is_floating_point:
            # CUDA's kernel computes in a 16-bit tensor's dtype, each step rounding to it
            dtype = out_val(node).dtype
            step = dtype if g.device.type == "cuda" and dtype.itemsize == 2 else None
            return make_pointwise(g, node, lambda a: _round_decimals(a, kwargs["decimals"], step), [x])
        if kwargs:
            raise Unsupported(f"{name} with {', '.join(kwargs)}")
        if name == "bitwise_not" and out_val(node).dtype == torch.bool:
            return make_pointwise(g, node, lambda a: ir.op("logical_not", a, dtype=a.dtype), [x])
        if name in ("floor", "ceil", "trunc", "round") and not out_val(node).dtype.is_floating_point:
            return make_pointwise(g, node, lambda a: a, [x])  # integer: identity
        return make_pointwise(g, node, _op(name), [x])

    return lower


def _round_decimals(a, decimals: int, step_dtype: torch.dtype | None = None):
    """ATen's round(decimals=d): to nearest even at 10^-d (x * 10^d rounded, over
    10^d; or x / 10^-d rounded, times 10^-d), in the compute dtype. With
    `step_dtype` (CUDA's kernel for 16-bit tensors), 10^|d| and the scaled value
    round to it first: a float16 of 16344 scaled by 10 is inf there, not 163440."""
    ten_pow = float(10.0 ** abs(decimals))
    if step_dtype is not None:
        ten_pow = ir.rounded_to(ten_pow, step_dtype)

    def stepped(e):
        return _rounded_to(e, step_dtype or a.dtype)

    scale = ir.const(ten_pow, a.dtype)
    if decimals < 0:
        scaled = stepped(ir.op("truediv", a, scale, dtype=a.dtype))
        return ir.op("mul", ir.op("round", scaled, dtype=a.dtype), scale, dtype=a.dtype)
    scaled = stepped(ir.op("mul", a, scale, dtype=a.dtype))
    return ir.op("truediv", ir.op("round", scaled, dtype=a.dtype), scale, dtype=a.dtype)


# nextafter of a 16-bit float, computed in float32: one step in the 16-bit bits
NEXTAFTER_16 = {torch.float16: "nextafter_fp16", torch.bfloat16: "nextafter_bf16"}
# on bool, arithmetic is logic (C++ would compute true + true == 2)
BOOL_BINARY = {"add": "logical_or", "mul": "logical_and", "maximum": "logical_or", "minimum": "logical_and"}


def _binary(name):
    def lower(g, node, a, b, *, alpha=None):
        if out_val(node).dtype == torch.bool and name in BOOL_BINARY:
            return make_pointwise(g, node, _op(BOOL_BINARY[name]), [a, b])
        if name == "nextafter" and out_val(node).dtype in NEXTAFTER_16:  # a step of its own ulp, not float32's
            return make_pointwise(g, node, _op(NEXTAFTER_16[out_val(node).dtype]), [a, b])
        a, b = (_as_eager_scalar(g, node, name, v) for v in (a, b))
        if alpha is not None and alpha != 1:
            alpha = _as_eager_scalar(g, node, name, alpha)
            return make_pointwise(g, node, lambda x, y: _plus_scaled(name, x, y, alpha), [a, b])
        if name == "add":
            folded = indexing.add_into_scatter(g, node, a, b)
            if folded is not None:
                return folded
        return make_pointwise(g, node, _op(name), [a, b])

    return lower


def _multiply_add(a: ir.Expr, b: ir.Expr, c: ir.Expr) -> ir.Expr:
    """a * b + c; of floats rounded once (an fma)."""
    t = c.dtype
    if t.is_floating_point:
        return ir.op("fma", a, b, c, dtype=t)
    return ir.op("add", ir.op("mul", a, b, dtype=t), c, dtype=t)


def _plus_scaled(name: str, x: ir.Expr, y: ir.Expr, alpha) -> ir.Expr:
    """x + alpha * y (name "add") or x - alpha * y ("sub"); of floats rounded once,
    an fma, as eager's kernels compute it on either device (ATen's vectorized add
    is fmadd(y, alpha, x)): rounding alpha * y first was an ulp off in 1 of 5."""
    t = x.dtype
    if t.is_floating_point:
        return _multiply_add(y, ir.const(alpha if name == "add" else -alpha, t), x)
    return ir.op(name, x, ir.op("mul", y, ir.const(alpha, t), dtype=t), dtype=t)


def _compare(name):
    def lower(g, node, a, b):
        dtype = promote(a, b)
        cdt = torch.bool if name.startswith("logical") else upcast(dtype)
        if cdt != dtype:  # 16-bit floats, compared in float32 with a Python float rounded to
            # their dtype first, as eager's comparisons do on either device: bfloat16
            # x == 0.1 holds where x is bfloat16's 0.1 (pytorch#173987)
            a, b = (ir.rounded_to(v, dtype) for v in (a, b))
        return make_pointwise(g, node, lambda x, y: ir.op(name, x, y, dtype=torch.bool), [a, b], compute_dtype=cdt)

    return lower


# ops whose Python-number operand eager converts to a 16-bit float tensor's dtype
# before it computes (TensorIterator casts a wrapped scalar to the common dtype):
# on either device, or on the CPU only (CUDA's add and sub read it in float32,
# as do both devices' mul and div). bfloat16 x + 8.396 adds 8.375 on the CPU.
SCALAR_IN_DTYPE = {"fmod": ("cpu", "cuda"), "remainder": ("cpu", "cuda"), "pow": ("cpu", "cuda"),
                   "add": ("cpu",), "sub": ("cpu",)}


def _as_eager_scalar(g, node, name: str, v):
    """Operand `v` of op `name` as eager computes with it (see SCALAR_IN_DTYPE)."""
    dtype = out_val(node).dtype
    if is_tensor(v) or isinstance(v, bool) or dtype not in (torch.float16, torch.bfloat16):
        return v
    if ("cuda" if g.device.type == "cuda" else "cpu") not in SCALAR_IN_DTYPE.get(name, ()):
        return v
    return ir.rounded_to(float(v), dtype)


def _predicate(name):
    def lower(g, node, a):
        cdt = torch.bool if name == "logical_not" else upcast(a.dtype)
        return make_pointwise(g, node, lambda x: ir.op(name, x, dtype=torch.bool), [a], compute_dtype=cdt)

    return lower


for packet, name in UNARY.items():
    register(packet)(_unary(name))
for packet, name in BINARY.items():
    register(packet)(_binary(name))
for packet, name in COMPARE.items():
    register(packet)(_compare(name))
for packet, name in PREDICATE.items():
    register(packet)(_predicate(name))


@register(aten.rsub)
def rsub(g, node, a, b, *, alpha=1):
    a, b, alpha = (_as_eager_scalar(g, node, "sub", v) for v in (a, b, alpha))
    return make_pointwise(g, node, lambda x, y: ir.op("sub", ir.op("mul", y, ir.const(alpha, y.dtype), dtype=y.dtype) if alpha != 1 else y, x, dtype=x.dtype), [a, b])


@register(aten.div)
def div(g, node, a, b, *, rounding_mode=None):
    out = out_val(node).dtype
    inv = _cuda_scalar_reciprocal(g, node, b, out)
    if rounding_mode is None or rounding_mode == "floor" and inv is not None and b == 0:
        # a floor division by zero is eager's true one (inf or NaN) on either path
        return make_pointwise(g, node, _op("mul"), [a, inv]) if inv is not None else make_pointwise(g, node, _op(_true_div(out, a, b)), [a, b])
    if not out.is_floating_point:
        return make_pointwise(g, node, _op("floordiv" if rounding_mode == "floor" else "truncdiv"), [a, b])
    cuda = g.device.type == "cuda"
    if rounding_mode == "floor":
        # ATen's CUDA kernel holds the floor in a half type (its CPU kernel in float32)
        held = out if cuda else upcast(out)
        return make_pointwise(g, node, lambda x, y: _div_floor_floating(x, y, held, inv), [a, b])
    if inv is not None:  # ATen's CUDA kernel: trunc(a * (1 / b)) in float32
        return make_pointwise(g, node, lambda x: ir.op("trunc", ir.op("mul", x, ir.const(inv, x.dtype), dtype=x.dtype), dtype=x.dtype), [a])
    # ATen truncates the quotient rounded to the output dtype (matters for half
    # types), but its CPU kernel's by a single value, divided in float32 (is_scalar)
    single = not is_tensor(b) or math.prod(b.size) == 1
    quotient = upcast(out) if single and not cuda else out
    return make_pointwise(g, node, lambda x, y: ir.op("trunc", _rounded_to(ir.op("truediv", x, y, dtype=x.dtype), quotient), dtype=x.dtype), [a, b])


def _true_div(out: torch.dtype, a, b) -> str:
    """The IR op of a / b: "truediv_bf16" for two bfloat16 tensors and a bfloat16
    quotient. Their float32 quotient is rounded to bfloat16 at once, and any float32
    division within 2 ulp then rounds to the bfloat16 that eager's correctly rounded
    one does: a quotient of two 8-bit significands lies 2^-17 or more (relative)
    from every bfloat16 midpoint it is not, and it is never one. Checked on all 2^32
    pairs (H200: Triton's div.full against div.rn, NaN as NaN; float16's 11 bits
    leave no such margin, and 7964 of its pairs differ). The Triton codegen then
    divides with div.full, which costs less than div.rn (H200, ConvNeXt's
    LayerNorm2d, bf16 [32, 96, 56, 56] 22.4 -> 19.9 us)."""
    halves = all(is_tensor(v) and v.dtype == torch.bfloat16 for v in (a, b))
    return "truediv_bf16" if out == torch.bfloat16 and halves else "truediv"


def _cuda_scalar_reciprocal(g, node, b, out: torch.dtype) -> float | None:
    """1 / b, where this is eager's own division (not a step of an op decomposed) of
    floats on a GPU by a Python number: ATen's CUDA kernels then multiply by the
    number's reciprocal, computed on the host in the op's math type
    (BinaryDivTrueKernel.cu and its floor and trunc twins); a third of float32
    quotients are an ulp off a division. None where eager divides."""
    eagers = getattr(node.meta.get("original_aten", node.target), "overloadpacket", None)
    if not (g.device.type == "cuda" and eagers in (aten.div, aten.div_, aten.true_divide, aten.true_divide_,
                                                    aten.floor_divide, aten.floor_divide_)
            and isinstance(b, (int, float)) and not isinstance(b, bool) and out.is_floating_point):
        return None
    math_t = torch.float64 if out == torch.float64 else torch.float32
    return (torch.tensor(1.0, dtype=math_t) / torch.tensor(b, dtype=math_t)).item()


def _rounded_to(x, dtype: torch.dtype):
    """x (computed in float32 for a half type) rounded to `dtype`, where ATen's
    kernel keeps a value of that type midway."""
    return x if dtype == x.dtype else ir.cast(ir.cast(x, dtype), x.dtype)


def _div_floor_floating(a, b, held: torch.dtype, inv: float | None = None):
    """ATen's div_floor_floating: exact floor(a / b) even where a / b rounds up to an
    integer. The floor (and its + 1) is rounded to `held`, the type eager's kernel
    keeps it in. With `inv`, its CUDA kernel for a Python divisor b: (a - mod) * inv."""
    t = a.dtype

    def op(name, *xs, dtype=t):
        return ir.op(name, *xs, dtype=dtype)

    def quotient(x):
        return op("mul", x, ir.const(inv, t)) if inv is not None else op("truediv", x, b)

    zero = ir.const(0, t)
    mod = op("fmod", a, b)
    div = quotient(op("sub", a, mod))
    wrong_sign = op("logical_and", op("ne", mod, zero, dtype=torch.bool),
                    op("ne", op("lt", b, zero, dtype=torch.bool), op("lt", mod, zero, dtype=torch.bool), dtype=torch.bool), dtype=torch.bool)
    div = op("where", wrong_sign, op("sub", div, ir.const(1, t)), div)
    fl = _rounded_to(op("floor", div), held)
    fl = op("where", op("gt", op("sub", div, fl), ir.const(0.5, t), dtype=torch.bool), _rounded_to(op("add", fl, ir.const(1, t)), held), fl)
    fl = op("where", op("eq", div, zero, dtype=torch.bool), op("copysign", zero, quotient(a)), fl)
    return fl if inv is not None else op("where", op("eq", b, zero, dtype=torch.bool), op("truediv", a, b), fl)


@register(aten.floor_divide)
def floor_divide(g, node, a, b):
    return div(g, node, a, b, rounding_mode="floor")


@register(aten.pow)
def pow_(g, node, a, b):
    a, b = (_as_eager_scalar(g, node, "pow", v) for v in (a, b))
    if is_tensor(b):
        return make_pointwise(g, node, _op("pow"), [a, b])
    if isinstance(b, (int, float)) and float(b).is_integer() and -4 <= b <= 4:
        n = int(b)

        def ipow(x):
            if n == 0:
                return ir.const(1, x.dtype)
            r = x
            for _ in range(abs(n) - 1):
                r = ir.op("mul", r, x, dtype=x.dtype)
            return ir.op("reciprocal", r, dtype=x.dtype) if n < 0 else r

        if n < 0 and not out_val(node).dtype.is_floating_point:
            raise Unsupported("integer ** negative")
        return make_pointwise(g, node, ipow, [a])
    if b == 0.5:
        return make_pointwise(g, node, _op("sqrt"), [a])
    return make_pointwise(g, node, lambda x: ir.op("pow", x, ir.const(b, x.dtype), dtype=x.dtype), [a])


@register(aten.ldexp)
def ldexp(g, node, a, b):
    return make_pointwise(g, node, lambda x, y: ir.op("mul", x, ir.op("exp2", y, dtype=y.dtype), dtype=x.dtype), [a, b])


@register("prims.fma.default")
def fma(g, node, a, b, c):
    """a * b + c rounded once: Dynamo's form of p.addcdiv_(t1, t2, value=v) (an
    optimizer's step: fma(t1 / t2, v, p)) and of p.add_(t, alpha=a tensor), as
    eager's CUDA kernels contract them (ATen ran it: three kernels and a fallback)."""
    return make_pointwise(g, node, _multiply_add, [a, b, c])


# addcmul, addcdiv and lerp as eager's one kernel computes them on each device
# (measured on the CPU and an H200, float32 and 16-bit: eager's bits; with
# config.fast_math the GPU's division is div.full): in the upcast dtype, rounded
# once, with the fma its compiler contracts to; torch._decomp's a + v * t1 * t2
# rounds each step, an ulp off in 1 of 4 float32s
@register(aten.addcmul)
def addcmul(g, node, a, t1, t2, value=1):
    dtype = out_val(node).dtype
    if dtype == torch.bool:
        raise Unsupported("addcmul of bools")  # ATen raises
    if not dtype.is_floating_point:
        value = int(value)  # ATen converts it to the integer dtype, truncating: 1.7 multiplies by 1
    cuda = g.device.type == "cuda"

    def body(x, y, z):
        t = x.dtype
        v = ir.const(value, t)
        if cuda and value != 1 and t.is_floating_point:  # CUDA: fma(v, y * z, x), y * z rounded
            return _multiply_add(v, ir.op("mul_rn", y, z, dtype=t), x)
        return _multiply_add(ir.op("mul", v, y, dtype=t), z, x)  # the CPU (and CUDA's v = 1): fma(v * y, z, x)

    return make_pointwise(g, node, body, [a, t1, t2])


@register(aten.addcdiv)
def addcdiv(g, node, a, t1, t2, value=1):
    if not out_val(node).dtype.is_floating_point:
        raise Unsupported("addcdiv of integers")  # ATen raises
    cuda = g.device.type == "cuda"

    def body(x, y, z):
        t = x.dtype
        v = ir.const(value, t)
        if cuda:  # fma(v, y / z, x); the CPU: x + (v * y) / z
            return _multiply_add(v, ir.op("truediv", y, z, dtype=t), x)
        return ir.op("add", x, ir.op("truediv", ir.op("mul", v, y, dtype=t), z, dtype=t), dtype=t)

    return make_pointwise(g, node, body, [a, t1, t2])


@register(aten.lerp)
def lerp(g, node, start, end, weight):
    """ATen's two formulas, each an fma: from the start where |weight| < 0.5, else
    from the end (exact at weight 1)."""
    def body(x, y, w):
        t = x.dtype
        d = ir.op("sub", y, x, dtype=t)
        low = ir.op("fma", w, d, x, dtype=t)
        high = ir.op("fma", ir.op("neg", d, dtype=t), ir.op("sub", ir.const(1, t), w, dtype=t), y, dtype=t)
        return ir.op("where", ir.op("lt", ir.op("abs", w, dtype=t), ir.const(0.5, t), dtype=torch.bool), low, high, dtype=t)

    return make_pointwise(g, node, body, [start, end, weight])


@register(aten.where)
def where(g, node, cond, a, b):
    cdt = upcast(out_val(node).dtype)
    return make_pointwise(g, node, lambda c, x, y: ir.op("where", c, x, y, dtype=cdt), [cond, a, b], compute_dtype=[torch.bool, cdt, cdt])


@register(aten.clamp)
def clamp(g, node, x, min=None, max=None):
    def fn(v, *bounds):
        it = iter(bounds)
        if min is not None:
            v = ir.op("maximum", v, next(it), dtype=v.dtype)
        if max is not None:
            v = ir.op("minimum", v, next(it), dtype=v.dtype)
        return v

    return make_pointwise(g, node, fn, [x] + [b for b in (min, max) if b is not None])


@register(aten.clamp_min)
def clamp_min(g, node, x, min):
    return clamp(g, node, x, min=min)


@register(aten.clamp_max)
def clamp_max(g, node, x, max):
    return clamp(g, node, x, max=max)


@register(aten._to_copy)
def to_copy(g, node, x, *, dtype=None, layout=None, device=None, pin_memory=None, non_blocking=False, memory_format=None):
    if device is not None and torch.device(device) != out_val(node).device:
        raise Unsupported("device copy")
    if device is not None and torch.device(device).type != g.device.type:
        raise Unsupported("device copy")
    if not is_tensor(x):
        raise Unsupported("scalar input")
    return make_pointwise(g, node, lambda v: v, [x], compute_dtype=x.dtype)


@register(aten.clone, aten.alias_copy, aten.lift_fresh_copy)
def clone(g, node, x, *, memory_format=None):
    return make_pointwise(g, node, lambda v: v, [x], compute_dtype=x.dtype)


@register(aten.copy)
def copy(g, node, dst, src, non_blocking=False):
    return make_pointwise(g, node, lambda v: v, [src], compute_dtype=src.dtype if is_tensor(src) else None)


@register(aten.fill.Scalar)
def fill(g, node, x, value):
    return full(g, node, None, value)


@register(aten.full, aten.full_like)
def full(g, node, *args, **kwargs):
    value, dtype = args[1], out_val(node).dtype
    if is_tensor(value):
        raise Unsupported("tensor fill value")
    if ir.overflows(value, dtype):  # full_like(70000.0) of a float16: ATen's fill raises
        raise Unsupported(f"fill value {value} overflows {dtype} (ATen raises)")
    return make_pointwise(g, node, lambda: ir.const(value, upcast(dtype)), [])


@register(aten.scalar_tensor)
def scalar_tensor(g, node, value, **kwargs):
    return full(g, node, None, value)


@register(aten.zeros, aten.zeros_like)
def zeros(g, node, *args, **kwargs):
    return full(g, node, None, 0)


@register(aten.empty_permuted, aten.empty.memory_format)
def empty(g, node, *args, **kwargs):
    """Memory whose contents are left unspecified: zeros, which cost nothing
    until read (what fills it, dropout's bernoulli_, reads only its shape)."""
    return full(g, node, None, 0)


@register(aten.ones, aten.ones_like)
def ones(g, node, *args, **kwargs):
    return full(g, node, None, 1)


@register(aten.arange.start_step, aten.arange.default, aten.arange.start)
def arange(g, node, *args, **kwargs):
    val = out_val(node)
    nums = [a for a in args if isinstance(a, (int, float))]
    start, step = 0, 1
    if node.target is aten.arange.start_step:
        start, step = nums[0], nums[2] if len(nums) > 2 else 1
    elif node.target is aten.arange.start:
        start = nums[0]
    cdt = upcast(val.dtype)

    def body(index):
        i = ir.cast(ir.index_value(index[0]), cdt)
        return ir.cast(ir.op("add", ir.const(start, cdt), ir.op("mul", i, ir.const(step, cdt), dtype=cdt), dtype=cdt), val.dtype)

    return Lazy(tuple(val.shape), val.dtype, body, (node.name,))


@register(aten.nan_to_num)
def nan_to_num(g, node, x, nan=0.0, posinf=None, neginf=None):
    dt = out_val(node).dtype
    if not dt.is_floating_point:
        return make_pointwise(g, node, lambda v: v, [x])
    info = torch.finfo(dt)
    posinf = info.max if posinf is None else posinf
    neginf = info.min if neginf is None else neginf

    def fn(v):
        t = v.dtype
        r = ir.op("where", ir.op("isnan", v, dtype=torch.bool), ir.const(nan, t), v, dtype=t)
        big = ir.op("gt", v, ir.const(0, t), dtype=torch.bool)
        inf = ir.op("isinf", v, dtype=torch.bool)
        pick = ir.op("where", big, ir.const(posinf, t), ir.const(neginf, t), dtype=t)
        return ir.op("where", inf, pick, r, dtype=t)

    return make_pointwise(g, node, fn, [x])


@register(aten.logical_not)
def logical_not(g, node, x):
    return make_pointwise(g, node, lambda v: ir.op("logical_not", v, dtype=torch.bool), [x], compute_dtype=torch.bool)


@register(aten.frac)
def frac(g, node, x):
    return make_pointwise(g, node, lambda v: ir.op("sub", v, ir.op("trunc", v, dtype=v.dtype), dtype=v.dtype), [x])


@register(aten.gelu)
def gelu(g, node, x, approximate="none"):
    def fn(v):
        t = v.dtype
        half = ir.const(0.5, t)
        if approximate == "tanh":
            inner = ir.op("mul", ir.const(math.sqrt(2 / math.pi), t), ir.op("add", v, ir.op("mul", ir.const(0.044715, t), ir.op("mul", v, ir.op("mul", v, v, dtype=t), dtype=t), dtype=t), dtype=t), dtype=t)
            return ir.op("mul", ir.op("mul", half, v, dtype=t), ir.op("add", ir.const(1, t), ir.op("tanh", inner, dtype=t), dtype=t), dtype=t)
        e = ir.op("erf", ir.op("mul", v, ir.const(1 / math.sqrt(2), t), dtype=t), dtype=t)
        return ir.op("mul", ir.op("mul", half, v, dtype=t), ir.op("add", ir.const(1, t), e, dtype=t), dtype=t)

    return make_pointwise(g, node, fn, [x])
