"""Triton codegen: one @triton.jit kernel per FusedKernel, in a module that also
holds META (launch configurations, argument and workspace specs) for the runtime.

How the kernel maps onto programs comes from triton_config.plan:
- pointwise: 1-D blocks over the flat x0 (contiguous accesses print as `x0`,
  which Triton vectorizes), or 2-D tiles (y0, x0) when a transpose would make
  1-D accesses uncoalesced (or, when all of them are transposed, 1-D blocks
  over the flat x0 taken in their memory order);
- reductions: blocks [XBLOCK, RBLOCK]. Persistent: whole rows in registers, every
  phase straight-line code, so a row is read once however many passes the C++
  makes. Looped: one pass over r per phase, like the C++ backend. Split: a
  looped reduction over few rows spread over several programs per row; each
  stores its partial result, the last to finish (an atomic counter) combines
  them in a fixed order and runs the per-row epilogue. Cooperative: a handful
  of long rows read more than once, each slice of a row held in registers by
  its own program; the row's programs meet at a barrier after each reduction."""
from __future__ import annotations

import dataclasses
import math

import sympy
import torch

from .. import ir
from ..index import always_holds, as_bound, fold_divmod, simplify_with_ranges, unclamp, upper_bound
from ..scheduler import R, X, FusedKernel, Member, online_softmax_sums
from . import triton_config
from .common import SCAN_COMBINES, SORTS, Y, external_loads, in_order, kernel_args, member_order
from .triton_ops import (FP32_HELPERS, REDUCTION_INIT, TL_DTYPE, binary, helper_sources, literal, takes_tensors_only,
                         texpr, unary)

INT32_LIMIT = 2**31 - 1
# rows walked from their 16-byte boundary (_row_shift) more than once run faster
# in steps of at most this many (H200, [2048, 50257] per call: softmax fp32 4096:
# 272 us, 8192: 431; layer_norm fp32 255 and 311; softmax bf16 2048: 164, 8192:
# 277), while aligned rows of 50264 take 8192 (softmax fp32 250 against 295)
SHIFTED_MULTIPASS_MAX_RBLOCK = 4096
# a kernel launched before the one ahead of it has finished waits for it before it
# touches memory (triton_config.dependent_launch). It lets the next one launch when
# it exits, not sooner: triggering that launch on entry (gdc_launch_dependents) was
# slower on an H200, for a softmax then a column sum [256, 1024] 11.1 us per call
# against 6.3 (7.1 without PDL), group_norm 8 groups 86.4 against 84.5 (85.7)
DEPENDENT_LAUNCH_WAIT = "    tl.extra.cuda.gdc_wait()"
# a scatter's combining ops (tl.store for the rest)
ATOMICS = {"scatter_add": "tl.atomic_add", "scatter_max": "tl.atomic_max", "scatter_min": "tl.atomic_min"}
CALLED_HELPERS = ("_float_remainder", "_nextafter", "_floordiv", "_truncdiv", "_int_fmod", "_int_remainder", "_int_pow", "_philox",
                  "_unknown_zero", *FP32_HELPERS.values())


class Value:
    """A rendered value: its code, the block dims it varies along ('x': dim 0,
    'r': dim 1), and whether it is a Triton tensor (False: a Python literal)."""

    __slots__ = ("code", "axes", "tensor")

    def __init__(self, code: str, axes: frozenset, tensor: bool = True):
        self.code, self.axes, self.tensor = code, axes, tensor


@dataclasses.dataclass
class Hoist:
    """Code before a loop over r, where values that do not vary along r go."""
    lines: list[str]
    row_cse: dict  # value -> the row-level name computing it
    local: set[str] = dataclasses.field(default_factory=set)  # names computed in the loop


class TritonKernel:
    def __init__(self, kernel: FusedKernel, name: str, buffers: dict):
        self.k = kernel
        self.name = name
        self.buffers = buffers
        self.args = kernel_args(kernel)
        self.members = {m.node.name: m for m in kernel.members}
        # loads that may move out of a loop over r: not of what the kernel stores (its
        # outputs), and none where it writes an input (another input may alias it)
        self.loads_move = not any(m.stored and m.node.buffer.store_target is not None for m in kernel.members)
        self.alias = self._same_reductions()  # reduction -> an earlier one computing the same
        self.device = self._device()
        self.pdl = triton_config.dependent_launch(self.device)
        # bytes an element of the tensors it streams (a scalar, such as the seed of its random numbers, is not)
        sizes = [buffers[n].dtype.itemsize for n in self.args.all() if n in buffers and buffers[n].numel > 1]
        itemsize = max(sizes, default=4)
        self.narrowest = min(sizes, default=4)
        self.int64 = kernel.xnumel * max(kernel.rnumel, 1) > INT32_LIMIT or any(
            self.buffers[n].numel > INT32_LIMIT for n in self.args.all() if n in self.buffers)
        self.plan = triton_config.plan(kernel, self.device, itemsize, self.int64)
        self.reduction = self.plan.reduction
        self.tiled = self.plan.tile is not None
        self.split = self.plan.split
        # loop over r: buffer -> L2 policy of its loads in the loop being rendered
        self.evict: dict[str, str] = {}
        self.evict_stores = False  # a looped kernel's row stores: see _render_reduction
        self.online: dict = {}  # a looped kernel's online softmax sums (see _online_output_math)
        self.padded: dict = {}  # value -> the value with its padded reads folded (see _fold_padding)
        self.rank = 2 if self.reduction or self.tiled else 1
        self.xnumel = kernel.xnumel
        self.rnumel = max(kernel.rnumel, 1) if self.reduction else 1
        if self.tiled:  # x0 = tile * y0 + x0: block dim 0 walks y0, dim 1 walks x0
            n = self.plan.tile
            self.sub = {X: n * Y + X}
            self.ranges = {Y: self.xnumel // n, X: n}
            self.dim_of = {Y: "x", X: "r"}
            self.blocks, self.masks = ("YBLOCK", "XBLOCK"), ("ymask", "xmask")
            numels = (self.xnumel // n, n)
        else:  # another order: see common.choose_layout and common.reduction_order
            walked = R if self.reduction else X
            self.sub = {walked: in_order(self.plan.order, walked)} if self.plan.order else {}
            self.ranges = {X: self.xnumel, R: self.rnumel}
            self.dim_of = {X: "x", R: "r"}
            self.blocks, self.masks = ("XBLOCK", "RBLOCK"), ("xmask", "rmask")
            numels = (self.xnumel, self.rnumel)
        cfgs = self.plan.configs
        self.need_mask = {
            "x": any(numels[0] % c[self.blocks[0]] for c in cfgs),
            "r": self.rank == 2 and any(numels[1] % (c[self.blocks[1]] * self.split) for c in cfgs),
        }
        self.row_align = self._row_alignment()
        self.row_stride, self.shift = self._row_shift()
        if self.shift:
            self.need_mask["r"] = True  # the first and last blocks of a row
            short = [c for c in self.plan.configs if c["RBLOCK"] <= SHIFTED_MULTIPASS_MAX_RBLOCK]
            if self.k.loops > 1 and short and not self.plan.coop:
                self.plan.configs = short
        if self.plan.coop:  # a shifted row's slices start up to shift - 1 elements early
            self.row_pad = max(self.shift - 1, 0)
            for c in self.plan.configs:
                c["grid"] = self.xnumel * triton_config.coop_slices(self.rnumel, c["RBLOCK"], self.row_pad)
            self.coop_max_slices = max(c["grid"] for c in self.plan.configs) // self.xnumel
            self.coop_reds = [m for m in kernel.members if m.role == "reduction" and m.node.name not in self.alias]
            self.barriers = len({m.phase for m in self.coop_reds})
        self.workspace = self._workspace()
        self.helpers: set[str] = set()
        self.rounds_in_registers = False  # a value rounded to 16 bits, then computed on
        self.checks_indices = False  # asserts index values (compiled with debug=True)
        self.tmp = 0
        self.regs: dict[str, Value] = {}  # member name -> value held in registers
        self.wide_regs: set[str] = set()  # of them, float64 values of narrower buffers (a CPU scan's)
        self.draws = any(e.op == "philox" for m in kernel.members for e in m.value.walk())  # random numbers

    def _row_alignment(self) -> int | None:
        """Bytes to which all of a 2-D kernel's accesses along the inner block dim are
        aligned, when some are aligned to less than 16 (rows of odd length): Triton
        gives those one element per thread, and 16-byte vectors to better aligned
        ones (a weight along the row), and the two layouts then meet through shared
        memory on every row. Loads told this alignment share the narrow layout
        (H100, layer_norm with weight and bias, bf16 [8192, 4097]: 97 -> 63 us;
        [4096, 12289]: 117 -> 86 us)."""
        if self.rank != 2:
            return None
        aligns = [a for idx, size, indirect in self._accesses()
                  if not indirect and (a := self._alignment(self.simplify(idx), size)) is not None]
        return min(aligns) if aligns and min(aligns) < 16 else None

    def _accesses(self) -> list[tuple[sympy.Expr, int, tuple]]:
        """(index, itemsize, indirect) of each load from outside the kernel and each store."""
        out = [(e.args[1], self._itemsize(e.args[0]), e.args[2]) for e in external_loads(self.k)]
        return out + [(m.store_index, m.node.buffer.dtype.itemsize, ()) for m in self.k.members if m.stored]

    def _row_shift(self) -> tuple[int, int]:
        """(S, V) when a looped reduction reads and writes rows of S elements that do
        not start on 16 bytes (a vocabulary of 50257), every access along r being
        r0 + S * x0: the loop then walks each row from the 16-byte boundary before
        it, V elements to 16 bytes, r0 = rindex - rshift. Its inner blocks load and
        store whole vectors; only the first and last are masked (H200, softmax over
        [2048, 50257], per call: fp32 296 -> 275 us, bf16 193 -> 173; argmax fp32
        140.5 -> 114.4, its positions being r0). (0, 0) otherwise."""
        if not self.reduction or self.plan.persistent or self.tiled or self.split > 1 or self.int64 or self.k.is_scan:
            return 0, 0
        if self.rnumel < 2 * max(c["RBLOCK"] for c in self.plan.configs):
            return 0, 0
        accesses = [(sympy.expand(self.simplify(idx)), size, indirect) for idx, size, indirect in self._accesses()]
        along_r = [a for a in accesses if R in a[0].free_symbols]
        indirect = any(a[2] for a in along_r)
        stride = triton_config.row_stride(self.k, None if indirect else [idx for idx, _, _ in along_r])
        if stride is None:
            return 0, 0
        vec = 16 // min(size for _, size, _ in along_r)
        return (stride, vec) if stride % vec else (0, 0)

    def _alignment(self, idx: sympy.Expr, itemsize: int) -> int | None:
        """The alignment in bytes Triton sees for an access along the inner block dim
        (None: not contiguous along it): the gcd of the other terms' coefficients."""
        inner = next(s for s, d in self.dim_of.items() if d == "r")  # the block's dim 1
        idx = sympy.expand(idx)
        rest = idx - inner
        if idx.coeff(inner) != 1 or inner in rest.free_symbols:
            return None
        g = 0
        for term in sympy.Add.make_args(rest):
            c = term.as_coeff_Mul()[0]
            g = math.gcd(g, int(c)) if c.is_Integer else 1
        return math.gcd(16, g * itemsize)

    def _device(self) -> torch.device:
        for n in self.args.all():
            if n in self.buffers:
                return self.buffers[n].device
        return torch.device("cpu")

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

    def _workspace(self) -> list[dict]:
        """Split reductions: one partial result per row and split for each
        reduction, and a counter per block of rows (zeroed once, reset by its
        last program). Cooperative ones: a partial per row and slice for each
        reduction; per row a counter for each barrier and one of programs done,
        and the ticket counter. The kernel owns it: one launch at a time."""
        if self.plan.coop:
            numel = self.xnumel * self.coop_max_slices
            out = [dict(name=f"ws_ptr{i}", dtype=str(m.value.dtype).replace("torch.", ""), numel=numel)
                   for i, m in enumerate(self.coop_reds)]
            return out + [dict(name="sem_ptr", dtype="int32", numel=self.xnumel * (self.barriers + 1) + 1)]
        if self.split == 1:
            return []
        reds = [m for m in self.k.members if m.role == "reduction"]
        out = [dict(name=f"ws_ptr{i}", dtype=str(m.value.dtype).replace("torch.", ""), numel=self.xnumel * self.split)
               for i, m in enumerate(reds)]
        return out + [dict(name="sem_ptr", dtype="int32", numel=self.xnumel)]

    # -- shapes and masks ---------------------------------------------------------------
    def shape(self, axes) -> str:
        if self.rank == 1:
            return f"[{self.blocks[0]}]"
        return f"[{self.blocks[0]}, {self.blocks[1] if 'r' in axes else '1'}]"

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
        parts = [self.masks[i] for i, d in enumerate(("x", "r")) if d in axes and self.need_mask[d]]
        return " & ".join(parts) if parts else None

    # -- expressions ----------------------------------------------------------------------
    def new_tmp(self) -> str:
        self.tmp += 1
        return f"tmp{self.tmp - 1}"

    def index_axes(self, idx: sympy.Expr, cse: dict, indirect=()) -> frozenset:
        syms = idx.free_symbols
        axes = {d for s, d in self.dim_of.items() if s in syms}
        for s, e in indirect:
            if s in syms:
                axes |= cse[e].axes
        return frozenset(axes)

    def simplify(self, idx: sympy.Expr) -> sympy.Expr:
        """An index in the kernel's flat x0 (and r0), in the variables its blocks walk
        (a tile's y0 and x0, a transposed order's x0), simplified."""
        e = sympy.sympify(idx)
        if self.sub:
            e = e.xreplace(self.sub)
        return self.reduce(e)

    def reduce(self, e: sympy.Expr) -> sympy.Expr:
        """An index already in the walked variables (simplify's), simplified again: a
        second substitution would walk a tile's or an order's variables once more."""
        return fold_divmod(simplify_with_ranges(e, self.ranges))

    def emit(self, e: ir.Expr, cse: dict, out: list[str], indent: str, hoist: Hoist | None = None) -> Value:
        given, e = e, self._fold_padding(e)
        for s in e.walk():
            if s in cse:
                continue
            v = self._expr(s, cse)
            if not v.tensor or v.code.isidentifier():
                cse[s] = v
                continue
            name = self.new_tmp()
            cse[s] = Value(name, v.axes)
            if hoist is not None and self._row_invariant(s, v, cse, hoist):
                hoist.lines.append(f"    {name} = {v.code}")
                hoist.row_cse[s] = cse[s]
            else:
                out.append(f"{indent}{name} = {v.code}")
                if hoist is not None:
                    hoist.local.add(name)
        cse[given] = cse[e]
        return cse[e]

    def _fold_padding(self, e: ir.Expr) -> ir.Expr:
        """e with each where(cond, load, c) whose cond is what the load's mask
        checks (a padded read: the pad's bounds checks, which the load's unclamped
        mask makes already, see unclamp) as the masked load itself, reading c
        where it is masked. H200, do_bench, 3x3 stride 1 over [32, 256, 28, 28]
        with padding 1, kernel alone, us: max_pool2d bf16 26.2 -> 21.6, fp32 27.6
        -> 26.2; avg_pool2d bf16 28.8 -> 24.4 (33.3 -> 28.9 without the padding
        in the count)."""
        if e in self.padded:
            return self.padded[e]
        out = e
        if e.op == "where":
            out = self._padded_load(*e.args) or e
        if out is e and e.op != "load":
            args = tuple(self._fold_padding(a) if isinstance(a, ir.Expr) else a for a in e.args)
            if args != e.args:
                out = ir.Expr(e.op, args, e.dtype)
        self.padded[e] = out
        return out

    def _padded_load(self, cond: ir.Expr, picked: ir.Expr, other: ir.Expr) -> ir.Expr | None:
        """`picked`, a load (or a load cast to another type), as one that reads
        `other` where masked, if `cond` checks what the load's mask does and the
        load's type holds `other` exactly; else None."""
        load = picked.args[0] if picked.op == "cast" else picked
        if load.op != "load" or len(load.args) > 3 or load.args[2] or load.args[0] in self.members:
            return None  # (a value of this kernel's may be read from registers, unmasked)
        if other.op != "const" or len(other.args) > 1 or not load.dtype.is_floating_point:
            return None  # (a second const arg marks -0.0)
        value = other.args[0]
        if not isinstance(value, (int, float)) or ir.rounded_to(float(value), load.dtype) != value:
            return None
        checks, (_, bounds) = self._index_checks(cond), self._unclamped(load.args[1])
        if not bounds or checks is None or checks != {self._canonical(b) for b in bounds}:
            return None
        padded = ir.Expr("load", load.args + (float(value),), load.dtype)
        return padded if picked is load else ir.Expr(picked.op, (padded, *picked.args[1:]), picked.dtype)

    def _index_checks(self, cond: ir.Expr) -> set | None:
        """`cond` as the set of mask terms (see unclamp) whose conjunction it is,
        less those the ranges make true; None when it is not index values
        compared with integers."""
        if cond.op == "logical_and":
            sides = [self._index_checks(c) for c in cond.args]
            return None if None in sides else sides[0] | sides[1]
        if cond.op not in ("lt", "le", "gt", "ge") or len(cond.args) != 2:
            return None
        index, bound = cond.args
        if index.op != "index" or bound.op != "const" or type(bound.args[0]) is not int:
            return None
        u, c = sympy.expand(self.simplify(index.args[0])), bound.args[0]
        op, c = {"ge": (">=", c), "gt": (">=", c + 1), "lt": ("<=", c - 1), "le": ("<=", c)}[cond.op]
        return set() if always_holds(u, op, c, {X: self.xnumel, R: self.rnumel}) else {self._canonical(as_bound(u, op, c))}

    def _canonical(self, term: tuple) -> tuple:
        """A mask term (u, op, c) with u simplified and expanded, to compare terms
        built from the load's index with those built from a check's."""
        u, op, c = term
        return sympy.expand(self.reduce(u)), op, int(c)

    def _row_invariant(self, s: ir.Expr, v: Value, cse: dict, hoist: Hoist) -> bool:
        """Whether a value inside a loop over r is the same at every r and can be
        computed once before the loop: it varies along no r, reads nothing this kernel
        writes (a load is not moved across a store to it) and uses no value of the loop's."""
        if "r" in v.axes or any(isinstance(a, ir.Expr) and cse[a].code in hoist.local for a in s.args):
            return False
        if s.op == "load":
            return self.loads_move and s.args[0] not in self.args.outputs and not any(cse[x].code in hoist.local for _, x in s.args[2])
        return True

    def _expr(self, s: ir.Expr, cse: dict) -> Value:
        t = s.dtype
        if s.op == "const":
            if t in (torch.float32, torch.float64) and ir.is_negative_zero(s.args[0]):
                # -0.0 from its bits: Triton 3.6 drops a Python -0.0's sign (x / -0.0 was +inf)
                bits = "0x80000000, tl.uint32" if t == torch.float32 else "0x8000000000000000, tl.uint64"
                return Value(f"tl.full({self.ones_shape()}, {bits}).to({TL_DTYPE[t]}, bitcast=True)", frozenset())
            if t == torch.float64:  # a Python float would be rounded to float32 first
                return Value(f"tl.full({self.ones_shape()}, {literal(s.args[0], t)}, tl.float64)", frozenset())
            return Value(literal(s.args[0], t), frozenset(), tensor=False)
        if s.op == "index":
            idx = self.simplify(s.args[0])
            axes = self.index_axes(idx, cse)
            code = texpr(idx)
            if not axes:
                return Value(code, frozenset(), tensor=False)
            native = torch.int64 if self.int64 else torch.int32
            return Value(f"({code}).to({TL_DTYPE[t]})" if t != native else code, axes)
        if s.op == "load":
            return self._load(s, cse)
        if s.op == "philox" and (block := self._philox_block(s, cse)) is not None:
            return block
        args = [cse[a] for a in s.args if isinstance(a, ir.Expr)]
        if s.op == "in_range":
            return self._index_in_range(*args)
        if s.op == "cast":
            return self._cast(args[0], s.args[0].dtype, t)
        if s.op == "bitcast":
            return Value(f"{self.full(args[0], args[0].axes, s.args[0].dtype)}.to({TL_DTYPE[t]}, bitcast=True)", args[0].axes)
        if not any(a.tensor for a in args):  # constant-only: make one operand a tensor
            args[0] = self.as_tensor(args[0], s.args[0].dtype)
        axes = frozenset().union(*[a.axes for a in args])
        in_t = s.args[0].dtype if isinstance(s.args[0], ir.Expr) else t

        def render(args):
            codes = [a.code if a.code.isidentifier() or not a.tensor else f"({a.code})" for a in args]
            if s.op == "where":
                return f"tl.where({codes[0]}, {codes[1]}, {codes[2]})"
            if s.op == "fma":
                return f"tl.fma({codes[0]}, {codes[1]}, {codes[2]})"
            if len(codes) == 1:
                return unary(s.op, codes[0], in_t, eager_math=not self._online_output_math(s))
            return binary(s.op, codes[0], codes[1], in_t, cuda=self.device.type == "cuda")

        code = render(args)
        if takes_tensors_only(code) and not all(a.tensor for a in args):
            code = render([self.as_tensor(a, x.dtype) for a, x in zip(args, [x for x in s.args if isinstance(x, ir.Expr)])])
        self.helpers.update(h for h in CALLED_HELPERS if h + "(" in code)
        return Value(code, axes)

    def _online_output_math(self, s: ir.Expr) -> bool:
        """Whether s is an online softmax's output math, exp(x - max) or 1 / sum, which
        takes Triton's forms (ex2.approx, div.full), not eager's expf and correctly
        rounded reciprocal: the row's sum is added in another order than eager's, so
        these outputs are not eager's bits either way, and eager's forms cost. H200,
        softmax over [2048, 50257] per call: bf16 151.6 us with expf, 141.0 with
        Triton's exp; fp32 258.8 with Triton's exp and rcp.rn against 233.4 with
        div.full, in kernels that differ in that one line, run once a row (ptxas adds
        a slow-path call for it)."""
        sums = self.online.values()
        return any(s == self._fold_padding(m.value) for m in sums) or (s.op == "reciprocal" and s.args[0].op == "load"
                                                   and any(s.args[0].args[0] == m.node.name for m in sums))

    def _index_in_range(self, index: Value, size: Value) -> Value:
        """An index value, asserted on the device to lie in [0, size) where its lanes are live."""
        self.helpers.add("_index_in_range")
        self.checks_indices = True
        index = self.as_tensor(index, torch.int64)
        return Value(f"_index_in_range({index.code}, {size.code}, {self.mask(index.axes)})", index.axes)

    def _philox_block(self, s: ir.Expr, cse: dict) -> Value | None:
        """A block's random numbers where consecutive elements along the block's last
        dim take consecutive numbers, one or two each (a 1-D block at offsets step * x0
        + c, or the rows of a reduction's [XBLOCK, RBLOCK] block, each row starting a
        Philox counter): one Philox call for every 4 numbers (_philox_words), not one
        for each. A tile, a transposed order, a shifted row or numbers in another
        order take _philox."""
        offset = s.args[1]
        along, block = (R, "RBLOCK") if self.reduction else (X, "XBLOCK")
        if offset.op != "index" or self.sub or self.shift or any(c[block] % 4 for c in self.plan.configs):
            return None
        idx = sympy.expand(self.simplify(offset.args[0]))
        step = idx.coeff(along)
        rest = sympy.expand(idx - step * along)
        row = rest.coeff(X) if self.reduction else 0
        rest = sympy.expand(rest - row * X)
        if step not in (1, 2) or not rest.is_Integer or row % 4 or int(rest) % 4 >= step:
            return None
        take = int(rest) % 4
        if self.reduction:  # the rows' first numbers in this block, [XBLOCK, 1]
            first = f"x0.to(tl.int64) * {row} + rstart * {step} + {int(rest) - take}"
            counters, shape = f"tl.arange(0, RBLOCK * {step} // 4)[None, :]", "[XBLOCK, RBLOCK]"
        else:
            first = f"tl.program_id(0).to(tl.int64) * XBLOCK * {step} + {int(rest) - take}"
            counters, shape = f"tl.arange(0, XBLOCK * {step} // 4)", "[XBLOCK]"
        self.helpers.add("_philox_words")
        words = f"_philox_words({cse[s.args[0]].code}, ({first}) // 4 + {counters}, {step}, {take})"
        return Value(f"tl.reshape({words}, {shape})", frozenset({"x", "r"} if self.reduction else {"x"}))

    def _cast(self, a: Value, src: torch.dtype, dst: torch.dtype) -> Value:
        if not a.tensor:
            return Value(a.code, a.axes, False)
        if dst in (torch.float16, torch.bfloat16) and src.is_floating_point and src.itemsize > 2:
            self.rounds_in_registers = True
        return Value(self.convert(a.code, src, dst), a.axes)

    def convert(self, code: str, src: torch.dtype, dst: torch.dtype) -> str:
        """Code converting `code` from src to dst, rounding as torch does."""
        if src == dst:
            return code
        if dst == torch.bool:
            return f"({code}) != 0"
        if dst in (torch.float16, torch.bfloat16) and src not in (torch.float32, torch.float16, torch.bfloat16):
            code, src = f"({code}).to(tl.float32)", torch.float32  # as torch converts: through float32
        if dst == torch.bfloat16 and self.device.type != "cuda":
            self.helpers.add("_to_bf16")  # the interpreter truncates: round to nearest even here, from float32
            return f"_to_bf16({self.convert(code, src, torch.float32)})"
        return f"({code}).to({TL_DTYPE[dst]})"

    def _unclamped(self, index: sympy.Expr) -> tuple[sympy.Expr, list]:
        """A load's index, simplified and unclamped, and the bounds that mask it (see unclamp)."""
        idx = self.simplify(index)
        if self.shift and R in idx.free_symbols:
            return idx, []
        unclamped, bounds = unclamp(idx, {X: self.xnumel, R: self.rnumel})
        if unclamped != idx:  # the clamps hid divisions and remainders that now fold (a padded read: x0 + c)
            idx = self.reduce(unclamped)
        return idx, bounds

    def _load(self, s: ir.Expr, cse: dict) -> Value:
        """A load of (buffer, index, indirect), and where _fold_padding made it one,
        the value it reads where masked."""
        name, index, indirect = s.args[:3]
        if name in self.wide_regs:  # read as stored: the buffer's dtype, as its load says
            v = self.regs[name]
            return Value(self.convert(v.code, torch.float64, s.dtype), v.axes)
        if name in self.regs:
            return self.regs[name]
        idx, bounds = self._unclamped(index)
        axes = self.index_axes(idx, cse, indirect)
        names = {sym: cse[x].code for sym, x in indirect}
        code = self._index_code(idx, names)
        if not axes and not any(cse[x].tensor for _, x in indirect):
            # one element: a block of one, as a 0-d value mixes badly with blocks
            # (an index read from memory is one already)
            code = f"tl.full({self.ones_shape()}, {code}, {'tl.int64' if self.int64 else 'tl.int32'})"
        mask = " & ".join(filter(None, [self.mask(axes), *(f"({texpr(u, names)} {op} {c})" for u, op, c in bounds)]))
        m = f", {mask}, other={literal(s.args[3], s.dtype) if len(s.args) > 3 else 0}" if mask else ""
        if "r" in axes and name in self.evict:
            m += f", eviction_policy='{self.evict[name]}'"
        elif self.plan.evict_last_streams and {"x", "r"} <= axes:  # a persistent block's rows
            m += ", eviction_policy='evict_last'"
        elif not self.reduction and not self.tiled and not indirect and idx != X:
            # away from the element it computes (a broadcast, a shifted or strided read),
            # a pointwise load reads lines that other elements read too: L2 keeps them
            # (H200, per call, both with the half block: rope 67.8 -> 66.7 us, permute_copy
            # [8, 2048, 32, 128] bf16 67.9 -> 66.3)
            m += ", eviction_policy='evict_last'"
        ptr = f"{self.args.ptr(name)} + ({code})"
        if self.row_align and not indirect and (self._alignment(idx, self._itemsize(name)) or 0) > self.row_align:
            ptr = f"tl.multiple_of({ptr}, [1, {self.row_align}])"  # the rows' layout: see _row_alignment
        if self._edge_only(axes, mask) and not bounds:
            self.helpers.add("_load_edge")
            return Value(f"_load_edge({ptr}, {mask}, edge)", axes)
        return Value(f"tl.load({ptr}{m})", axes)

    def _edge_only(self, axes, mask) -> bool:
        """A cooperative kernel over shifted rows masks only its edge slices."""
        return bool(self.plan.coop and self.shift and mask and "r" in axes)

    def _index_code(self, idx: sympy.Expr, indirect: dict | None = None) -> str:
        if self.shift and R in idx.free_symbols:  # r0 + S * x0, from the row's 16-byte boundary
            return "rindex + rrow"
        return texpr(idx, indirect or {})

    # -- members ----------------------------------------------------------------------------
    def store(self, m: Member, v: Value, out: list[str], indent: str):
        if not m.stored:
            return
        buf = m.node.buffer
        idx = self.simplify(m.store_index)
        axes = self._store_axes(m)
        code = self.convert(self.full(v, axes, m.value.dtype), m.value.dtype, buf.dtype)
        mask = self.mask(axes)
        if self.plan.coop and "r" not in axes:  # a row's value: stored by its first slice
            mask = "split == 0"
        if 0 < buf.sort_keep < self.rnumel:  # topk: only the first k keys a row are read
            mask = f"{mask} & (rindex < {buf.sort_keep})" if mask else f"rindex < {buf.sort_keep}"
        where = self._index_code(idx)
        if self.index_axes(idx, {}) != frozenset(axes):  # the pointers must cover the whole block
            where = f"{where} + tl.full({self.shape(axes)}, 0, tl.int32)"
        if self._edge_only(axes, mask):
            self.helpers.add("_store_edge")
            out.append(f"{indent}_store_edge({self.args.ptr(buf.storage_name)} + ({where}), {code}, {mask}, edge)")
            return
        hint = ", eviction_policy='evict_first'" if self.evict_stores and "r" in axes else ""
        out.append(f"{indent}tl.store({self.args.ptr(buf.storage_name)} + ({where}), {code}{', ' + mask if mask else ''}{hint})")

    def _store_axes(self, m: Member) -> set:
        """The block dims a member's stores cover: a tile's two, a reduction's
        [x, r] for a per-element member, else x alone."""
        if self.tiled or (self.reduction and m.role in ("full", "scan")):
            return {"x", "r"}
        return {"x"}

    def _member(self, m: Member, cse: dict, body: list[str], indent: str):
        """A member in straight-line code (pointwise, persistent, or between loops)."""
        if m.value.op in ir.SCATTER_OPS:
            self._scatter(m, cse, body, indent)
            return
        if m.node.name in self.alias:
            v = self.regs[self.alias[m.node.name]]
        else:
            v = self.emit(m.value, cse, body, indent)
            if m.role == "reduction":
                v = self._reduce_block(m, v, body, indent)
        self.regs[m.node.name] = v
        self.store(m, v, body, indent)

    def _scatter(self, m: Member, cse: dict, body: list[str], indent: str):
        """Each value stored at (or combined atomically with) the element its index picks."""
        target, value, valid = (self.emit(a, cse, body, indent) for a in m.value.args)
        buf = m.node.buffer
        axes = self._store_axes(m)  # a tile's two dims where its loads are transposed
        code = self.convert(self.full(value, axes, m.value.dtype), m.value.dtype, buf.dtype)
        masks = [c for c in (self.mask(axes), None if m.value.args[2].op == "const" else valid.code) if c]
        mask = f", mask={' & '.join(f'({c})' for c in masks)}" if masks else ""
        where = f"{self.args.ptr(buf.storage_name)} + ({self.full(target, axes, torch.int64)})"
        if m.value.op in ATOMICS:
            body.append(f"{indent}{ATOMICS[m.value.op]}({where}, {code}{mask}, sem='relaxed')")
        else:
            body.append(f"{indent}tl.store({where}, {code}{mask})")

    # -- rendering ----------------------------------------------------------------------------
    def render(self) -> str:
        params = [self.args.ptr(n) for n in self.args.all()] + [w["name"] for w in self.workspace]
        params += [f"{b}: tl.constexpr" for b in (self.blocks if self.rank == 2 else self.blocks[:1])]
        body: list[str] = []
        if self.pdl:
            body.append(DEPENDENT_LAUNCH_WAIT)
        if self.tiled:
            self._render_tiled(body)
        elif self.k.is_scan:
            self._render_scan(body)
        elif self.reduction:
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
            *helper_sources(self.helpers, self.device.type == "cuda"),
            "@triton.jit",
            f"def {self.name}({', '.join(params)}):",
        ]
        return "\n".join(head + body) + "\n"

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
            persistent=self.plan.persistent,
            tile=self.plan.tile,
            order=self.plan.order,
            split=self.split,
            device=self.device.type,
            configs=self.plan.configs,
            args=args,
            workspace=self.workspace,
            pdl=self.pdl,
            atomic=self.k.is_scatter,  # its result depends on the order of the atomics (see triton_build)
            tune_on_call=self._tunes_on_call(),
            # Triton's FP fusion contracts a * b + c into an FMA across a rounding
            # to bf16/fp16 in between, which eager does round (TorchInductor turns
            # it off when it emulates eager's casts, for the same reason)
            fp_fusion=not self.rounds_in_registers,
            debug=self.checks_indices,
        )

    def _tunes_on_call(self) -> bool:
        """Its candidates are timed on its first call's tensors: a gather (see
        Plan.gathers) that writes only what it does not read, so launching it again
        gives the same result (triton_build also checks that no two tensors share
        memory)."""
        read = {e.args[0] for e in external_loads(self.k)}
        return (self.plan.gathers and not self.workspace and not self.k.is_scatter
                and not read & set(self.args.outputs))

    def _itemsize(self, name: str) -> int:
        b = self.buffers.get(name)
        return b.dtype.itemsize if b is not None else 4

    def _extent(self, name: str) -> int:
        """Elements an argument must have for every index the kernel uses."""
        b = self.buffers.get(name)
        ext = 1
        if b is not None and b.numel:
            ext = 1 + sum((s - 1) * abs(st) for s, st in zip(b.size, b.stride)) + getattr(b, "offset", 0)
        ranges = {X: self.xnumel, R: self.rnumel}
        for m in self.k.members:
            for e in m.value.walk():
                if e.op == "load" and e.args[0] == name and not e.args[2]:
                    ub = upper_bound(e.args[1], ranges)
                    ext = max(ext, ub + 1) if ub is not None else ext
            if m.stored and m.node.buffer.storage_name == name and not m.node.buffer.is_scatter:
                ub = upper_bound(m.store_index, ranges)
                ext = max(ext, ub + 1) if ub is not None else ext
        return int(ext)

    def _pid(self) -> str:
        return "tl.program_id(0).to(tl.int64)" if self.int64 else "tl.program_id(0)"

    def _render_pointwise(self, body: list[str]):
        body.append(f"    xnumel = {self.xnumel}")
        if not (self.need_mask["x"] and triton_config.masks_last_block_only(self.xnumel, self.plan.configs, self.narrowest)):
            body.append(f"    xindex = {self._pid()} * XBLOCK + tl.arange(0, XBLOCK)")
            if self.need_mask["x"]:
                body.append("    xmask = xindex < xnumel")
            body.append("    x0 = xindex")
            self._straight(body)
            return
        body += [f"    xoffset = {self._pid()} * XBLOCK", "    xindex = xoffset + tl.arange(0, XBLOCK)", "    x0 = xindex"]
        inner: list[str] = []
        self._straight(inner)
        inner = ["    " + line for line in "\n".join(inner).splitlines()]
        # the same code twice: an all-true mask, which Triton folds away, then the real one
        body += ["    if xoffset + XBLOCK <= xnumel:", "        xmask = tl.full([XBLOCK], True, tl.int1)", *inner,
                 "    else:", "        xmask = xindex < xnumel", *inner]

    def _render_tiled(self, body: list[str]):
        yn, xn = self.ranges[Y], self.ranges[X]
        body += [
            f"    ynumel = {yn}",
            f"    xnumel = {xn}",
            f"    pid = {self._pid()}",
            "    xblocks = (xnumel + XBLOCK - 1) // XBLOCK",
            "    yindex = (pid // xblocks) * YBLOCK + tl.arange(0, YBLOCK)[:, None]",
            "    xindex = (pid % xblocks) * XBLOCK + tl.arange(0, XBLOCK)[None, :]",
        ]
        if self.need_mask["x"]:
            body.append("    ymask = yindex < ynumel")
        if self.need_mask["r"]:
            body.append("    xmask = xindex < xnumel")
        body += ["    y0 = yindex", "    x0 = xindex"]
        self._straight(body)

    def _straight(self, body: list[str]):
        cse: dict = {}
        for m in self.k.members:
            self._member(m, cse, body, "    ")

    def _r_vars(self, body: list[str], indent: str, start: str | None, whole: bool = False):
        """rindex, rmask and r0 of a block along r; `whole`: a block inside the row,
        whose all-true mask Triton folds away."""
        body.append(f"{indent}rindex = {start + ' + rbase' if start else 'rbase'}")
        if self.draws:  # where the block starts along r: see _philox_block
            body.append(f"{indent}rstart = {start or 0}")
        body.append(f"{indent}r0 = {'rindex - rshift' if self.shift else 'rindex'}")
        if self.need_mask["r"]:
            edge = "(r0 >= 0) & (r0 < rnumel)" if self.shift else "rindex < rnumel"
            body.append(f"{indent}rmask = {'tl.full([1, RBLOCK], True, tl.int1)' if whole else edge}")

    def _render_reduction(self, body: list[str]):
        body += [f"    xnumel = {self.xnumel}", f"    rnumel = {self.rnumel}"]
        if self.split > 1:
            if self.device.type == "cuda":
                rchunk = "(rnumel + nsplit * RBLOCK - 1) // (nsplit * RBLOCK) * RBLOCK"
            else:  # see _rstep
                rb = self.plan.configs[0]["RBLOCK"]
                rchunk = str(triton_config.cdiv(self.rnumel, self.split * rb) * rb)
            self.rchunk = "rchunk" if self.device.type == "cuda" else rchunk
            body += [
                f"    nsplit = {self.split}",
                f"    pid = {self._pid()}",
                "    xindex = (pid // nsplit) * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
                "    split = pid % nsplit",
                f"    rchunk = {rchunk}",
            ]
        elif self.plan.coop:
            body += self._coop_ticket()
        else:
            body.append(f"    xindex = {self._pid()} * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        if self.need_mask["x"]:
            body.append("    xmask = xindex < xnumel")
        body += ["    x0 = xindex", "    rbase = tl.arange(0, RBLOCK)[None, :]"]
        if self.shift:  # rows from their 16-byte boundary: see _row_shift
            s, v = self.row_stride, self.shift
            body += [f"    rrow = (x0 * {s} // {v}) * {v}", f"    rshift = x0 * {s} - rrow"]
        if self.plan.coop:
            self._render_coop(body)
            return
        if self.plan.persistent:
            self._r_vars(body, "    ", None)
            cse: dict = {}
            for _, members in member_order(self.k):
                for m in members:
                    self._member(m, cse, body, "    ")
            return
        row_cse: dict = {}
        written: set[str] = set()  # buffers stored by earlier loops of this kernel
        self.online = self._online_softmax_sums()
        moved = set(self.online.values())
        phases = [(p, [m for m in ms if m not in moved]) for p, ms in member_order(self.k)]
        phases = [(p, ms) for p, ms in phases if ms]  # an online sum's own loop: done in its max's loop
        loop_reads = [{n for m in ms for n in m.reads} for p, ms in phases if p >= 0 and p % 2 == 0]
        again = {n for n in set().union(*loop_reads) if sum(n in r for r in loop_reads) > 1}  # rows read twice
        # rows written while rows are read again (by this program or others) leave
        # L2 first, making room for those (H200, per call: softmax over [2048, 50257]
        # fp32 274.0 -> 266.0 us, bf16 172.8 -> 158.6; [4096, 12289] fp32 110.0 ->
        # 104.5; layer_norm [2048, 50257] fp32 327.4 -> 310.3)
        self.evict_stores = bool(again)
        for phase, members in phases:
            if phase % 2 == 1 or phase < 0:
                if self.split > 1 and phase > 0:
                    continue  # the epilogue: run by the last program of each block of rows
                for m in members:
                    self._member(m, row_cse, body, "    ")
                continue
            reads = loop_reads.pop(0)
            if reads & written:  # re-read what other threads of this program wrote
                body.append("    tl.debug_barrier()")
            # L2 keeps what a later loop reads again and lets the rest stream through
            # (H100: GroupNorm statistics 48 -> 41 us; softmax over [2048, 50257]
            # fp32: 444 -> 414 us). Rows of 2-byte elements too, now that the rows
            # written leave first (H200, [2048, 50257] bf16: softmax 159.5 -> 155.4
            # us, layer_norm 222.5 -> 207.8; before the stores were hinted, these
            # hints cost bf16 softmax 3-5% on an H100). Across kernels (a graph's next
            # kernel reading x again) evict_last or no hint here, with or without the
            # next kernel's programs in reverse order, was mixed (H200, do_bench, us:
            # x - x.mean(0) fp32 [16384, 4096] 200.9 -> 197.4; softmax(0) bf16 [65536,
            # 256] 43.0 -> 45.5; BatchNorm train channels-last bf16 58.2 -> 60.8)
            later = set().union(*loop_reads)
            if not self.plan.window:  # a window's elements are read again by the next block
                self.evict = {n: "evict_last" if n in later else "evict_first" for n in reads}
            self._loop(members, row_cse, body)
            self.evict = {}
            written |= {m.node.name for m in members if m.stored and m.role == "full"}
        if self.split > 1:
            self._combine_splits(row_cse, body)

    def _render_scan(self, body: list[str]):
        """A sort of a row's keys (lowerings.sorting), held in one block; or
        a running sum or product along r: one block's tl.associative_scan where
        the row fits it; else, step by step, each step's scan combined with the
        running value of the steps before it (`carry`); its pointwise consumers
        follow, on the values in registers. H200, per call, us, ours /
        eager / Inductor: cumsum(-1) fp32 [4096, 4096] 35.3 / 173.7 / 47.0, [1024,
        32000] 71.0 / 229.0 / 89.1; cumsum(0) fp32 [4096, 4096] 67.4 / 1478.7 / 361.7."""
        m, *consumers = self.k.members
        rt, t = m.node.buffer.reduction_type, m.value.dtype
        self.regs[m.node.name] = Value("scanned", frozenset({"x", "r"}))
        if t == torch.float64 and m.node.buffer.dtype != t:  # accumulated in double, as eager's CPU scans
            self.wide_regs.add(m.node.name)
        body += [f"    xnumel = {self.xnumel}", f"    rnumel = {self.rnumel}",
                 f"    xindex = {self._pid()} * XBLOCK + tl.arange(0, XBLOCK)[:, None]"]
        if self.need_mask["x"]:
            body.append("    xmask = xindex < xnumel")
        body += ["    x0 = xindex", "    rbase = tl.arange(0, RBLOCK)[None, :]"]
        if rt in SORTS:  # keys of a row held in registers (the plan's), padded to sort last
            self._r_vars(body, "    ", None)
            block = self._masked(m, self.emit(m.value, {}, body, "    "))
            self.helpers.add("_sort_rows")
            body.append(f"    scanned = _sort_rows({block}, {rt == 'sort_desc'})")
            self.store(m, self.regs[m.node.name], body, "    ")
            for c in consumers:
                self._member(c, {}, body, "    ")
            return
        combine = SCAN_COMBINES[rt].format(target="")
        self.helpers.add(combine)
        if self.plan.persistent:
            self._r_vars(body, "    ", None)
            block = self._masked(m, self.emit(m.value, {}, body, "    "))
            body.append(f"    scanned = tl.associative_scan({block}, 1, {combine})")
            self.store(m, self.regs[m.node.name], body, "    ")
            for c in consumers:
                self._member(c, {}, body, "    ")
            return
        body.append(f"    carry = tl.full([XBLOCK, 1], {REDUCTION_INIT[rt](t)}, {TL_DTYPE[t]})")
        body.append(f"    for roffset in range(0, {self.rnumel}, {self._rstep()}):")  # a literal: see _rstep
        ind = "        "
        self._r_vars(body, ind, "roffset")
        body.append(f"{ind}block = {self._masked(m, self.emit(m.value, {}, body, ind))}")
        body.append(f"{ind}scanned = {combine}(carry, tl.associative_scan(block, 1, {combine}))")
        self.store(m, self.regs[m.node.name], body, ind)
        for c in consumers:
            self._member(c, {}, body, ind)
        body.append(f"{ind}carry = {combine}(carry, {self._final(rt, 'block')})")  # the row's value so far

    def _rstep(self) -> str:
        """The loop step: RBLOCK, or on the CPU its value: Triton 3.6's interpreter
        makes tensors of the kernel's ints, and range() takes no tensors."""
        return "RBLOCK" if self.device.type == "cuda" else str(self.plan.configs[0]["RBLOCK"])

    def _masked(self, m: Member, v: Value) -> str:
        t = m.value.dtype
        code = self.full(v, {"x", "r"}, t)
        if self.need_mask["r"]:
            code = f"tl.where(rmask, {code}, {REDUCTION_INIT[m.node.buffer.reduction_type](t)})"
        return code

    def _reduce_block(self, m: Member, v: Value, body: list[str], indent: str) -> Value:
        """Reduce a [XBLOCK, RBLOCK] block along r: a [XBLOCK, 1] value."""
        rt = m.node.buffer.reduction_type
        acc = f"acc_{m.node.name}"
        code = self._masked(m, v)
        if rt in ("argmax", "argmin"):
            body.append(f"{indent}{acc}_v = {code}")
            body.append(f"{indent}{acc}_i = tl.broadcast_to(r0, [XBLOCK, RBLOCK])")
            body.append(f"{indent}{acc} = {self._final(rt, acc + '_v', acc + '_i')}")
        else:
            body.append(f"{indent}{acc} = {self._final(rt, code)}")
        return Value(acc, frozenset({"x"}))

    def _combiner(self, rt: str) -> str:
        """The combine function for tl.reduce on a GPU: max and min propagate NaN as torch does."""
        helper = {"prod": "_prod", "max": "_max_nan", "min": "_min_nan", "argmax": "_argmax", "argmin": "_argmin",
                  "logaddexp": "_logaddexp"}.get(rt)
        if helper:
            self.helpers.add(helper)
            return helper
        return {"sum": "tl.standard._sum_combine", "any": "tl.standard._elementwise_max",
                "all": "tl.standard._elementwise_min"}[rt]

    def _final(self, rt: str, code: str, index: str | None = None) -> str:
        """Code reducing the block `code` along r, as a [XBLOCK, 1] value."""
        if self.device.type != "cuda" and rt in ("max", "min", "argmax", "argmin"):
            # the interpreter runs any combiner but Triton's own element by element,
            # and Triton's max and min as numpy's, which skip NaN: rows of numpy steps
            largest = rt in ("max", "argmax")
            helper = "_arg_rows" if index else "_extreme_rows"
            self.helpers.add(helper)
            return f"{helper}({code}{', ' + index if index else ''}, {largest})[:, None]"
        fn = self._combiner(rt)
        if index is not None:  # arg reductions: reduce (value, index) pairs, keep the index
            return f"tl.reduce(({code}, {index}), 1, {fn})[1][:, None]"
        if rt in ("any", "all"):
            return f"(tl.reduce(({code}).to(tl.int8), 1, {fn}) != 0)[:, None]"
        return f"tl.reduce({code}, 1, {fn})[:, None]"

    def _online_softmax_sums(self) -> dict:
        """{max member: sum member} for sum(exp(a - max(a))) over a looped row
        (softmax, log_softmax): the sum is kept relative to a running max in
        the max's loop, which saves a pass over the row."""
        return {m: s for m, s in online_softmax_sums(self.k.members).items()
                if m.node.name not in self.alias and s.node.name not in self.alias}

    def _online_step(self, m: Member, s: Member, code: str, ind: str, body: list[str]):
        """After the max's update: rescale the sum to the new max, add this block,
        with one exp per element: for d = x - old max, a lane whose max stays adds
        exp(d), one whose max becomes x scales its sum by exp(-d) and adds 1.
        A lane whose max is still -inf has summed nothing (d would be NaN)."""
        acc, sacc = f"_acc_{m.node.name}", f"_acc_{s.node.name}"
        d, e = f"{sacc}_d", f"{sacc}_e"
        body.append(f"{ind}{d} = {code} - {sacc}_max")
        exp = "tl.exp"
        if self.device.type == "cuda" and s.value.dtype == torch.float32:
            exp = "_exp_ftz"  # exp(d) < 2^-126 added to a sum >= 1 vanishes, flushed or not
            self.helpers.add(exp)
        body.append(f"{ind}{e} = {exp}(-tl.abs({d}))")
        step = f"tl.where({acc} == float('-inf'), 0.0, tl.where({d} > 0, tl.fma({sacc}, {e}, 1.0), {sacc} + {e}))"
        if self.need_mask["r"]:
            step = f"tl.where(rmask, {step}, {sacc})"
        body.append(f"{ind}{sacc} = {step}")

    def _loop(self, members: list[Member], row_cse: dict, body: list[str]):
        online = {m: s for m, s in self.online.items() if m in members}
        reds = [m for m in members if m.role == "reduction" and m.node.name not in self.alias]
        reds += list(online.values())
        for m in reds:
            t = m.value.dtype
            rt = m.node.buffer.reduction_type
            acc = f"_acc_{m.node.name}"
            body.append(f"    {acc} = tl.full([XBLOCK, RBLOCK], {REDUCTION_INIT[rt](t)}, {TL_DTYPE[t]})")
            if rt in ("argmax", "argmin"):
                body.append(f"    {acc}_i = tl.full([XBLOCK, RBLOCK], 0, tl.int32)")
        ind = "        "
        loop: list[str] = []
        # what does not vary along r is computed once, before the loop: Triton's
        # compiler does not move a load out of a loop that stores
        hoist = Hoist(body, row_cse)
        self._loop_body(members, online, row_cse, loop, ind, hoist)
        step = self._rstep()
        cuda = self.device.type == "cuda"
        end = "rnumel" if cuda else str(self.rnumel)
        whole_end = f"rnumel - rnumel % {step}" if cuda else str(self.rnumel - self.rnumel % int(step))
        if self.split > 1:
            ranges = [(f"0, {self.rchunk}", "split * rchunk + roffset", False)]
        elif self.shift:  # a masked first block, whole ones, then the masked rest
            ranges = [(f"0, {step}", "roffset", False), (f"{step}, {whole_end}", "roffset", True),
                      (f"{whole_end}, {end} + {self.shift - 1}", "roffset", False)]
        elif self.need_mask["r"]:
            # the whole blocks first, unmasked, then the partial last one: masked
            # loads, stores and selects cost every element of a long row (H100,
            # softmax over [2048, 50257]: fp32 413 -> 368 us, bf16 248 -> 236)
            ranges = [(f"0, {whole_end}", "roffset", True), (f"{whole_end}, {end}", "roffset", False)]
        else:
            ranges = [(f"0, {end}", "roffset", False)]
        loop_kind = "range"
        if self.plan.window:  # unrolled: each element's offset in the window a constant
            loop_kind, ranges = "tl.static_range", [(f"0, {self.rnumel}", "roffset", False)]
        for bounds, start, whole in ranges:
            body.append(f"    for roffset in {loop_kind}({bounds}, {step}):")
            self._r_vars(body, ind, start, whole)
            body += loop
        self._loop_end(members, online, reds, body)

    def _loop_body(self, members: list[Member], online: dict, row_cse: dict, body: list[str], ind: str,
                   hoist: Hoist):
        """One block of a loop over r: its loads, stores and accumulator updates."""
        cse = dict(row_cse)
        for m in members:
            if m.node.name in self.alias:
                continue
            v = self.emit(m.value, cse, body, ind, hoist)
            if m.role != "reduction":
                self.regs[m.node.name] = v
                self.store(m, v, body, ind)
                continue
            rt = m.node.buffer.reduction_type
            acc = f"_acc_{m.node.name}"
            code = self.full(v, {"x", "r"}, m.value.dtype)
            if rt in ("argmax", "argmin"):
                self.helpers.add(f"_{rt}_step")
                body.append(f"{ind}{acc}_nv, {acc}_ni = _{rt}_step({acc}, {acc}_i, {code}, tl.broadcast_to(r0, [XBLOCK, RBLOCK]))")
                if self.need_mask["r"]:
                    body.append(f"{ind}{acc} = tl.where(rmask, {acc}_nv, {acc})")
                    body.append(f"{ind}{acc}_i = tl.where(rmask, {acc}_ni, {acc}_i)")
                else:
                    body.append(f"{ind}{acc} = {acc}_nv")
                    body.append(f"{ind}{acc}_i = {acc}_ni")
                continue
            step_code = {
                "sum": f"{acc} + {code}",
                "prod": f"{acc} * {code}",
                "max": f"_max_nan({acc}, {code})",
                "min": f"_min_nan({acc}, {code})",
                "any": f"{acc} | ({code})",
                "all": f"{acc} & ({code})",
            }[rt]
            if rt in ("max", "min"):
                self.helpers.add(f"_{rt}_nan")
            if self.need_mask["r"]:
                step_code = f"tl.where(rmask, {step_code}, {acc})"
            if m in online:
                body.append(f"{ind}_acc_{online[m].node.name}_max = {acc}")
            body.append(f"{ind}{acc} = {step_code}")
            if m in online:
                self._online_step(m, online[m], code, ind, body)

    def _loop_end(self, members: list[Member], online: dict, reds: list[Member], body: list[str]):
        """After a loop over r: reduce the accumulators' lanes, store what is done."""
        for m in reds:
            rt = m.node.buffer.reduction_type
            acc = f"acc_{m.node.name}"
            index = f"_{acc}_i" if rt in ("argmax", "argmin") else None
            lanes = "_" + acc
            base = next((b for b, s in online.items() if s is m), None)
            if base is not None:  # lane sums are relative to lane maxes: bring them to the row's
                bacc = f"_acc_{base.node.name}"
                lanes = f"tl.where({bacc} == float('-inf'), 0.0, {lanes} * tl.exp({bacc} - acc_{base.node.name}))"
            body.append(f"    {acc} = {self._final(rt, lanes, index)}")
            v = Value(acc, frozenset({"x"}))
            self.regs[m.node.name] = v
            if self.split == 1:
                self.store(m, v, body, "    ")
        if self.split == 1:
            for m in members:
                if m.node.name in self.alias:
                    self.regs[m.node.name] = self.regs[self.alias[m.node.name]]
                    self.store(m, self.regs[m.node.name], body, "    ")
        for m in members:  # a loop's full values do not outlive it
            if m.role == "full":
                self.regs.pop(m.node.name, None)

    def _combine_splits(self, row_cse: dict, body: list[str]):
        """Store this program's partial results; the last program of its block
        of rows combines all of them, stores the reductions and runs the epilogue."""
        reds = [m for m in self.k.members if m.role == "reduction" and m.node.name not in self.alias]
        for i, m in enumerate(reds):
            body.append(f"    tl.store(ws_ptr{i} + (x0 * nsplit + split), acc_{m.node.name}{', xmask' if self.need_mask['x'] else ''})")
        body += [
            "    tl.debug_barrier()  # every partial is stored before the count is taken",
            "    done = tl.atomic_add(sem_ptr + pid // nsplit, 1)",
            "    if done == nsplit - 1:",
            f"        sindex = {self._partials_index()}",
            "        smask = sindex < nsplit",
        ]
        ind = "        "
        mask = "xmask & smask" if self.need_mask["x"] else "smask"
        bases = {s: m for m, s in self.online.items()}
        for i, m in enumerate(reds):
            body += self._combine_partials(m, f"ws_ptr{i}", "nsplit", mask, ind, bases.get(m))
        for m in reds:
            self.store(m, self.regs[m.node.name], body, ind)
        cse = dict(row_cse)
        moved = set(self.online.values())  # combined above, with their maxes
        for phase, members in member_order(self.k):
            for m in members:
                if (m.node.name in self.alias or phase > 0) and m not in moved:  # an alias takes its twin's value
                    self._member(m, cse, body, ind)
        body.append(f"{ind}tl.atomic_xchg(sem_ptr + pid // nsplit, 0)  # ready for the next launch")

    def _partials_index(self) -> str:
        """The last program's index over a block's partial results: the main
        loop's rbase where they fit in it, as a tile of another shape costs Triton
        another layout (for sm_90, sum(0) over [65536, 256]: 120 -> 102 ms to
        compile, softmax(0) 227 -> 164 ms)."""
        if all(self.split <= c["RBLOCK"] for c in self.plan.configs):
            return "rbase"
        return f"tl.arange(0, {triton_config.pow2(self.split)})[None, :]"

    def _combine_partials(self, m: Member, ws: str, row_stride: str, mask: str, ind: str,
                          base: Member | None = None) -> list[str]:
        """Code combining reduction m's partial results over a row's programs
        (stored in `ws`, `row_stride` per row), in a fixed order, into acc_<m>.
        An online sum's partials are relative to the partial maxes of `base`,
        combined before it: each is brought to the row's max."""
        rt, t = m.node.buffer.reduction_type, m.value.dtype
        init, acc = REDUCTION_INIT[rt](t), f"acc_{m.node.name}"
        parts = f"tl.where(smask, {acc}_p, {init})"
        if base is not None:
            bacc = f"acc_{base.node.name}"
            parts = f"tl.where(smask & ({bacc}_p != float('-inf')), {acc}_p * tl.exp({bacc}_p - {bacc}), 0.0)"
        return [f"{ind}{acc}_p = tl.load({ws} + (x0 * {row_stride} + sindex), {mask}, other={init}, cache_modifier='.cg')",
                f"{ind}{acc} = {self._final(rt, parts)}"]

    # -- cooperative rows ------------------------------------------------------------------------
    def _coop_ticket(self) -> list[str]:
        """Which slice of which row this program holds. Programs number their slices
        by tickets taken in the order they start, not by program id: a program then
        waits at a barrier only for programs that run or will run next, whatever
        order the GPU starts them in."""
        ticket = self.xnumel * (self.barriers + 1)
        return [
            f"    nsplit = (rnumel + {self.row_pad} + RBLOCK - 1) // RBLOCK",
            f"    ticket = tl.atomic_add(sem_ptr + {ticket}, 1)",
            "    if ticket == tl.num_programs(0) - 1:",
            f"        tl.atomic_xchg(sem_ptr + {ticket}, 0)  # every ticket taken: ready for the next launch",
            "    row = ticket // nsplit",
            "    split = ticket % nsplit",
            "    xindex = row + tl.zeros([XBLOCK, 1], tl.int32)",
        ]

    def _render_coop(self, body: list[str]):
        """Each program holds slice `split` of row `row` in registers. After the
        reductions of a phase, it stores its partial results, counts itself in at
        the phase's barrier and waits for the row's other slices; every slice then
        combines all partials in the same order, and computes on."""
        nb = self.barriers + 1
        self._r_vars(body, "    ", "split * RBLOCK")
        if self.shift:  # does this slice hold the row's first or last element?
            s, v = self.row_stride, self.shift
            body.append(f"    edge = (split == 0) | ((split + 1) * RBLOCK > rnumel + row * {s} % {v})")
        body.append(f"    sindex = tl.arange(0, {triton_config.pow2(self.coop_max_slices)})[None, :]")
        body.append("    smask = sindex < nsplit")
        index = {m.node.name: i for i, m in enumerate(self.coop_reds)}
        cse: dict = {}
        barrier = 0
        for _, members in member_order(self.k):
            reds = []
            for m in members:
                if m.role != "reduction":
                    self._member(m, cse, body, "    ")
                elif m.node.name not in self.alias:
                    v = self.emit(m.value, cse, body, "    ")
                    part = self._final(m.node.buffer.reduction_type, self._masked(m, v))
                    body.append(f"    tl.store(ws_ptr{index[m.node.name]} + (x0 * {self.coop_max_slices} + split), {part})")
                    reds.append(m)
            if not reds:
                continue
            counter = f"sem_ptr + (row * {nb} + {barrier})"
            body += [
                "    tl.debug_barrier()  # every thread's partials are stored before the count",
                f"    tl.atomic_add({counter}, 1)",
                # one thread of the program polls (every thread polling with plain
                # volatile loads ran twice as slow on an H200)
                f"    while tl.atomic_add({counter}, 0) < nsplit:",
                "        pass",
            ]
            barrier += 1
            for m in reds:
                body += self._combine_partials(m, f"ws_ptr{index[m.node.name]}", str(self.coop_max_slices), "smask", "    ")
                self.regs[m.node.name] = Value(f"acc_{m.node.name}", frozenset({"x"}))
                self.store(m, self.regs[m.node.name], body, "    ")
            for m in members:
                if m.node.name in self.alias:  # takes its twin's value
                    self._member(m, cse, body, "    ")
        body += [  # the last slice out resets the row's counters for the next launch
            f"    if tl.atomic_add(sem_ptr + (row * {nb} + {nb - 1}), 1) == nsplit - 1:",
            *(f"        tl.atomic_xchg(sem_ptr + (row * {nb} + {b}), 0)" for b in range(nb)),
        ]


def render(kernel: FusedKernel, name: str, buffers: dict) -> str:
    return TritonKernel(kernel, name, buffers).render()
