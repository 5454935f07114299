"""The loop-level IR.

Values inside a kernel are `Expr` trees (hash-consed by structure, so equal
subtrees are one value and codegen's CSE falls out of a dict). Index arithmetic
is sympy over integer loop variables.

Buffers are what live in memory: graph inputs, computed buffers (pointwise or
reduction bodies, each a function of its loop variables), extern calls (mm,
conv: ATen/cuBLAS) and fallbacks (any ATen op we do not lower).
"""
from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import struct
from typing import Any, Callable, ClassVar, Sequence

import sympy
import torch

from .index import sympy_str


class Expr:
    """One scalar operation. `op` names it; `args` are Exprs or plain constants."""

    __slots__ = ("op", "args", "dtype", "_hash")

    def __init__(self, op: str, args: tuple, dtype: torch.dtype):
        self.op = op
        self.args = args
        self.dtype = dtype
        self._hash = hash((op, args, dtype))

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        return (
            self is other
            or isinstance(other, Expr)
            and self._hash == other._hash
            and self.op == other.op
            and self.dtype == other.dtype
            and self.args == other.args
        )

    def __repr__(self):
        return text(self)

    def walk(self, known=()):
        """Every distinct sub-expression, producers before consumers. Values in
        `known` (already computed) are left out, and so are their operands."""
        seen: dict[Expr, None] = {}

        def visit(e):
            if e in seen or e in known:
                return
            for a in e.args:
                if isinstance(a, Expr):
                    visit(a)
            if e.op == "load":
                for _, ie in e.args[2]:
                    visit(ie)
            seen[e] = None

        visit(self)
        return list(seen)


def load(buffer: str, index: sympy.Expr, dtype: torch.dtype, indirect: tuple = ()) -> Expr:
    """Read `buffer` at `index`. `indirect` binds symbols of `index` that are
    runtime values (gather, embedding): a tuple of (sympy.Symbol, Expr)."""
    return Expr("load", (buffer, sympy.sympify(index), tuple(indirect)), dtype)


def const(value, dtype: torch.dtype) -> Expr:
    if dtype.is_floating_point:
        value = rounded_to(float(value), dtype)  # a constant cast to bfloat16 holds a bfloat16
        if is_negative_zero(value):
            # Python has 0.0 == -0.0 (one hash): the mark keeps x / -0.0 from being x / 0.0
            return Expr("const", (value, "-0"), dtype)
    elif dtype == torch.bool:
        value = bool(value)
    else:
        value = _wrapped(int(value), dtype)
    return Expr("const", (value,), dtype)


def rounded_to(value, dtype: torch.dtype):
    """A Python number as a tensor of the floating `dtype` holds it (ints and
    bools, and float64, pass unchanged)."""
    if not isinstance(value, float) or dtype == torch.float64 or not dtype.is_floating_point:
        return value
    return _rounded(struct.pack("<d", value), dtype)  # by its bits: 0.0 and -0.0 are equal keys


@functools.lru_cache(4096)
def _rounded(bits: bytes, dtype: torch.dtype) -> float:
    from torch.utils._python_dispatch import _disable_current_modes

    with _disable_current_modes():  # lowering runs under fake tensors; this one is real
        return float(torch.tensor(struct.unpack("<d", bits)[0], dtype=dtype))


def is_negative_zero(value) -> bool:
    return value == 0 and math.copysign(1.0, value) < 0


def _wrapped(value: int, dtype: torch.dtype) -> int:
    """An integer as `dtype` holds it, wrapped as ATen casts a Python int to it: in
    uint8 x > -1 compares with 255, in int8 x < 300 with 44 (C++ compared with -1
    and 300 as ints; Triton refused a constant out of its type's range)."""
    bits = 8 * dtype.itemsize
    value %= 1 << bits
    return value - (1 << bits) if dtype.is_signed and value >= 1 << (bits - 1) else value


def index_value(expr: sympy.Expr, dtype=torch.int64) -> Expr:
    return Expr("index", (sympy.sympify(expr),), dtype)


def overflows(value, dtype: torch.dtype) -> bool:
    """Whether ATen refuses to convert a Python number to `dtype` (c10's overflows):
    a finite float beyond the type's range, an integer beyond the integer type's
    (an unsigned one takes integers down to -max, which wrap, but no negative float)."""
    if dtype == torch.bool or isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    if dtype.is_floating_point:
        return math.isfinite(value) and abs(value) > torch.finfo(dtype).max
    if isinstance(value, float) and not math.isfinite(value):
        return True
    info = torch.iinfo(dtype)
    low = -info.max if info.min == 0 and isinstance(value, int) else info.min
    return not low <= value <= info.max


def cast(x: Expr, dtype: torch.dtype) -> Expr:
    if x.dtype == dtype:
        return x
    if x.op == "const":
        return const(x.args[0], dtype)
    if x.op == "cast" and x.args[0].dtype == dtype and _exact_in(x.args[0], x.dtype):
        return x.args[0]  # a round trip through a narrower type that loses nothing (a padded bf16 read)
    return Expr("cast", (x,), dtype)


# ops whose result is one of their operands
_PICKS = {"where": (1, 2), "maximum": (0, 1), "minimum": (0, 1), "neg": (0,), "abs": (0,)}


def _exact_in(x: Expr, narrow: torch.dtype) -> bool:
    """Whether every value x takes is one of `narrow`'s (floats: x then survives a
    cast to it and back unchanged): a value cast from it, a constant it holds, or
    an op that picks among such values."""
    if not (x.dtype.is_floating_point and narrow.is_floating_point):
        return False
    if x.op == "cast":
        return x.args[0].dtype == narrow
    if x.op == "const":
        v = float(x.args[0])
        return v != v or float(torch.tensor(v, dtype=narrow)) == v
    picks = _PICKS.get(x.op)
    return picks is not None and all(_exact_in(x.args[i], narrow) for i in picks)


def bitcast(x: Expr, dtype: torch.dtype) -> Expr:
    """x's bits read as `dtype` (of the same size)."""
    assert x.dtype.itemsize == dtype.itemsize, (x.dtype, dtype)
    return Expr("bitcast", (x,), dtype)


def op(name: str, *args: Expr, dtype: torch.dtype) -> Expr:
    return Expr(name, tuple(args), dtype)


def upcast(dtype: torch.dtype) -> torch.dtype:
    """Half types are computed in float32, as TorchInductor and cuDNN do."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


# the dtypes kernels of ours load, compute and store (complex, float8 and the
# unsigned integers wider than a byte are left to ATen)
KERNEL_DTYPES = frozenset({torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
                           torch.int16, torch.int8, torch.uint8, torch.bool})
# reductions whose partial results reduce with the same operation (split reductions, rows first)
REDUCED_IN_PARTS = frozenset({"sum", "prod", "max", "min", "any", "all"})

# a scatter's op by how it meets the element's value: replaces it, adds to it, keeps the larger or smaller
SCATTER_MODES = {None: "scatter_store", "sum": "scatter_add", "amax": "scatter_max", "amin": "scatter_min",
                 "prod": "scatter_prod"}
SCATTER_OPS = tuple(SCATTER_MODES.values())


def scatter(target: Expr, value: Expr, valid: Expr, reduce: str | None) -> Expr:
    """A scatter buffer's body: store `value` at element `target` (an int64 offset
    computed from index tensors) of the buffer, where `valid`; or combine it with
    the element's value (`reduce`: "sum", "amax", "amin", "prod")."""
    return Expr(SCATTER_MODES[reduce], (target, value, valid), value.dtype)


def loads(e: Expr) -> list[Expr]:
    return [s for s in e.walk() if s.op == "load"]


# ---------------------------------------------------------------------------
# Buffers


@dataclasses.dataclass(eq=False)
class Buffer:
    name: str
    size: tuple[int, ...]
    stride: tuple[int, ...]
    dtype: torch.dtype
    device: torch.device
    order: ClassVar[int] = -1  # its position among the graph's buffers (GraphLowering.register)

    @property
    def numel(self) -> int:
        n = 1
        for s in self.size:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def store_index(self, index: Sequence[sympy.Expr]) -> sympy.Expr:
        return sympy.Add(*[i * s for i, s in zip(index, self.stride)]) if index else sympy.Integer(0)


@dataclasses.dataclass(eq=False)
class InputBuffer(Buffer):
    """A graph input (placeholder). Its storage may be written by a mutation."""

    position: int = 0
    offset: int = 0  # the tensor's storage offset (Views count from its data pointer)


@dataclasses.dataclass(eq=False)
class ConstantBuffer(InputBuffer):
    """A tensor constant of the graph (an FX get_attr, e.g. torch.tensor([...]) in the code)."""

    value: Any = None


@dataclasses.dataclass(eq=False)
class ComputedBuffer(Buffer):
    """A buffer computed by generated code.

    kind 'pointwise': value(index) over `ranges` (= size).
    kind 'reduction': reduce value(index, rindex) over `reduction_ranges` for
    every point of `ranges`; the result is stored at `out_index(index)`.
    kind 'scan': the running reduction of value(index, rindex) along the one dim
    of `reduction_ranges` (cumsum, cumprod), stored for every (index, rindex) at
    `out_index(index, rindex)`.
    kind 'scatter': the buffer starts as `scatter_init`, then for every point of
    `ranges` its body (an `ir.scatter`) adds a value to, or stores it at, an
    element that index tensors pick (index_put, embedding's backward).
    """

    kind: str = "pointwise"
    ranges: tuple[int, ...] = ()
    reduction_ranges: tuple[int, ...] = ()
    reduction_type: str | None = None
    body: Callable[..., Expr] | None = None
    origins: tuple[str, ...] = ()  # names of the ATen FX nodes this buffer holds
    origin_ops: tuple[str, ...] = ()  # their ATen op names, for kernel names and reports
    # where the result lands: by default this buffer's own storage; a mutation
    # (copy_ into a graph input) stores into that input instead.
    store_target: "InputBuffer | None" = None
    store_offset: int = 0
    # a reduction's output position for every outer index (keepdim and layout handled here)
    out_index: Callable[[Sequence[sympy.Expr]], sympy.Expr] | None = None
    # a scatter's starting contents: a window of a buffer to copy, or a number to fill with
    scatter_init: Any = 0
    # a sort's leading elements a row that are read (topk's k): the rest may stay unsorted
    sort_keep: int = 0

    @property
    def is_reduction(self) -> bool:
        return self.kind == "reduction"

    @property
    def is_scan(self) -> bool:
        return self.kind == "scan"

    @property
    def is_scatter(self) -> bool:
        return self.kind == "scatter"

    def reads_back(self, held: "ComputedBuffer") -> None:
        """This buffer loads `held` rather than recomputing it: the ATen nodes
        that `held` computes are not part of this buffer any more."""
        gone = set(held.origins)
        keep = [i for i, o in enumerate(self.origins) if o not in gone]
        self.origins = tuple(self.origins[i] for i in keep)
        self.origin_ops = tuple(self.origin_ops[i] for i in keep)

    def evaluate(self, index, rindex=()) -> Expr:
        """The body at these loop variables, as this buffer computes it: values
        that earlier buffers hold are read back from them (see `reader`)."""
        with reading_as(self):
            return self.body(index, rindex) if self.kind in ("reduction", "scan") else self.body(index)

    @property
    def storage_name(self) -> str:
        return self.store_target.name if self.store_target is not None else self.name


@dataclasses.dataclass(eq=False)
class ExternCall(Buffer):
    """An ATen call that cuBLAS/cuDNN/ATen does better than we would: mm, conv."""

    target: Any = None  # the ATen overload
    args: tuple = ()  # TensorRef | python values, nested
    kwargs: dict = dataclasses.field(default_factory=dict)
    origins: tuple[str, ...] = ()
    origin_ops: tuple[str, ...] = ()
    kind: str = "extern"
    outputs: int = 1  # tensors it returns: 0 (run for effect), 1, or those of a sequence
    sequence: bool = False  # it returns a tuple or list (of any length, one too), read through MultiOutput buffers
    reason: str = ""  # for fallbacks: why it was not lowered

    @property
    def returns_tensor(self) -> bool:
        """Whether the call returns one tensor: its own buffer."""
        return self.outputs == 1 and not self.sequence


@dataclasses.dataclass(eq=False)
class MultiOutput(Buffer):
    """The element at `path` of a sequence an extern or fallback call returns
    (a list inside a tuple: two indices)."""

    parent: ExternCall | None = None
    path: tuple[int, ...] = (0,)

    @property
    def subscript(self) -> str:
        return "".join(f"[{i}]" for i in self.path)


@dataclasses.dataclass(frozen=True)
class TensorRef:
    """A tensor argument to an extern call: a strided window onto a buffer."""

    buffer: str
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    is_whole: bool  # the buffer itself, no as_strided needed


_reader: contextvars.ContextVar = contextvars.ContextVar("reader", default=None)


def reader() -> "ComputedBuffer | None":
    """The buffer whose body is being evaluated (None while lowering)."""
    return _reader.get()


@contextlib.contextmanager
def reading_as(buf: "ComputedBuffer | None"):
    """Evaluate bodies in the block as `buf` reads them (None: inline everything)."""
    token = _reader.set(buf)
    try:
        yield
    finally:
        _reader.reset(token)


# the longest text of an expression: one that shares sub-expressions (an unrolled
# binary search's, each step reading the last twice) doubles its text with each
# step (bucketize over 33 boundaries spent 3 minutes writing its IR line)
TEXT_LIMIT = 4000


def text(e: Expr, limit: int = TEXT_LIMIT) -> str:
    """`e` written out, each shared sub-expression's text built once and every
    text cut to about `limit` characters (with an ellipsis)."""
    memo: dict[int, str] = {}

    def go(x) -> str:
        if not isinstance(x, Expr):
            return repr(x)
        if id(x) in memo:
            return memo[id(x)]
        if x.op == "load":
            ind = "".join(f", {s}={go(ie)}" for s, ie in x.args[2])
            out = f"load({x.args[0]}, {sympy_str(x.args[1])}{ind})"
        elif x.op == "const":
            out = repr(x.args[0])
        elif x.op == "index":
            out = f"index({sympy_str(x.args[0])})"
        elif x.op == "cast":
            out = f"to_{str(x.dtype).replace('torch.', '')}({go(x.args[0])})"
        else:
            out = f"{x.op}({', '.join(map(go, x.args))})"
        memo[id(x)] = out = out if len(out) <= limit else out[:limit] + "…"
        return out

    return go(e)


def describe_buffer(buf: Buffer) -> str:
    """One readable line of IR, as the report and `print(graph.ir)` show it."""
    dt = str(buf.dtype).replace("torch.", "")
    shape = f"{dt}{list(buf.size)}"
    if isinstance(buf, ConstantBuffer):
        return f"{buf.name} = constant {shape} stride={list(buf.stride)}"
    if isinstance(buf, InputBuffer):
        return f"{buf.name} = input[{buf.position}] {shape} stride={list(buf.stride)}"
    if isinstance(buf, ComputedBuffer):
        from .index import loop_vars, simplify

        idx = loop_vars("i", len(buf.ranges))
        ridx = loop_vars("r", len(buf.reduction_ranges))
        ranges = {**dict(zip(idx, buf.ranges)), **dict(zip(ridx, buf.reduction_ranges))}
        target = f" -> {buf.store_target.name}" if buf.store_target is not None else ""
        if buf.kind in ("reduction", "scan"):
            body = map_indices(buf.evaluate(idx, ridx), lambda e: simplify(e, ranges))
            return (
                f"{buf.name} = {buf.kind} {shape}{target} {buf.reduction_type} over "
                f"{list(buf.reduction_ranges)} for {list(buf.ranges)}: {body!r}"
            )
        body = map_indices(buf.evaluate(idx), lambda e: simplify(e, ranges))
        if buf.is_scatter:
            init = _arg_str(buf.scatter_init)
            return f"{buf.name} = scatter {shape} from {init} over {list(buf.ranges)}: {body!r}"
        return f"{buf.name} = pointwise {shape}{target} over {list(buf.ranges)}: {body!r}"
    if isinstance(buf, ExternCall):
        return f"{buf.name} = {buf.kind} {buf.target}({', '.join(_arg_str(a) for a in buf.args)}) {shape}"
    if isinstance(buf, MultiOutput):
        return f"{buf.name} = {buf.parent.name}{buf.subscript} {shape}"
    return f"{buf.name} {shape}"


def _arg_str(a) -> str:
    if isinstance(a, TensorRef):
        return a.buffer if a.is_whole else f"{a.buffer}.as_strided({list(a.size)}, {list(a.stride)}, {a.offset})"
    if isinstance(a, (list, tuple)):
        return "[" + ", ".join(_arg_str(x) for x in a) + "]"
    return repr(a)


def map_indices(e: Expr, fn, memo=None) -> Expr:
    """Rebuild `e` with every sympy index passed through `fn`."""
    memo = {} if memo is None else memo
    if e in memo:
        return memo[e]
    if e.op == "load":
        name, index, indirect = e.args
        new = Expr("load", (name, fn(index), tuple((s, map_indices(x, fn, memo)) for s, x in indirect)), e.dtype)
    elif e.op == "index":
        new = Expr("index", (fn(e.args[0]),), e.dtype)
    elif e.op == "const":
        new = e
    else:
        new = Expr(e.op, tuple(map_indices(a, fn, memo) if isinstance(a, Expr) else a for a in e.args), e.dtype)
    memo[e] = new
    return new
