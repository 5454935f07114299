"""Triton source for scalar operations: dtypes, index expressions, unary and
binary ops (libdevice where triton.language has no precise op), the helper
@triton.jit functions kernels may call, and reduction identities."""
from __future__ import annotations

import math
import re

import sympy
import torch

from ..config import config
from ..index import FloorDiv, ModularIndexing
from .common import INFIX_OPS

TL_DTYPE = {
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.int64: "tl.int64",
    torch.int32: "tl.int32",
    torch.int16: "tl.int16",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}


# -- index printing -----------------------------------------------------------------


def texpr(e: sympy.Expr, names: dict | None = None) -> str:
    """Print an index expression as Triton code (ints are non-negative, so
    `//` and `%` agree with FloorDiv/ModularIndexing)."""
    names = names or {}
    e = sympy.sympify(e)
    if e.is_Integer:
        return str(int(e))
    if e.is_Symbol:
        return names.get(e, e.name)
    if isinstance(e, sympy.Add):
        terms = sorted(e.args, key=lambda t: (t.is_Number, sympy.default_sort_key(t)))
        out = texpr(terms[0], names)
        for t in terms[1:]:
            c, rest = t.as_coeff_Mul()
            if c.is_Number and c < 0:
                neg = -t
                out += f" - {_paren(neg, names)}"
            else:
                out += f" + {texpr(t, names)}"
        return out
    if isinstance(e, sympy.Mul):
        c, rest = e.as_coeff_Mul()
        factors = sympy.Mul.make_args(rest)
        parts = [_paren(f, names) for f in factors]
        if c != 1:
            parts.insert(0, str(int(c)) if c.is_Integer else f"({c})")
        return " * ".join(parts)
    if isinstance(e, FloorDiv):
        return f"({_paren(e.args[0], names)} // {int(e.args[1])})"
    if isinstance(e, ModularIndexing):
        a, div, mod = e.args
        inner = _paren(a, names) if div == 1 else f"({_paren(a, names)} // {int(div)})"
        return f"({inner} % {int(mod)})"
    if isinstance(e, (sympy.Min, sympy.Max)):
        fn = "tl.minimum" if isinstance(e, sympy.Min) else "tl.maximum"
        out = texpr(e.args[0], names)
        for a in e.args[1:]:
            out = f"{fn}({out}, {texpr(a, names)})"
        return out
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        return " * ".join([_paren(e.base, names)] * int(e.exp))
    raise NotImplementedError(f"Triton index printer: {e!r}")


def _paren(e, names) -> str:
    s = texpr(e, names)
    return f"({s})" if isinstance(e, (sympy.Add,)) else s


# -- scalar ops ------------------------------------------------------------------------

LIBDEVICE_UNARY = {
    "expm1", "log10", "log1p", "tan", "asin", "acos", "atan", "sinh", "cosh", "tanh",
    "asinh", "acosh", "atanh", "erfc", "erfinv", "lgamma", "trunc",
}
TL_UNARY = {"exp": "tl.exp", "log": "tl.log", "log2": "tl.log2", "sin": "tl.sin", "cos": "tl.cos",
            "floor": "tl.floor", "ceil": "tl.ceil", "erf": "tl.erf", "abs": "tl.abs"}
# ops of float32 with a helper of our own (see HELPERS) in place of Triton's or libdevice's
FP32_HELPERS = {"erf": "_erf", "rsqrt": "_rsqrt", "exp": "_expf", "reciprocal": "_rcp_rn"}
# of them, those whose helper computes eager's bits where Triton's own form is within
# 2 ulp: config.fast_math keeps Triton's
EAGER_MATH = {"exp", "reciprocal"}
LIBDEVICE_BINARY = {"atan2", "hypot", "copysign", "nextafter"}
# nextafter as one step in the bits (_nextafter's KIND): libdevice's flushes a
# float32 subnormal in a GPU kernel (nextafter(0, 1) came out 2^-126)
NEXTAFTER_BITS = {"nextafter": 0, "nextafter_bf16": 1, "nextafter_fp16": 2}


def takes_tensors_only(code: str) -> bool:
    """Whether code calls libdevice (itself or in a helper), tl.sqrt_rn, tl.div_rn or a helper of FP32_HELPERS, which take no Python scalars."""
    return ("libdevice." in code or "tl.sqrt_rn(" in code or "tl.div_rn(" in code or "_philox(" in code or "_float_remainder(" in code
            or any(f"{h}(" in code for h in FP32_HELPERS.values()))


def unary(op: str, a: str, t: torch.dtype, eager_math: bool = True) -> str:
    """`eager_math`: EAGER_MATH ops in eager's forms, unless config.fast_math."""
    fp = t.is_floating_point
    if op in ("neg", "abs", "bitwise_not") and not fp and t != torch.bool:
        # they wrap as ATen's: an 8- or 16-bit integer computed in int32 and cut back
        # to its dtype, abs without tl.abs (LLVM's abs of the most negative value is
        # poison); ~ of a uint8 as ^ 255 (Triton 3.6's interpreter builds all-ones as
        # -1, which numpy 2 refuses for uint8)
        small = t.itemsize < 4
        w = f"({a}).to(tl.int32)" if small else a
        inner = {"neg": f"-{w}", "abs": f"tl.where({w} < 0, -{w}, {w})",
                 "bitwise_not": f"{a} ^ 255" if t == torch.uint8 else f"~{a}"}[op]
        return f"({inner}).to({TL_DTYPE[t]})" if small else inner
    if op in FP32_HELPERS and t == torch.float32 and not (op in EAGER_MATH and (config.fast_math or not eager_math)):
        return f"{FP32_HELPERS[op]}({a})"
    if op in TL_UNARY and (fp or op == "abs"):
        return f"{TL_UNARY[op]}({a})"
    if op in LIBDEVICE_UNARY:
        return f"libdevice.{op}({a})"
    simple = {
        "neg": f"-{a}",
        "sigmoid": f"1.0 / (1.0 + tl.exp(-{a}))",
        "exp2": f"libdevice.exp2({a})",
        # float32: correctly rounded, as eager's sqrtf (libdevice's, as Triton links it, is sqrt.approx.ftz)
        "sqrt": f"tl.sqrt_rn({a})" if t == torch.float32 else f"libdevice.sqrt({a})",
        "rsqrt": f"libdevice.rsqrt({a})",
        "reciprocal": f"1.0 / {a}",
        "round": f"libdevice.nearbyint({a})",
        # a float's as float constants: the ints' conversion, rounded to bfloat16 and
        # compared, gave wrong sums on an H200 (a bfloat16 hinge loss, [4099],
        # RBLOCK 4096 with 8 warps: 4.56 where eager gave 7.38; Triton 3.6)
        "sign": (f"tl.where({a} > 0, 1.0, tl.where({a} < 0, -1.0, 0.0)).to({TL_DTYPE[t]})" if fp
                 else f"tl.where({a} > 0, 1, tl.where({a} < 0, -1, 0)).to({TL_DTYPE[t]})"),
        "relu": f"tl.where({a} < 0, 0, {a})",
        "bitwise_not": f"~{a}",
        "logical_not": f"{a} == 0",
        "isnan": f"{a} != {a}",
        "isinf": f"tl.abs({a}) == float('inf')",
        "signbit": f"libdevice.signbit({a}) != 0" if fp else f"{a} < 0",
    }
    if op in simple:
        return simple[op]
    if op in ("floor", "ceil", "trunc"):
        return a  # integer input: identity
    raise NotImplementedError(f"Triton codegen has no unary op {op!r}")


def binary(op: str, a: str, b: str, t: torch.dtype, cuda: bool = False) -> str:
    fp = t.is_floating_point
    if op in INFIX_OPS:
        return f"{a} {INFIX_OPS[op]} {b}"
    if op == "truediv":
        # correctly rounded, as eager's CUDA kernels divide: Triton's float32 `/` is div.full (2 ulp)
        return f"tl.div_rn({a}, {b})" if cuda and t == torch.float32 and not config.fast_math else f"{a} / {b}"
    if op == "truediv_bf16":  # rounded to bfloat16 at once: div.full gives eager's bits (pointwise._true_div)
        return f"{a} / {b}"
    if op == "mul_rn":  # a product rounded before it is added, which FP fusion must not contract into an FMA
        return f"libdevice.mul_rn({a}, {b})" if cuda and t in (torch.float32, torch.float64) else f"{a} * {b}"
    if op == "logical_and":
        return f"({a} != 0) & ({b} != 0)"
    if op == "logical_or":
        return f"({a} != 0) | ({b} != 0)"
    if op == "logical_xor":
        return f"({a} != 0) ^ ({b} != 0)"
    if op in ("maximum", "minimum", "fmax", "fmin"):
        return _min_max(op, a, b, fp, cuda)
    if not fp and cuda and b == "0" and op in ("floordiv", "truncdiv", "remainder", "fmod"):
        b = f"_unknown_zero({a})"  # eager's kernel divides by its argument, at run time
    if op == "floordiv":
        return f"_floordiv({a}, {b})"
    if op == "truncdiv":
        return f"_truncdiv({a}, {b})"
    if op == "remainder":
        return f"_float_remainder({a}, {b})" if fp else f"_int_remainder({a}, {b})"
    if op == "fmod":
        return f"libdevice.fmod({a}, {b})" if fp else f"_int_fmod({a}, {b})"
    if op == "pow":
        return f"libdevice.pow({a}, {b})" if fp else f"_int_pow({a}, {b})"
    if op == "philox":
        return f"_philox({a}, {b})"
    if op in NEXTAFTER_BITS and (op != "nextafter" or t == torch.float32):
        return f"_nextafter({a}, {b}, {NEXTAFTER_BITS[op]})"
    if op in LIBDEVICE_BINARY:
        return f"libdevice.{op}({a}, {b})"
    raise NotImplementedError(f"Triton codegen has no binary op {op!r}")


def _min_max(op: str, a: str, b: str, fp: bool, cuda: bool) -> str:
    """NaN-propagating (maximum, minimum) or not (fmax, fmin), with a tie of
    signed zeros as eager's: on a GPU ATen's NaN checks, then fmaxf and fminf
    (tl.maximum, tl.minimum: the same max.f32, which puts -0.0 below +0.0); on
    the CPU std::max and std::min, which keep the first operand of a tie."""
    if cuda or not fp:
        fn = "tl.maximum" if op in ("maximum", "fmax") else "tl.minimum"
        if not fp or op in ("fmax", "fmin"):
            return f"{fn}({a}, {b})"
        return f"tl.where({a} != {a}, {a}, tl.where({b} != {b}, {b}, {fn}({a}, {b})))"
    # b where it is further in the op's direction, or NaN where that wins (maximum,
    # minimum: b's NaN; fmax, fmin: a's, which b then replaces); else a
    further = f"({a} < {b})" if op in ("maximum", "fmax") else f"({b} < {a})"
    nan = b if op in ("maximum", "minimum") else a
    return f"tl.where({further} | ({nan} != {nan}), {b}, {a})"


# @triton.jit helpers the kernels may call, and the helpers each one calls
HELPERS = {
    "_philox4": """@triton.jit
def _philox4(seed, counter):
    # Philox4x32-10 of counter (counter, 0, 0, 0) under key seed (int64s): four words
    # of 32 random bits, as Triton's tl.randint4x (a @triton.jit function, which the
    # interpreter cannot call from ours) and C++'s fusion_philox
    c0 = counter.to(tl.uint32)
    c1 = (counter >> 32).to(tl.uint32)
    c2 = c0 * 0
    c3 = c2
    k0 = seed.to(tl.uint32)
    k1 = (seed >> 32).to(tl.uint32)
    for _ in tl.static_range(10):
        a = c0
        b = c2
        c0 = tl.umulhi(b, 0xCD9E8D57) ^ c1 ^ k0
        c2 = tl.umulhi(a, 0xD2511F53) ^ c3 ^ k1
        c1 = b * 0xCD9E8D57
        c3 = a * 0xD2511F53
        k0 = k0 + 0x9E3779B9
        k1 = k1 + 0xBB67AE85
    return c0.to(tl.int64), c1.to(tl.int64), c2.to(tl.int64), c3.to(tl.int64)
""",
    "_philox": """@triton.jit
def _philox(seed, offset):
    # number `offset` of seed's sequence: word offset % 4 of counter offset // 4
    r0, r1, r2, r3 = _philox4(seed, offset >> 2)
    lane = offset & 3
    return tl.where(lane < 2, tl.where(lane == 0, r0, r1), tl.where(lane == 2, r2, r3))
""",
    "_philox_words": """@triton.jit
def _philox_words(seed, counters, STEP: tl.constexpr, TAKE: tl.constexpr):
    # the numbers of Philox counters in order, along new last dims: their 4 words
    # (STEP 1), or words TAKE and TAKE + 2, value TAKE of each pair of values drawing 2
    r0, r1, r2, r3 = _philox4(seed, counters)
    if STEP == 1:
        return tl.join(tl.join(r0, r2), tl.join(r1, r3))
    elif TAKE == 0:
        return tl.join(r0, r2)
    else:
        return tl.join(r1, r3)
""",
    # ATen's: fmod moved into b's sign (a - floor(a / b) * b is NaN for an infinite
    # b and loses the bits of a big quotient)
    "_float_remainder": """@triton.jit
def _float_remainder(a, b):
    r = libdevice.fmod(a, b)
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
""",
    # an index value read from memory, checked as eager checks it: a kernel with this
    # compiles with debug=True (a device-side assert, as TorchInductor's); the
    # interpreter skips device asserts
    "_index_in_range": """@triton.jit
def _index_in_range(i, n, mask):
    tl.device_assert((i >= 0) & (i < n), "index out of range in a pytest-fusion kernel", mask=mask)
    return i
""",
    "_nextafter": """@triton.jit
def _nextafter(a, b, KIND: tl.constexpr):
    # nextafter as one step in the bits of a float32 (KIND 0), or of a bfloat16 (1:
    # a float32's top half; no bfloat16, whose subnormals the interpreter flushes)
    # or a float16 (2, its bits sign-extended: they step as a float32's) held in a float32
    if KIND == 2:
        u = a.to(tl.float16).to(tl.int16, bitcast=True).to(tl.int32)
    else:
        u = a.to(tl.int32, bitcast=True)
    one = 65536 if KIND == 1 else 1
    bits = tl.where(a == 0, tl.where(b < 0, (-2147483648 if KIND != 2 else -32768) + one, one),
                    tl.where((a < b) == (a > 0), u + one, u - one))
    if KIND == 2:
        r = bits.to(tl.int16).to(tl.float16, bitcast=True).to(tl.float32)
    else:
        r = bits.to(tl.float32, bitcast=True)
    return tl.where((a != a) | (b != b), a + b, tl.where(a == b, b, r))
""",
    "_floordiv": """@triton.jit
def _floordiv(a, b):
    q = _truncdiv(a, b)
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
""",
    "_truncdiv": """@triton.jit
def _truncdiv(a, b):
    # C division whatever the backend's `//` does (the interpreter floors): on
    # magnitudes taken negative, where the most negative value has one (its abs
    # has none), and whose quotient, being >= 0, floors and truncates alike;
    # over -1 it is a negation, which wraps as ATen's does
    if (a * 0 + b * 0).dtype.is_int_unsigned():  # the operands' type (one may be a Python int)
        q = a // b
    else:
        na = tl.where(a > 0, -a, a)
        nb = tl.where(b > 0, -b, b)
        q = tl.where(nb == -1, -na, na // tl.where(nb == -1, -2, nb))
        q = tl.where((a < 0) != (b < 0), -q, q)
    return q
""",
    "_int_fmod": """@triton.jit
def _int_fmod(a, b):
    return a - _truncdiv(a, b) * b
""",
    "_int_remainder": """@triton.jit
def _int_remainder(a, b):
    r = _int_fmod(a, b)
    return tl.where((r != 0) & ((r < 0) != (b < 0)), r + b, r)
""",
    "_int_pow": """@triton.jit
def _int_pow(a, b):
    # square and multiply over the exponent's bits; negative exponents as torch: 1, +-1 or 0
    r = a * 0 + 1
    base = a
    e = b
    for _ in tl.static_range(63):
        r = tl.where((e & 1) != 0, r * base, r)
        base = base * base
        e = e >> 1
    if not r.dtype.is_int_unsigned():  # (a may be a Python int; r is a tensor by now)
        neg = tl.where(a == 1, 1, tl.where(a == -1, tl.where((b & 1) != 0, -1, 1), 0))
        r = tl.where(b < 0, neg, r)
    return r
""",
    # libdevice's erff as eager's CUDA kernels run it (no flush to zero: Triton links
    # libdevice's flushing variant, which gives 0 for subnormal x), bit for bit, with
    # both sets of coefficients written out: libdevice picks one set per element, and
    # ptxas then moves those seven constants into registers for every element. H200,
    # bias + GELU on [8192, 4096] bf16, bound by instruction issue: 49.7 -> 43.0 us
    "_erf": """@triton.jit
def _erf(x):
    a = tl.abs(x)
    big = a >= 1.002959966659546
    t = tl.where(big, a, x * x)
    # erf(x) = 1 - 2^(-|x| (1 + pb(|x|))) above 1.00296, x (1 + ps(x^2)) below
    pb = tl.fma(tl.fma(tl.fma(tl.fma(tl.fma(tl.fma(
        0.00011219871521461755, t, -0.0013275252422317863), t, 0.00839653518050909), t,
        -0.04024658352136612), t, 0.15950430929660797), t, 0.9129176735877991), t, 0.6290600299835205)
    ps = tl.fma(tl.fma(tl.fma(tl.fma(tl.fma(tl.fma(
        8.483494457323104e-05, t, -0.0008213091641664505), t, 0.005213488824665546), t,
        -0.026868773624300957), t, 0.11284004896879196), t, -0.37612664699554443), t, 0.12837915122509003)
    s = tl.where(big, -a, x)
    r = tl.fma(tl.where(big, pb, ps), s, s)
    e = (1.0 - _ex2(r)).to(tl.uint32, bitcast=True) | (x.to(tl.uint32, bitcast=True) & 0x80000000)
    return tl.where(big, e.to(tl.float32, bitcast=True), r)
""",
    # exp as one ex2.approx.ftz (a multiply and MUFU.EX2): tl.exp keeps subnormal
    # results, at three more instructions an element. For the online softmax's step,
    # where the FMA also saves one (kernels that round to bf16 have FP fusion off).
    # H200, [2048, 50257] bf16: softmax 156.5 -> 142.8 us, log_softmax 146.6 -> 134.2
    "_exp_ftz": """@triton.jit
def _exp_ftz(x):
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x * 1.4426950408889634],
                                     dtype=tl.float32, is_pure=True, pack=1)
""",
    # the interpreter's forms of the GPU_HELPERS below
    "_unknown_zero": """@triton.jit
def _unknown_zero(x):
    return x * 0
""",
    "_expf": """@triton.jit
def _expf(x):
    return tl.exp(x)
""",
    "_rcp_rn": """@triton.jit
def _rcp_rn(x):
    return 1.0 / x
""",
    "_ex2": """@triton.jit
def _ex2(x):
    return tl.exp2(x)
""",
    "_rsqrt": """@triton.jit
def _rsqrt(x):
    return libdevice.rsqrt(x)
""",
    "_to_bf16": """@triton.jit
def _to_bf16(x):
    u = x.to(tl.uint32, bitcast=True)
    u = tl.where(x != x, 0x7FC00000, u + 0x7FFF + ((u >> 16) & 1))
    return (u >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
""",
    # NaN wins, as in torch: one max.NaN / min.NaN instruction on sm_80 and later
    # (H200, softmax over [2048, 50257] bf16: 197 -> 188 us against a compare-select)
    "_max_nan": """@triton.jit
def _max_nan(a, b):
    return tl.maximum(a, b, propagate_nan=tl.PropagateNan.ALL)
""",
    "_min_nan": """@triton.jit
def _min_nan(a, b):
    return tl.minimum(a, b, propagate_nan=tl.PropagateNan.ALL)
""",
    # logcumsumexp's combine (equal: inf + inf too; NaN wins, as in tl.where's picks)
    "_logaddexp": """@triton.jit
def _logaddexp(a, b):
    a_wins = (a > b) | (a != a)
    hi = tl.where(a_wins, a, b)
    lo = tl.where(a_wins, b, a)
    return tl.where(hi == lo, hi + 0.6931471805599453, hi + libdevice.log1p(tl.exp(lo - hi)))
""",
    "_prod": """@triton.jit
def _prod(a, b):
    return a * b
""",
    # a scan's combine function (the interpreter runs Triton's own, tl.cumsum's, as
    # compiled code, which it cannot)
    "_add": """@triton.jit
def _add(a, b):
    return a + b
""",
    # a sort of each row of a block (the interpreter, which cannot run Triton's own
    # compiled tl.sort, takes runtime/triton_build.interpreted_sort_rows instead)
    "_sort_rows": """@triton.jit
def _sort_rows(x, descending: tl.constexpr):
    return tl.sort(x, 1, descending)
""",
    # a loop's accumulator update, b from a later position than a: a stays where it
    # is as large (the earlier position wins a tie) or NaN (the first NaN wins).
    # Five ops an element, not the combiner's fourteen (H200, argmax over [2048,
    # 50257] fp32: 168 us with the combiner, against Inductor's 142)
    "_argmax_step": """@triton.jit
def _argmax_step(a, ia, b, ib):
    keep = (a >= b) | (a != a)
    return tl.where(keep, a, b), tl.where(keep, ia, ib)
""",
    "_argmin_step": """@triton.jit
def _argmin_step(a, ia, b, ib):
    keep = (a <= b) | (a != a)
    return tl.where(keep, a, b), tl.where(keep, ia, ib)
""",
    "_argmax": """@triton.jit
def _argmax(a, ia, b, ib):
    a_nan = a != a
    b_nan = b != b
    better = (a > b) | (a_nan & ~b_nan)
    tie = ((a == b) | (a_nan & b_nan)) & (ia < ib)
    pick = better | tie
    return tl.where(pick, a, b), tl.where(pick, ia, ib)
""",
    "_argmin": """@triton.jit
def _argmin(a, ia, b, ib):
    a_nan = a != a
    b_nan = b != b
    better = (a < b) | (a_nan & ~b_nan)
    tie = ((a == b) | (a_nan & b_nan)) & (ia < ib)
    pick = better | tie
    return tl.where(pick, a, b), tl.where(pick, ia, ib)
""",
    # Triton's interpreter: a row's max, min and their positions as torch gives
    # them (NaN first), from reductions it runs as numpy's (which skip NaN, and
    # fail on a row of them) and selects
    "_extreme_rows": """@triton.jit
def _extreme_rows(x, largest: tl.constexpr):
    m = tl.reduce(x, 1, tl.standard._elementwise_max if largest else tl.standard._elementwise_min)
    if x.dtype.is_floating():
        m = tl.where(_any_rows(x != x), float("nan"), m)
    return m
""",
    "_any_rows": """@triton.jit
def _any_rows(x):
    return tl.reduce(x.to(tl.int8), 1, tl.standard._elementwise_max) != 0
""",
    "_arg_rows": """@triton.jit
def _arg_rows(x, i, largest: tl.constexpr):
    none = 2147483647
    if x.dtype.is_floating():
        nan = x != x
        first_nan = tl.reduce(tl.where(nan, i, none), 1, tl.standard._elementwise_min)
        x = tl.where(nan, float("-inf") if largest else float("inf"), x)
    best = tl.reduce(x, 1, tl.standard._elementwise_max if largest else tl.standard._elementwise_min)
    pos = tl.reduce(tl.where(x == best[:, None], i, none), 1, tl.standard._elementwise_min)
    if x.dtype.is_floating():
        pos = tl.where(first_nan != none, first_nan, pos)
    return pos
""",
    # a cooperative slice at a row's edge is masked; one inside it is not, so that
    # its accesses stay 16-byte vectors (Triton vectorizes only under a mask it
    # can prove constant over each vector)
    "_load_edge": """@triton.jit
def _load_edge(ptr, mask, edge):
    if edge:
        x = tl.load(ptr, mask, other=0)
    else:
        x = tl.load(ptr)
    return x
""",
    "_store_edge": """@triton.jit
def _store_edge(ptr, value, mask, edge):
    if edge:
        tl.store(ptr, value, mask)
    else:
        tl.store(ptr, value)
""",
}
# helpers' forms for CUDA, each the one PTX instruction that libdevice's function runs:
# a kernel that calls libdevice at all links and optimizes the whole library (compiled
# for sm_90 here: bias + GELU bf16's kernel 0.22-0.26 -> 0.11-0.13 s, group_norm's
# with 32 groups 0.19-0.33 -> 0.15-0.23)
GPU_HELPERS = {
    # a GPU's integer division and remainder are C's already (truncated; the
    # remainder takes the dividend's sign), and plainly written they compile to what
    # ptxas gets right: the interpreter's form above, its negations and selects
    # vectorized by LLVM into int16 lanes, ptxas compiled wrongly for a roll's
    # backward (one gather in four read its own position; H200, Triton 3.6; as
    # pytorch#193183). Over -1 the quotient is a negation, which wraps as ATen's does.
    "_truncdiv": """@triton.jit
def _truncdiv(a, b):
    if (a * 0 + b * 0).dtype.is_int_unsigned():
        q = a // b
    else:
        q = tl.where(b == -1, -a, a // tl.where(b == -1, 1, b))
    return q
""",
    "_int_fmod": """@triton.jit
def _int_fmod(a, b):
    if (a * 0 + b * 0).dtype.is_int_unsigned():
        r = a % b
    else:
        r = tl.where(b == -1, 0, a % tl.where(b == -1, 1, b))
    return r
""",
    # zero, unknown to LLVM: an integer division by a constant 0 is undefined there, and
    # it dropped the kernel's store (the output held what memory had); so the division
    # runs, giving the GPU's answer as eager's kernel does (int32 x // 0 is -1 or -2)
    "_unknown_zero": """@triton.jit
def _unknown_zero(x):
    z = tl.inline_asm_elementwise("mov.b32 $0, 0;", "=r,r", [x.to(tl.int32)], dtype=tl.int32, is_pure=True, pack=1)
    return z.to(x.dtype)
""",
    # __nv_exp2f as Triton links libdevice (flushing subnormals)
    "_ex2": """@triton.jit
def _ex2(x):
    return tl.inline_asm_elementwise("ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)
""",
    # eager's expf, libdevice's __nv_expf (as PTX; linking libdevice doubles a kernel's
    # compile time): a scale 2^j chosen from x, x * log2(e) - j in two FMAs, ex2.approx
    # of that, times the scale. tl.exp (ex2.approx of a rounded x * log2(e)) differed
    # from eager's in 28% of float32 results (H200, randn)
    "_expf": """@triton.jit
def _expf(x):
    return tl.inline_asm_elementwise(
        "{ .reg .f32 t, j, f, e; .reg .b32 s; "
        "fma.rn.f32 t, $1, 0f3BBB989D, 0f3F000000; cvt.sat.f32.f32 t, t; "
        "fma.rm.f32 j, t, 0f437C0000, 0f4B400001; add.f32 f, j, 0fCB40007F; neg.f32 f, f; "
        "fma.rn.f32 f, $1, 0f3FB8AA3B, f; fma.rn.f32 f, $1, 0f32A57060, f; ex2.approx.ftz.f32 e, f; "
        "mov.b32 s, j; shl.b32 s, s, 23; mov.b32 j, s; mul.f32 $0, e, j; }",
        "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)
""",
    # 1 / x correctly rounded, as eager divides: the same bits as tl.div_rn(1, x), at
    # fewer instructions (rcp.rn.f32)
    "_rcp_rn": """@triton.jit
def _rcp_rn(x):
    return tl.inline_asm_elementwise("rcp.rn.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)
""",
    # eager's rsqrtf (which keeps subnormals, where libdevice's as Triton links it flushes them)
    "_rsqrt": """@triton.jit
def _rsqrt(x):
    return tl.inline_asm_elementwise("rsqrt.approx.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1)
""",
}
def helper_sources(called, cuda: bool) -> list[str]:
    """The @triton.jit helpers a kernel calls and those they call (read from the
    forms taken), in a fixed order, each in its CUDA form (GPU_HELPERS) where it
    has one and `cuda`."""
    def form(h: str) -> str:
        return (GPU_HELPERS.get(h) if cuda else None) or HELPERS[h]

    names, todo = set(), list(called)
    while todo:
        h = todo.pop()
        if h not in names:
            names.add(h)
            todo += [c for c in re.findall(r"\b(_\w+)\(", form(h)) if c in HELPERS]
    return [form(h) for h in sorted(names)]


def literal(value, dtype: torch.dtype) -> str:
    if dtype == torch.bool:
        return "True" if value else "False"
    if dtype.is_floating_point:
        v = float(value)
        if math.isnan(v):
            return "float('nan')"
        if math.isinf(v):
            return "float('inf')" if v > 0 else "float('-inf')"
        return repr(v)
    return str(int(value))


REDUCTION_INIT = {
    "sum": lambda t: literal(0, t),
    "prod": lambda t: literal(1, t),
    "logaddexp": lambda t: literal(float("-inf"), t),
    "max": lambda t: literal(float("-inf"), t) if t.is_floating_point else str(torch.iinfo(t).min) if t != torch.bool else "False",
    "min": lambda t: literal(float("inf"), t) if t.is_floating_point else str(torch.iinfo(t).max) if t != torch.bool else "True",
    "any": lambda t: "False",
    "all": lambda t: "True",
}
REDUCTION_INIT["sort_asc"] = REDUCTION_INIT["min"]  # a sort's padding: keys that sort last
REDUCTION_INIT["sort_desc"] = REDUCTION_INIT["max"]
REDUCTION_INIT["argmax"] = REDUCTION_INIT["max"]
REDUCTION_INIT["argmin"] = REDUCTION_INIT["min"]
