"""Triton codegen: one @triton.jit kernel per FusedKernel, in a module that also
holds META (launch configurations and argument specs) for the runtime.

Pointwise kernels are 1-D over the flat x index (contiguous accesses print as
`x0`, which Triton vectorizes). Reduction kernels are 2-D blocks [XBLOCK, RBLOCK]:
the persistent form holds whole rows in registers (every phase is straight-line
code, so a row is read once however many passes the C++ makes); the looped form
makes one pass over r per phase, like the C++ backend."""
from __future__ import annotations

import math

import sympy
import torch

from .. import ir
from ..index import FloorDiv, ModularIndexing, simplify_with_ranges
from ..scheduler import R, X, FusedKernel, Member
from .common import kernel_args, member_order

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

# rows up to this many elements (padded to a power of 2) stay in registers
PERSISTENT_MAX_RBLOCK = {2: 8192, 4: 4096, 8: 2048}
# reducing a strided dim: only short ones, so a block is wide in the contiguous x
OUTER_PERSISTENT_MAX_RBLOCK = 128
# kernels touching at least this many elements get a few configs timed at build
AUTOTUNE_MIN_ELEMENTS = 1 << 22
INT32_LIMIT = 2**31 - 1
# enough programs to fill an H100/H200 twice over
SM_COUNT = 132


def _pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


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
LIBDEVICE_BINARY = {"atan2", "hypot", "copysign", "nextafter"}


def _unary(op: str, a: str, t: torch.dtype) -> str:
    fp = t.is_floating_point
    if op in TL_UNARY and (fp or op == "abs"):
        return f"{TL_UNARY[op]}({a})"
    if op in LIBDEVICE_UNARY:
        return f"libdevice.{op}({a})"
    simple = {
        "neg": f"-{a}",
        "sigmoid": f"1.0 / (1.0 + tl.exp(-{a}))",
        "exp2": f"libdevice.exp2({a})",
        "sqrt": f"libdevice.sqrt({a})",
        "rsqrt": f"libdevice.rsqrt({a})",
        "reciprocal": f"1.0 / {a}",
        "round": f"libdevice.nearbyint({a})",
        "sign": f"tl.where({a} > 0, 1, tl.where({a} < 0, -1, 0)).to({TL_DTYPE[t]})",
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


def _binary(op: str, a: str, b: str, t: torch.dtype) -> str:
    fp = t.is_floating_point
    simple = {"add": "+", "sub": "-", "mul": "*", "bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^",
              "lshift": "<<", "rshift": ">>", "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
    if op in simple:
        return f"{a} {simple[op]} {b}"
    if op == "truediv":
        return f"{a} / {b}"
    if op == "logical_and":
        return f"({a} != 0) & ({b} != 0)"
    if op == "logical_or":
        return f"({a} != 0) | ({b} != 0)"
    if op == "logical_xor":
        return f"({a} != 0) ^ ({b} != 0)"
    if op == "maximum":  # NaN-propagating, as torch.maximum
        return f"tl.where(({a} > {b}) | ({a} != {a}), {a}, {b})"
    if op == "minimum":
        return f"tl.where(({a} < {b}) | ({a} != {a}), {a}, {b})"
    if op == "fmax":
        return f"tl.where(({a} >= {b}) | ({b} != {b}), {a}, {b})"
    if op == "fmin":
        return f"tl.where(({a} <= {b}) | ({b} != {b}), {a}, {b})"
    if op == "floordiv":
        return f"_floordiv({a}, {b})"
    if op == "truncdiv":
        return f"_truncdiv({a}, {b})"
    if op == "remainder":
        return f"{a} - tl.floor({a} / {b}) * {b}" if fp else f"_int_remainder({a}, {b})"
    if op == "fmod":
        return f"libdevice.fmod({a}, {b})" if fp else f"_int_fmod({a}, {b})"
    if op == "pow":
        if not fp:
            raise NotImplementedError("integer pow in Triton codegen")
        return f"libdevice.pow({a}, {b})"
    if op in LIBDEVICE_BINARY:
        return f"libdevice.{op}({a}, {b})"
    raise NotImplementedError(f"Triton codegen has no binary op {op!r}")


# helpers the kernels call: (source, names of the helpers it needs)
HELPERS = {
    "_floordiv": """@triton.jit
def _floordiv(a, b):
    q = _truncdiv(a, b)
    r = a - q * b
    return tl.where((r != 0) & ((r < 0) != (b < 0)), q - 1, q)
""",
    "_truncdiv": """@triton.jit
def _truncdiv(a, b):
    # C division whatever the backend's `//` does (the interpreter floors)
    q = tl.abs(a) // tl.abs(b)
    return tl.where((a < 0) != (b < 0), -q, q)
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
    "_max_nan": """@triton.jit
def _max_nan(a, b):
    return tl.where((a > b) | (a != a), a, b)
""",
    "_min_nan": """@triton.jit
def _min_nan(a, b):
    return tl.where((a < b) | (a != a), a, b)
""",
    "_prod": """@triton.jit
def _prod(a, b):
    return a * b
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
}
HELPER_DEPS = {"_floordiv": ["_truncdiv"], "_int_fmod": ["_truncdiv"], "_int_remainder": ["_int_fmod", "_truncdiv"]}


def _literal(value, dtype: torch.dtype) -> str:
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
    "sum": lambda t: _literal(0, t),
    "prod": lambda t: _literal(1, t),
    "max": lambda t: _literal(float("-inf"), t) if t.is_floating_point else str(torch.iinfo(t).min) if t != torch.bool else "False",
    "min": lambda t: _literal(float("inf"), t) if t.is_floating_point else str(torch.iinfo(t).max) if t != torch.bool else "True",
    "any": lambda t: "False",
    "all": lambda t: "True",
}
REDUCTION_INIT["argmax"] = REDUCTION_INIT["max"]
REDUCTION_INIT["argmin"] = REDUCTION_INIT["min"]


class Value:
    """A rendered value: its code, the loop axes it varies along ('x', 'r'),
    and whether it is a Triton tensor (False: a Python literal)."""

    __slots__ = ("code", "axes", "tensor")

    def __init__(self, code: str, axes: frozenset, tensor: bool = True):
        self.code, self.axes, self.tensor = code, axes, tensor


# -- launch configurations ---------------------------------------------------------------------


def _configs(kernel: FusedKernel, device: torch.device, persistent: bool, rblock: int, inner: bool, itemsize: int):
    """Candidate launch configurations, best guess first. Programs hold about
    16 elements per thread (64 bytes), and there are enough of them to fill the
    GPU twice where the sizes allow."""
    xn, rn = kernel.xnumel, max(kernel.rnumel, 1)
    reduction = _is_reduction(kernel)
    if device.type != "cuda":  # the interpreter pays per op and program: few, big programs
        if not reduction:
            return [dict(XBLOCK=min(_pow2(xn), 1 << 16), num_warps=1)]
        rb = rblock if persistent else min(_pow2(rn), 1024)
        return [dict(XBLOCK=max(1, min(_pow2(xn), (1 << 14) // rb)), RBLOCK=rb, num_warps=1)]

    def fill(xb, floor):  # fewer rows per program while the grid is too small
        while xb > floor and -(-xn // xb) < 2 * SM_COUNT:
            xb //= 2
        return xb

    def warps(elems, lo=2, hi=16):
        return min(hi, max(lo, elems * itemsize // 2048))

    def cfg(xb, rb, w):
        return dict(XBLOCK=xb, RBLOCK=rb, num_warps=w, num_stages=1)

    if not reduction:
        xb = min(fill(1024, 128), _pow2(xn))
        return [dict(XBLOCK=xb, num_warps=4 if xb >= 512 else 2 if xb >= 256 else 1, num_stages=1)]
    big = xn * rn >= AUTOTUNE_MIN_ELEMENTS
    if persistent and inner:
        xb = fill(max(1, min(_pow2(xn), (16384 // itemsize) // rblock, 64)), 1)
        w = warps(xb * rblock)
        out = [cfg(xb, rblock, w)]
        if big:
            out += [cfg(xb, rblock, v) for v in (w // 2, w * 2) if 2 <= v <= 16]
            if xb > 1:
                out.append(cfg(xb // 2, rblock, max(2, w // 2)))
        return out
    if persistent:  # a short strided dim: wide in x, so each row of the block is coalesced
        xb = fill(max(1, min(_pow2(xn), 4096 // rblock, 1024)), 32)
        return [cfg(xb, rblock, warps(xb * rblock, hi=8))]
    if inner:
        rb = min(rblock, 8192 // itemsize)
        out = [cfg(1, rb, warps(rb))]
        if big:
            out += [cfg(1, rb // 2, warps(rb // 2)), cfg(1, rb * 2, warps(rb * 2))]
        return out
    xb = fill(min(_pow2(xn), 64), 32)
    rb = max(4, 2048 // xb)
    out = [cfg(xb, rb, 4)]
    if big:
        out += [cfg(min(_pow2(xn), xb * 2), max(4, rb // 2), 4), cfg(xb, rb * 2, 8)]
    return out


def _is_reduction(kernel: FusedKernel) -> bool:
    return any(m.role == "reduction" for m in kernel.members)


# -- the kernel ------------------------------------------------------------------------------------


class TritonKernel:
    def __init__(self, kernel: FusedKernel, name: str, buffers: dict):
        self.k = kernel
        self.name = name
        self.buffers = buffers
        self.args = kernel_args(kernel)
        self.members = {m.node.name: m for m in kernel.members}
        self.reduction = _is_reduction(kernel)
        self.rank = 2 if self.reduction else 1
        self.xnumel = kernel.xnumel
        self.rnumel = max(kernel.rnumel, 1) if self.reduction else 1
        self.device = self._device()
        itemsize = max((buffers[n].dtype.itemsize for n in self.args.inputs if n in buffers), default=4)
        self.itemsize = itemsize
        rblock = _pow2(self.rnumel)
        self.inner = self._inner()
        limit = PERSISTENT_MAX_RBLOCK.get(min(max(itemsize, 2), 8), 4096) if self.inner else OUTER_PERSISTENT_MAX_RBLOCK
        self.persistent = self.reduction and rblock <= limit
        self.configs = _configs(kernel, self.device, self.persistent, rblock, self.inner, itemsize)
        xbs = [c["XBLOCK"] for c in self.configs]
        rbs = [c.get("RBLOCK", 1) for c in self.configs]
        self.need_xmask = any(self.xnumel % xb for xb in xbs)
        self.need_rmask = self.reduction and any(self.rnumel % rb for rb in rbs)
        self.int64 = self._needs_int64()
        self.helpers: set[str] = set()
        self.tmp = 0
        self.regs: dict[str, Value] = {}  # member name -> value held in registers
        self.alias = self._same_reductions()  # reduction -> an earlier one computing the same
        self.lines: list[str] = []

    def _same_reductions(self) -> dict[str, str]:
        first: dict = {}
        alias = {}
        for _, members in member_order(self.k):
            for m in members:
                if m.role == "reduction":
                    key = (m.node.buffer.reduction_type, m.value)
                    if key in first:
                        alias[m.node.name] = first[key]
                    else:
                        first[key] = m.node.name
        return alias

    def _device(self) -> torch.device:
        for n in self.args.all():
            if n in self.buffers:
                return self.buffers[n].device
        return torch.device("cpu")

    def _inner(self) -> bool:
        """True when the reduced dim is the contiguous one in most loads."""
        if not self.reduction:
            return True
        votes = 0
        for m in self.k.members:
            for e in m.value.walk():
                if e.op == "load" and e.args[0] not in self.members:
                    idx = sympy.expand(e.args[1])
                    if R in idx.free_symbols:
                        votes += 1 if idx.coeff(R) == 1 else -1
        return votes >= 0

    def _needs_int64(self) -> bool:
        if self.xnumel * self.rnumel > INT32_LIMIT:
            return True
        return any(self.buffers[n].numel > INT32_LIMIT for n in self.args.all() if n in self.buffers)

    # -- shapes ----------------------------------------------------------------
    def shape(self, axes) -> str:
        if self.rank == 1:
            return "[XBLOCK]"
        return f"[XBLOCK, {'RBLOCK' if 'r' in axes else '1'}]"

    def ones_shape(self) -> str:
        return "[1]" if self.rank == 1 else "[1, 1]"

    def as_tensor(self, v: Value, dtype) -> Value:
        if v.tensor:
            return v
        return Value(f"tl.full({self.ones_shape()}, {v.code}, {TL_DTYPE[dtype]})", frozenset())

    def full(self, v: Value, axes, dtype) -> str:
        """Code for v broadcast to the block of `axes`."""
        if not v.tensor:
            return f"tl.full({self.shape(axes)}, {v.code}, {TL_DTYPE[dtype]})"
        if v.axes == frozenset(axes) or (self.rank == 1 and "x" in v.axes):
            return v.code
        return f"tl.broadcast_to({v.code}, {self.shape(axes)})"

    def mask(self, axes) -> str | None:
        parts = []
        if "x" in axes and self.need_xmask:
            parts.append("xmask")
        if "r" in axes and self.need_rmask:
            parts.append("rmask")
        return " & ".join(parts) if parts else None

    # -- expressions --------------------------------------------------------------
    def new_tmp(self) -> str:
        self.tmp += 1
        return f"tmp{self.tmp - 1}"

    def index_axes(self, idx: sympy.Expr, cse: dict, indirect) -> frozenset:
        axes = set()
        syms = idx.free_symbols
        if X in syms:
            axes.add("x")
        if R in syms:
            axes.add("r")
        for s, e in indirect:
            if s in syms:
                axes |= cse[e].axes
        return frozenset(axes)

    def simplify(self, idx: sympy.Expr) -> sympy.Expr:
        return simplify_with_ranges(sympy.sympify(idx), {X: self.xnumel, R: self.rnumel})

    def emit(self, e: ir.Expr, cse: dict, out: list[str], indent: str) -> Value:
        for s in e.walk():
            if s in cse:
                continue
            v = self._expr(s, cse)
            if not v.tensor or v.code.isidentifier():
                cse[s] = v
                continue
            name = self.new_tmp()
            out.append(f"{indent}{name} = {v.code}")
            cse[s] = Value(name, v.axes)
        return cse[e]

    def _expr(self, s: ir.Expr, cse: dict) -> Value:
        t = s.dtype
        if s.op == "const":
            if t == torch.float64:
                return Value(f"tl.full({self.ones_shape()}, {_literal(s.args[0], t)}, tl.float64)", frozenset())
            return Value(_literal(s.args[0], t), frozenset(), tensor=False)
        if s.op == "index":
            idx = self.simplify(s.args[0])
            axes = self.index_axes(idx, cse, ())
            code = texpr(idx)
            if not axes:
                return Value(code, frozenset(), tensor=False)
            want = torch.int64 if t == torch.int64 else torch.int32
            if t == torch.int64 and not self.int64:
                code = f"({code}).to(tl.int64)"
            elif t != want or t not in (torch.int32, torch.int64):
                code = f"({code}).to({TL_DTYPE[t]})"
            return Value(code, axes)
        if s.op == "load":
            return self._load(s, cse)
        args = [cse[a] for a in s.args if isinstance(a, ir.Expr)]
        if s.op == "cast":
            a = args[0]
            src = s.args[0].dtype
            if not a.tensor:
                return Value(_literal(s.args[0].args[0], t) if s.args[0].op == "const" else a.code, a.axes, False)
            if t == torch.bool:
                return Value(f"{a.code} != 0", a.axes)
            return Value(f"{a.code}.to({TL_DTYPE[t]})" if src != t else a.code, a.axes)
        if not any(a.tensor for a in args):  # constant-only: make one operand a tensor
            args[0] = self.as_tensor(args[0], s.args[0].dtype)
        axes = frozenset().union(*[a.axes for a in args])
        codes = [a.code if a.code.isidentifier() or not a.tensor else f"({a.code})" for a in args]
        in_t = s.args[0].dtype if isinstance(s.args[0], ir.Expr) else t
        if s.op == "where":
            return Value(f"tl.where({codes[0]}, {codes[1]}, {codes[2]})", axes)
        if len(codes) == 1:
            code = _unary(s.op, codes[0], in_t)
        else:
            code = _binary(s.op, codes[0], codes[1], in_t)
        for h in ("_floordiv", "_truncdiv", "_int_fmod", "_int_remainder"):
            if h + "(" in code:
                self.helpers.add(h)
        return Value(code, axes)

    def _load(self, s: ir.Expr, cse: dict) -> Value:
        name, index, indirect = s.args
        if name in self.regs:
            return self.regs[name]
        names = {sym: cse[x].code for sym, x in indirect}
        idx = self.simplify(index)
        axes = self.index_axes(idx, cse, indirect)
        ptr = self.args.ptr(name)
        code = texpr(idx, names)
        mask = self.mask(axes)
        other = ", other=0" if mask else ""
        m = f", {mask}" if mask else ""
        return Value(f"tl.load({ptr} + ({code}){m}{other})", axes)

    # -- members ----------------------------------------------------------------------
    def store(self, m: Member, v: Value, out: list[str], indent: str):
        if not m.stored:
            return
        buf = m.node.buffer
        idx = self.simplify(m.store_index)
        axes = set(self.index_axes(idx, {}, ()))
        if self.reduction:
            axes.add("x")
            if m.role == "full":
                axes.add("r")
        else:
            axes = {"x"}
        code = self.full(v, axes, m.value.dtype)
        if buf.dtype != m.value.dtype:
            code = f"({code}) != 0" if buf.dtype == torch.bool else f"({code}).to({TL_DTYPE[buf.dtype]})"
        mask = self.mask(axes)
        where = texpr(idx)
        if self.index_axes(idx, {}, ()) != frozenset(axes):  # the pointers must cover the whole block
            where = f"{where} + tl.full({self.shape(axes)}, 0, tl.int32)"
        out.append(f"{indent}tl.store({self.args.ptr(buf.storage_name)} + ({where}), {code}{', ' + mask if mask else ''})")

    # -- rendering ------------------------------------------------------------------------
    def render(self) -> str:
        params = [self.args.ptr(n) for n in self.args.all()]
        params.append("XBLOCK: tl.constexpr")
        if self.reduction:
            params.append("RBLOCK: tl.constexpr")
        body: list[str] = []
        if self.reduction:
            self._render_reduction(body)
        else:
            self._render_pointwise(body)
        head = [
            "import triton",
            "import triton.language as tl",
            "from triton.language.extra import libdevice",
            "",
            f"META = {self.meta()!r}",
            "",
        ]
        helpers = self._helper_closure()
        parts = [HELPERS[h] for h in sorted(helpers)]
        kernel = [
            "@triton.jit",
            f"def {self.name}({', '.join(params)}):",
            *body,
        ]
        return "\n".join(head) + "\n" + "\n".join(p + "\n" for p in parts) + "\n".join(kernel) + "\n"

    def _helper_closure(self) -> set[str]:
        out = set(self.helpers)
        for h in list(out):
            out.update(HELPER_DEPS.get(h, []))
        return out

    def meta(self) -> dict:
        args = []
        for n in self.args.all():
            b = self.buffers.get(n)
            args.append(dict(
                name=n,
                dtype=str(b.dtype).replace("torch.", "") if b is not None else "float32",
                extent=self._extent(n),
                # graph inputs and extern results may be views at any address
                check_align=not isinstance(b, ir.ComputedBuffer),
            ))
        return dict(
            kind="reduction" if self.reduction else "pointwise",
            xnumel=self.xnumel,
            rnumel=self.rnumel,
            persistent=self.persistent,
            device=self.device.type,
            configs=self.configs,
            args=args,
        )

    def _extent(self, name: str) -> int:
        """Elements an argument must have for every index the kernel uses."""
        from ..index import upper_bound

        b = self.buffers.get(name)
        ext = 1
        if b is not None and b.numel:
            ext = 1 + sum((s - 1) * abs(st) for s, st in zip(b.size, b.stride)) + getattr(b, "offset", 0)
        ranges = {X: self.xnumel, R: self.rnumel}
        for m in self.k.members:
            for e in m.value.walk():
                if e.op == "load" and e.args[0] == name and not e.args[2]:
                    ub = upper_bound(e.args[1], ranges)
                    if ub is not None:
                        ext = max(ext, ub + 1)
            if m.stored and m.node.buffer.storage_name == name:
                ub = upper_bound(m.store_index, ranges)
                if ub is not None:
                    ext = max(ext, ub + 1)
        return int(ext)

    def _prologue(self, body: list[str]):
        pid = "tl.program_id(0).to(tl.int64)" if self.int64 else "tl.program_id(0)"
        body.append(f"    xnumel = {self.xnumel}")
        if self.reduction:
            body.append(f"    rnumel = {self.rnumel}")
        body.append(f"    xoffset = {pid} * XBLOCK")
        if self.reduction:
            body.append("    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]")
        else:
            body.append("    xindex = xoffset + tl.arange(0, XBLOCK)")
        if self.need_xmask:
            body.append("    xmask = xindex < xnumel")
        body.append("    x0 = xindex")
        if self.reduction:
            body.append("    rbase = tl.arange(0, RBLOCK)[None, :]")

    def _render_pointwise(self, body: list[str]):
        self._prologue(body)
        cse: dict = {}
        for m in self.k.members:
            v = self.emit(m.value, cse, body, "    ")
            self.regs[m.node.name] = v
            self.store(m, v, body, "    ")

    def _r_vars(self, body: list[str], indent: str, looped: bool):
        body.append(f"{indent}rindex = {'roffset + rbase' if looped else 'rbase'}")
        if self.need_rmask:
            body.append(f"{indent}rmask = rindex < rnumel")
        body.append(f"{indent}r0 = rindex")

    def _render_reduction(self, body: list[str]):
        self._prologue(body)
        if self.persistent:
            self._r_vars(body, "    ", looped=False)
            cse: dict = {}
            for phase, members in member_order(self.k):
                for m in members:
                    self._member(m, cse, body, "    ")
            return
        row_cse: dict = {}
        written: set[str] = set()  # buffers stored by earlier loops of this kernel
        for phase, members in member_order(self.k):
            if phase % 2 == 1 or phase < 0:
                for m in members:
                    self._member(m, row_cse, body, "    ")
                continue
            reads = {n for m in members for n in m.reads}
            if reads & written:  # re-read what other threads of this program wrote
                body.append("    tl.debug_barrier()")
            self._loop(members, row_cse, body)
            written |= {m.node.name for m in members if m.stored and m.role == "full"}

    def _member(self, m: Member, cse: dict, body: list[str], indent: str):
        """A member in straight-line code (pointwise, persistent, or between loops)."""
        if m.node.name in self.alias:
            v = self.regs[self.alias[m.node.name]]
        else:
            v = self.emit(m.value, cse, body, indent)
            if m.role == "reduction":
                v = self._reduce_block(m, v, body, indent)
        self.regs[m.node.name] = v
        self.store(m, v, body, indent)

    def _masked(self, m: Member, v: Value) -> str:
        t = m.value.dtype
        code = self.full(v, {"x", "r"}, t)
        if self.need_rmask:
            code = f"tl.where(rmask, {code}, {REDUCTION_INIT[m.node.buffer.reduction_type](t)})"
        return code

    def _reduce_block(self, m: Member, v: Value, body: list[str], indent: str) -> Value:
        """Reduce a [XBLOCK, RBLOCK] block along r: a [XBLOCK, 1] value."""
        rt = m.node.buffer.reduction_type
        acc = f"acc_{m.node.name}"
        code = self._masked(m, v)
        if rt in ("argmax", "argmin"):
            body.append(f"{indent}{acc}_v = {code}")
            body.append(f"{indent}{acc}_i = tl.broadcast_to(rindex, [XBLOCK, RBLOCK])")
            body.append(f"{indent}{acc} = {self._final(rt, acc + '_v', acc + '_i')}")
        else:
            body.append(f"{indent}{acc} = {self._final(rt, code)}")
        return Value(acc, frozenset({"x"}))

    def _combiner(self, rt: str, positional: bool = True) -> str:
        """The combine function for tl.reduce. The interpreter runs Triton's own
        combiners in numpy and any other one element by element, so CPU kernels
        use Triton's (which ignore NaN in max/min, and whose arg reductions return
        positions along the axis: `positional`); GPU kernels propagate NaN as torch does."""
        if self.device.type != "cuda" and (rt in ("max", "min") or positional and rt in ("argmax", "argmin")):
            return {"max": "tl.standard._elementwise_max", "min": "tl.standard._elementwise_min",
                    "argmax": "tl.standard._argmax_combine_tie_break_left",
                    "argmin": "tl.standard._argmin_combine_tie_break_left"}[rt]
        helper = {"prod": "_prod", "max": "_max_nan", "min": "_min_nan", "argmax": "_argmax", "argmin": "_argmin"}.get(rt)
        if helper:
            self.helpers.add(helper)
            return helper
        return {"sum": "tl.standard._sum_combine", "any": "tl.standard._elementwise_max",
                "all": "tl.standard._elementwise_min"}[rt]

    def _final(self, rt: str, code: str, index: str | None = None, positional: bool = True) -> str:
        """Code reducing the block `code` along r, as a [XBLOCK, 1] value."""
        fn = self._combiner(rt, positional)
        if index is not None:  # arg reductions: reduce (value, index) pairs, keep the index
            return f"tl.reduce(({code}, {index}), 1, {fn})[1][:, None]"
        if rt in ("any", "all"):
            return f"(tl.reduce(({code}).to(tl.int8), 1, {fn}) != 0)[:, None]"
        return f"tl.reduce({code}, 1, {fn})[:, None]"

    def _loop(self, members: list[Member], row_cse: dict, body: list[str]):
        reds = [m for m in members if m.role == "reduction" and m.node.name not in self.alias]
        for m in reds:
            t = m.value.dtype
            rt = m.node.buffer.reduction_type
            acc = f"_acc_{m.node.name}"
            body.append(f"    {acc} = tl.full([XBLOCK, RBLOCK], {REDUCTION_INIT[rt](t)}, {TL_DTYPE[t]})")
            if rt in ("argmax", "argmin"):
                body.append(f"    {acc}_i = tl.full([XBLOCK, RBLOCK], 0, tl.int32)")
        body.append("    for roffset in range(0, rnumel, RBLOCK):")
        ind = "        "
        self._r_vars(body, ind, looped=True)
        cse = dict(row_cse)
        for m in members:
            if m.node.name in self.alias:
                continue
            v = self.emit(m.value, cse, body, ind)
            if m.role != "reduction":
                self.regs[m.node.name] = v
                self.store(m, v, body, ind)
                continue
            rt = m.node.buffer.reduction_type
            acc = f"_acc_{m.node.name}"
            code = self.full(v, {"x", "r"}, m.value.dtype)
            if rt in ("argmax", "argmin"):
                self.helpers.add(f"_{rt}")
                body.append(f"{ind}{acc}_nv, {acc}_ni = _{rt}({acc}, {acc}_i, {code}, tl.broadcast_to(rindex, [XBLOCK, RBLOCK]))")
                if self.need_rmask:
                    body.append(f"{ind}{acc} = tl.where(rmask, {acc}_nv, {acc})")
                    body.append(f"{ind}{acc}_i = tl.where(rmask, {acc}_ni, {acc}_i)")
                else:
                    body.append(f"{ind}{acc} = {acc}_nv")
                    body.append(f"{ind}{acc}_i = {acc}_ni")
                continue
            step = {
                "sum": f"{acc} + {code}",
                "prod": f"{acc} * {code}",
                "max": f"_max_nan({acc}, {code})",
                "min": f"_min_nan({acc}, {code})",
                "any": f"{acc} | ({code})",
                "all": f"{acc} & ({code})",
            }[rt]
            if rt in ("max", "min"):
                self.helpers.add(f"_{rt}_nan")
            if self.need_rmask:
                step = f"tl.where(rmask, {step}, {acc})"
            body.append(f"{ind}{acc} = {step}")
        for m in reds:
            rt = m.node.buffer.reduction_type
            acc = f"acc_{m.node.name}"
            index = f"_{acc}_i" if rt in ("argmax", "argmin") else None
            body.append(f"    {acc} = {self._final(rt, '_' + acc, index, positional=False)}")
            v = Value(acc, frozenset({"x"}))
            self.regs[m.node.name] = v
            self.store(m, v, body, "    ")
        for m in members:
            if m.node.name in self.alias:
                self.regs[m.node.name] = self.regs[self.alias[m.node.name]]
                self.store(m, self.regs[m.node.name], body, "    ")
        for m in members:  # a loop's full values do not outlive it
            if m.role == "full":
                self.regs.pop(m.node.name, None)


def render(kernel: FusedKernel, name: str, buffers: dict) -> str:
    return TritonKernel(kernel, name, buffers).render()
