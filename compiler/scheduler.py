"""Fusion: group computed buffers into kernels.

Every node is canonicalized to a loop nest `(sizes, rsizes)` whose neighbouring
loops are merged when every index walks them contiguously. A kernel iterates
`xnumel` outer points and, for reductions, `rnumel` points per outer point.
Nodes join a kernel when their loops fit it:

- pointwise of numel xnumel*rnumel ("full": one value per (x, r));
- pointwise of numel xnumel ("row": one value per x, e.g. rsqrt(var + eps));
- reductions over (xnumel, rnumel);

and every buffer they read that the kernel itself writes is read at exactly the
index it is written (so no program reads another program's output), and every
producer outside the kernel is scheduled before it (so fusion never makes a
cycle). Inside a kernel, a reduction's consumers run in a later loop ("stage").
A row reduction may take over the pointwise kernel before it, re-placed in its
loops (_absorb_pointwise). A scan (cumsum) opens a kernel of its own, which only
its pointwise consumers join.
"""
from __future__ import annotations

import dataclasses
import itertools
import math
from typing import Sequence

import sympy

from . import ir
from .config import config
from .index import contiguous_strides, fold_divmod, linear_index, loop_vars, merge_loops, simplify, substitute, symbol


@dataclasses.dataclass(eq=False)
class Node:
    buffer: ir.ComputedBuffer
    sizes: list[int]  # outer loop sizes after merging
    rsizes: list[int]  # reduction loop sizes after merging
    value: ir.Expr  # in variables i* (outer) and r* (reduction)
    store_index: sympy.Expr  # in variables i*
    reads: dict  # buffer name -> list of index exprs (None: indirect, any element)

    def evaluate(self, ivars, rvars, ranges: dict):
        """(value, store index) with the merged loops' variables bound to
        `ivars`/`rvars` (expressions of variables that run over `ranges`)."""
        sub = dict(zip(loop_vars("i", len(self.sizes)), ivars))
        sub.update(zip(loop_vars("r", len(self.rsizes)), rvars))
        return _substituted(self.value, self.store_index, sub, ranges)

    @property
    def name(self):
        return self.buffer.name

    @property
    def numel(self):
        return math.prod(self.sizes)

    @property
    def rnumel(self):
        return math.prod(self.rsizes)

    @property
    def is_reduction(self):
        return self.buffer.is_reduction

    @property
    def is_scan(self):
        return self.buffer.is_scan


@dataclasses.dataclass(eq=False)
class Member:
    """A node placed in a kernel, with its variables expressed in the kernel's."""

    node: Node
    role: str  # "reduction" | "full" | "row" | "scan"
    value: ir.Expr  # in kernel variables x0 (outer) and r0 (reduction)
    store_index: sympy.Expr  # in x0 (and r0 for full members)
    reads: dict  # name -> [index in kernel variables]
    # When it runs in a reduction kernel: even phase 2k = inside reduction loop k
    # (full and reduction members), odd phase 2k+1 = per-x code between loop k
    # and k+1 (row members), -1 = per-x code before the first loop.
    phase: int = 0
    stored: bool = True  # written to memory (someone outside the kernel reads it)


@dataclasses.dataclass(eq=False)
class FusedKernel:
    members: list[Member]
    xnumel: int
    rnumel: int
    order: int
    name: str = ""
    # why the node that opened this kernel did not join the kernel before it
    split_reason: str = ""

    @property
    def is_reduction(self):
        return self.rnumel > 1 or any(m.role == "reduction" for m in self.members)

    @property
    def is_scan(self):
        return any(m.role == "scan" for m in self.members)

    @property
    def is_scatter(self):
        return any(m.node.buffer.is_scatter for m in self.members)

    @property
    def writes(self) -> set[str]:
        return {m.node.name for m in self.members}

    @property
    def loops(self) -> int:
        """Number of reduction loops (passes over r) the kernel makes looped: the
        members of even phases loop; a softmax's sum of exponents runs online, in
        its max's loop (and what follows it per row then follows that loop)."""
        online = set(online_softmax_sums(self.members).values())
        looped = [m.phase // 2 for m in self.members if m.phase >= 0 and m.phase % 2 == 0 and m not in online]
        return 1 + max(looped, default=0)

    def can_split(self, online_sums: bool = False) -> bool:
        """One pass over r, then per-row code only: programs can each reduce a part
        of a row, and the last to finish combine them. With `online_sums`, a
        softmax's sum of exp(a - max(a)) counts as part of its max's pass (the
        Triton renderer keeps it relative to a running max, and combines a
        row's partial sums relative to their partial maxes)."""
        online = set(online_softmax_sums(self.members).values()) if online_sums else set()
        for m in self.members:
            if m in online:
                continue
            if m.role == "reduction" and (m.phase != 0 or m.node.buffer.reduction_type not in ir.REDUCED_IN_PARTS):
                return False
            if m.phase > 1:
                return False
        return True

    def origins(self) -> list[str]:
        return list(dict.fromkeys(o for m in self.members for o in m.node.buffer.origins))

    def origin_ops(self) -> list[str]:
        return list(dict.fromkeys(o for m in self.members for o in m.node.buffer.origin_ops))


@dataclasses.dataclass(eq=False)
class ExternStep:
    buffer: ir.Buffer  # ExternCall or MultiOutput
    order: int


X, R = symbol("x0"), symbol("r0")


def online_softmax_sums(members: list[Member]) -> dict:
    """{max member: sum member} for sum(exp(a - max(a))) over the same rows as
    max(a), in the loop after the max's (softmax, log_softmax)."""
    out = {}
    maxes = {m.node.name: m for m in members if m.role == "reduction" and m.node.buffer.reduction_type == "max"}
    for s in members:
        if s.role != "reduction" or s.node.buffer.reduction_type != "sum":
            continue
        e = s.value
        if e.op != "exp" or e.args[0].op != "sub":
            continue
        a, shift = e.args[0].args
        m = maxes.get(shift.args[0]) if shift.op == "load" else None
        if m is not None and m.value == a and s.phase == m.phase + 2 and R not in shift.args[1].free_symbols:
            out[m] = s
    return out


# ---------------------------------------------------------------------------
# canonical loop nests


def read_only_at(members, name: str, index: sympy.Expr) -> bool:
    """Whether every read of `name` by `members` is at `index`: a store there
    may then replace it (a mutation, or an output written in place)."""
    return all(idx is not None and sympy.expand(idx - index) == 0 for m in members for idx in m.reads.get(name, []))


def make_node(buf: ir.ComputedBuffer) -> Node:
    iv = loop_vars("i", len(buf.ranges))
    rv = loop_vars("r", len(buf.reduction_ranges))
    ranges = {**dict(zip(iv, buf.ranges)), **dict(zip(rv, buf.reduction_ranges))}
    value, store = _evaluate(buf, iv, rv, ranges)
    indices = [store] + _all_indices(value)
    sizes, sub_i = merge_loops(list(buf.ranges), indices, iv)
    rsizes, sub_r = merge_loops(list(buf.reduction_ranges), indices, rv)
    merged = {**dict(zip(loop_vars("i", len(sizes)), sizes)), **dict(zip(loop_vars("r", len(rsizes)), rsizes))}
    # the merge holds for the indices as the original ranges simplified them: map
    # those (here and in Node.evaluate). Evaluated again at the merged variables, the
    # body would lose what those ranges removed (nearest upsampling's backward reads
    # (2 * i + r) // 2 = i for a window offset r < 2; merged with the next offset
    # into r < 4, it read i + r // 2)
    value, store = _substituted(value, store, {**sub_i, **sub_r}, merged)
    return Node(buf, sizes, rsizes, value, store, _reads(value))


def _substituted(value: ir.Expr, store: sympy.Expr, sub: dict, ranges: dict):
    """(value, store index) with loop variables replaced by `sub`, simplified with `ranges`."""
    return ir.map_indices(value, lambda e: simplify(substitute(e, sub), ranges)), simplify(substitute(store, sub), ranges)


def _evaluate(buf: ir.ComputedBuffer, iv, rv, ranges: dict):
    """(value, store index) of a buffer at loop variables iv/rv, indices simplified
    with the variables' ranges (views of views leave div/mod to fold away)."""
    value = ir.map_indices(buf.evaluate(iv, rv), lambda e: simplify(e, ranges))
    return value, simplify(_store_index(buf, iv, rv), ranges)


def _store_index(buf: ir.ComputedBuffer, index, rindex) -> sympy.Expr:
    if buf.is_scatter:  # where its body says; the position in its own loops stands in
        return sympy.expand(linear_index(index, contiguous_strides(buf.ranges)))
    if buf.is_scan:
        return sympy.expand(buf.out_index(index, rindex))
    if buf.is_reduction:
        return sympy.expand(buf.out_index(index))
    return sympy.expand(buf.store_offset + buf.store_index(index))


def _all_indices(value: ir.Expr) -> list:
    out = []
    for e in value.walk():
        if e.op == "load":
            out.append(e.args[1])
        elif e.op == "index":
            out.append(e.args[0])
    return out


def _reads(value: ir.Expr) -> dict:
    reads: dict = {}
    for e in value.walk():
        if e.op == "load":
            reads.setdefault(e.args[0], []).append(None if e.args[2] else sympy.expand(e.args[1]))
    return reads


def _kernel_vars(node: Node, role: str, xnumel: int, rnumel: int, r_major: bool = False, r_dims=None):
    """The node's loop variables as expressions of the kernel's x0 / r0.
    `r_major`: a full node's outer loops cover r0 and its inner ones x0 (a
    reduction over the outer dim, whose x0 is the contiguous one). `r_dims`:
    those of its loops cover r0, the others x0 (a reduction over a middle dim)."""
    if role in ("reduction", "scan"):
        return _split(X, node.sizes), _split(R, node.rsizes)
    if role == "row" or rnumel == 1:
        return _split(X, node.sizes), []
    if r_dims is not None:
        return _interleaved(node.sizes, r_dims), []
    if r_major:
        return _outer_inner(node.sizes, R, X, xnumel), []
    return _outer_inner(node.sizes, X, R, rnumel), []


def _outer_inner(sizes: list, outer, inner, inner_numel: int):
    """Variables for the loop nest `sizes` whose inner loops `inner` covers (its
    `inner_numel` points) and whose outer loops `outer` covers, or None."""
    acc, k = 1, len(sizes)
    while k > 0 and acc < inner_numel:
        k -= 1
        acc *= sizes[k]
    if acc == inner_numel:
        return _split(outer, sizes[:k]) + _split(inner, sizes[k:])
    # the inner variable ends inside loop k: split it in an outer part and an inner
    # part, e.g. group_norm's channels: [N, C, HW] over rows of (C/G) * HW
    if k == len(sizes) or 0 in sizes or inner_numel == 0:  # empty loops: nothing to split
        return None
    below = acc // sizes[k]
    if inner_numel % below or sizes[k] % (inner_numel // below):
        return None
    f = inner_numel // below
    os_, is_ = _split(outer, sizes[:k] + [sizes[k] // f]), _split(inner, [f] + sizes[k + 1 :])
    return os_[:-1] + [os_[-1] * f + is_[0]] + is_[1:]


def _interleaved(sizes: list, r_dims: tuple):
    """Variables for the loop nest `sizes` whose loops `r_dims` r0 walks, and the others x0."""
    xs = iter(_split(X, [s for d, s in enumerate(sizes) if d not in r_dims]))
    rs = iter(_split(R, [sizes[d] for d in r_dims]))
    return [next(rs) if d in r_dims else next(xs) for d in range(len(sizes))]


def middle_dims(sizes: list, rnumel: int, most: int = 6):
    """The sets of loops, neither all leading nor all trailing (which _outer_inner
    covers), that could be a reduction's `rnumel` points: softmax(1) over [N, C, H*W]
    reduces C. Loop nests deeper than `most` are not searched."""
    n = len(sizes)
    if n > most:
        return
    for k in range(1, n):
        for dims in itertools.combinations(range(n), k):
            if dims in (tuple(range(k)), tuple(range(n - k, n))) or 1 in (sizes[d] for d in dims):
                continue
            if math.prod(sizes[d] for d in dims) == rnumel:
                yield dims


def _split(var, sizes):
    """Variables for a loop nest `sizes` walked by one flat variable."""
    from .index import unflatten

    if not sizes:
        return []
    return unflatten(var, sizes)


def place(node: Node, xnumel: int, rnumel: int, r_major: bool = False, r_dims=None) -> Member | None:
    if node.is_reduction or node.is_scan:
        if (node.numel, node.rnumel) != (xnumel, rnumel):
            return None
        role = "scan" if node.is_scan else "reduction"
    elif node.numel == xnumel * rnumel:
        role = "full" if rnumel > 1 else "row"
    elif node.numel == xnumel:
        role = "row"
    else:
        return None
    kv = _kernel_vars(node, role, xnumel, rnumel, r_major, r_dims)
    if kv is None or kv[0] is None:
        return None
    value, store = node.evaluate(*kv, {X: xnumel, R: max(rnumel, 1)})
    return Member(node, role, value, sympy.expand(store), _reads(value))


# ---------------------------------------------------------------------------
# grouping


class Scheduler:
    def __init__(self, graph):
        self.graph = graph
        self.steps: list = []  # FusedKernel | ExternStep, in execution order
        self.where: dict[str, object] = {}  # buffer name -> its step
        self.readers: dict[str, list[str]] = {}  # buffer name -> names of nodes reading it
        self.live = self._live_buffers()

    def _live_buffers(self) -> set[str]:
        """Buffers that the outputs, mutations or effects need (dead code is dropped)."""
        g = self.graph
        by_name = {b.name: b for b in g.buffers}
        need = [o.buffer.name for o in g.outputs if hasattr(o, "buffer")] + [b.name for b in g.mutations + g.effects]
        live: set[str] = set()
        while need:
            n = need.pop()
            if n in live or n not in by_name:
                continue
            live.add(n)
            need.extend(_deps(by_name[n]))
        return live

    def run(self):
        nodes: dict[str, Node] = {}
        # mutations last: every read of an input is of its old value (functionalized),
        # and buffers realized after the write-back (outputs) may read it too
        mutations_last = sorted(self.graph.buffers, key=lambda b: getattr(b, "store_target", None) is not None)
        for buf in mutations_last:
            if buf.name not in self.live or isinstance(buf, ir.InputBuffer):
                continue
            if isinstance(buf, ir.ComputedBuffer):
                node = make_node(buf)
                nodes[buf.name] = node
                for b in list(node.reads) + _scatter_source(buf):
                    self.readers.setdefault(b, []).append(buf.name)
                self._schedule(node)
            else:
                for b in _deps(buf):
                    self.readers.setdefault(b, []).append(buf.name)
                step = ExternStep(buf, len(self.steps))
                self.steps.append(step)
                self.where[buf.name] = step
        self._finish()
        return self

    # -- placing one node ------------------------------------------------------
    def _schedule(self, node: Node):
        deps = set(node.reads)
        target = node.buffer.store_target
        if target is not None:  # a mutation runs after everything that reads the old value
            deps |= {r for r in self.readers.get(target.name, []) if r != node.name}
        producer_orders = [self.where[d].order for d in deps if d in self.where]
        last_producer = max(producer_orders, default=-1)
        reason = "fusion disabled" if not config.fusion else ""
        if node.is_scan:
            reason = f"{node.name} is a scan ({node.buffer.reduction_type}), which runs in a kernel of its own"
        elif node.buffer.is_scatter:
            reason = f"{node.name} is a scatter, which runs in a kernel of its own (after its buffer is filled)"
        elif config.fusion:
            for step in reversed(self.steps):
                if step.order < last_producer:
                    reason = reason or _needs(self.steps[last_producer])
                    break
                if isinstance(step, FusedKernel) and step.is_scan:
                    member, why = self._join_scan(step, node, deps)
                    if member is not None:
                        step.members.append(member)
                        self.where[node.name] = step
                        return
                    reason = reason or f"{node.name} cannot join {step.members[0].node.name}'s scan: {why}"
                elif isinstance(step, FusedKernel):
                    member, why = self._try_fuse(step, node, deps)
                    if member is None:
                        member, why = self._absorb_pointwise(step, node, deps, why)
                    if member is not None:
                        step.members.append(member)
                        self.where[node.name] = step
                        return
                    reason = reason or f"{node.name} cannot join {step.members[0].node.name}'s kernel: {why}"
                else:
                    reason = reason or f"{step.buffer.name} ({_op(step.buffer)}) is an extern call"
        xn, rn = (node.numel, node.rnumel) if node.is_reduction or node.is_scan else (node.numel, 1)
        member = place(node, xn, rn)
        member.phase = 0 if member.role != "row" or rn == 1 else -1
        kernel = FusedKernel([member], xn, rn, len(self.steps), split_reason=reason)
        self.steps.append(kernel)
        self.where[node.name] = kernel

    def _try_fuse(self, kernel: FusedKernel, node: Node, deps: set[str]):
        """(member, "") when `node` can join `kernel`, else (None, why not)."""
        if kernel.is_scatter:  # its atomic adds are done only once the kernel ends
            return None, f"{kernel.members[0].node.name} is a scatter, which runs in a kernel of its own"
        # every producer outside this kernel must already be scheduled before it
        for d in deps:
            step = self.where.get(d)
            if step is not None and step is not kernel and step.order > kernel.order:
                return None, f"it also needs {d}, computed after that kernel (fusing would make a cycle)"
        written = kernel.writes
        if not (deps & written or any(set(node.reads) & set(m.reads) for m in kernel.members)):
            return None, "they share no buffer"
        member, why = self._placed(kernel, node, deps & written)
        if member is None:
            return None, why
        phase = _first_phase(member, kernel)
        for name in member.reads.keys() & written:
            producer = next(m for m in kernel.members if m.node.name == name)
            phase = max(phase, _phase_after(producer, member, kernel))
        # a mutation's target may be read in this kernel only at the index it writes,
        # and only before: the write joins the last loop over r that reads it
        target = node.buffer.store_target
        if target is not None:
            if not read_only_at(kernel.members, target.name, member.store_index):
                return None, f"it overwrites {target.name}, which the kernel reads elsewhere"
            phase = max([phase] + [m.phase for m in kernel.members if target.name in m.reads])
        member.phase = phase
        if member.role == "full" and phase >= 2:
            why = _splits_rows_alone(kernel, self.graph.device) or _writes_across_the_walk(kernel, member)
            if why:
                return None, why
        return member, ""

    def _join_scan(self, kernel: FusedKernel, node: Node, deps: set[str]):
        """(member, "") when pointwise `node` reads the scan's values (at the
        elements it writes) and can be computed with them, in the scan's loop
        (an exclusive cumsum, positions from a mask's cumsum, a cast), else (None, why)."""
        if node.is_reduction or node.is_scan or node.buffer.store_target is not None:
            return None, "only a pointwise consumer joins a scan"
        if not deps & kernel.writes:
            return None, "it reads nothing the scan computes"
        member, why = self._try_fuse(kernel, node, deps)
        if member is not None and member.role != "full":
            return None, "it needs whole rows scanned"
        return member, why

    def _absorb_pointwise(self, kernel: FusedKernel, node: Node, deps: set[str], why: str):
        """(member, "") when reduction `node` can take over pointwise `kernel`: its
        members re-placed as full members of the reduction's loops (each element
        computed and stored once, in the reduction's pass, which then need not read
        it back), else (None, why); only where that pays (_absorbs_well)."""
        if kernel.is_reduction or not node.is_reduction or node.rnumel < 2 or kernel.xnumel != node.numel * node.rnumel:
            return None, why
        members = [place(m.node, node.numel, node.rnumel) for m in kernel.members]
        if not all(members):
            return None, why
        for m in members:
            m.phase = 0
        reshaped = FusedKernel(members, node.numel, node.rnumel, kernel.order, kernel.name, kernel.split_reason)
        member, _ = self._try_fuse(reshaped, node, deps)
        if member is None or not _absorbs_well(FusedKernel(members + [member], node.numel, node.rnumel, 0), self.graph.device):
            return None, why
        kernel.members, kernel.xnumel, kernel.rnumel = members, node.numel, node.rnumel
        return member, ""

    def _placed(self, kernel: FusedKernel, node: Node, consumed: set):
        """(member, "") for `node` in `kernel`, else (None, why not). A full node's
        outer loops walk x0 and its inner ones r0; or, where only that way it reads
        what the kernel computes or loads at the same elements, the other way round
        (r0 over its outer loops: a reduction over the outer dim, as in a bias
        gradient), or r0 over middle loops (a reduction over a middle dim, as in
        softmax(1)). Fused with none, one of them would walk memory transposed."""
        xn, rn = kernel.xnumel, kernel.rnumel
        member = place(node, xn, rn)
        why = _why_not_fused(member, kernel, consumed) if member is not None else ""
        if member is not None and not why:
            return member, ""
        if not node.is_reduction and not node.is_scan and rn > 1 and node.numel == xn * rn:  # a full node
            others = (place(node, xn, rn, r_dims=dims) for dims in middle_dims(node.sizes, rn))
            for other in itertools.chain([place(node, xn, rn, r_major=True)], others):
                if other is not None and not _why_not_fused(other, kernel, consumed):
                    return other, ""
        if member is None:
            shape = f"{node.numel}x{node.rnumel}" if node.is_reduction else f"{node.numel}"
            return None, f"its iteration space ({shape}) does not fit the kernel's ({xn}x{rn})"
        return None, why

    def _finish(self):
        """Decide which buffers must reach memory and name the kernels."""
        outputs = {o.buffer.name for o in self.graph.outputs if hasattr(o, "buffer")}
        for step in self.steps:
            if not isinstance(step, FusedKernel):
                continue
            names = {m.node.name for m in step.members}
            for m in step.members:
                name = m.node.name
                outside = any(r not in names for r in self.readers.get(name, []))
                later = any(
                    m.role == "full" and c.phase != m.phase
                    for c in step.members
                    if name in c.reads
                )
                m.stored = name in outputs or outside or later or m.node.buffer.store_target is not None
                if not config.fusion:
                    m.stored = True


def _splits_rows_alone(kernel: FusedKernel, device) -> str:
    """Why a per-element consumer must not join this reduction ("" when it may):
    alone, the planner splits its rows across programs or streams each row once,
    and the consumer, which needs whole rows reduced, would take that away.
    - Rows along the contiguous dim: few rows (under two programs an SM), each
      longer than a program holds in registers (of 32-bit elements). Fused,
      every row would be one program that reads its row twice: under one
      program an SM, alone, the rows split; up to two, a program per row reads
      it once (H200, group_norm 8 groups [32, 256, 56, 56], 256 rows of 100352,
      per call: 101.0 us as one kernel, 84.8 as two). With more or shorter
      rows, a consumer that reads the rows again in the same kernel finds them
      in cache (group_norm 32 groups: one kernel). On a GPU, rows few enough
      split cooperatively with it (triton_config).
    - Rows along a strided dim (x - x.mean(0)): too few columns for blocks of
      columns (triton_config.outer_width) on every SM. Fused, each program walks all rows in
      blocks narrow enough to fill the GPU, down to 8 columns: 16 or 32 bytes of
      each 128-byte line (H200, x - x.mean(0) per call: bf16 [8192, 4096] 147 us
      as one kernel, 65 as two; fp32 [16384, 4096] 323 -> 205).
    - A softmax over a strided dim (softmax(0)), whose max and sum of exp split
      together in Triton: under one such block an SM. Fused, its programs each
      read their rows twice; split, the reduction reads them once and the
      consumer once more (H200, per call, one kernel against two: softmax(0)
      fp32 [65536, 256] 344 -> 96 us, [4096, 4096] 78.5 -> 60.9, bf16 [32768,
      64] 114 -> 27; but fp32 [1024, 16384], 256 blocks, 55.9 against 63.3).
    - Rows along a strided dim longer than OUTER_FUSED_MAX_ROWS, in blocks of
      columns two or more an SM (softmax(1) of [B, T, D]): fused, each program
      reads its block twice, and the second pass misses the cache (H200, per
      call, one kernel against two: softmax(1) [64, 512, 1000] fp32 120.0 ->
      106.7 us, bf16 74.8 -> 65.6; [16, 2048, 1000] fp32 125.5 -> 109.7; x -
      x.mean(1) [64, 512, 1000] fp32 117.1 -> 105.2, bf16 55.5 -> 58.9). Up to
      256 rows one kernel is as fast or faster ([64, 256, 1000] fp32 57.7 /
      58.2; [32, 256, 56, 56] 74.2 against 83.2)."""
    from .codegen import triton_config as tc  # it imports this module

    if device.type == "cuda" and tc.cooperative_rows(kernel.xnumel, kernel.rnumel):
        return ""
    if not tc.reduces_contiguous(kernel):
        xn, rn = kernel.xnumel, kernel.rnumel
        alone = (f"{xn} columns of {rn} rows: alone, the reduction splits its rows across programs "
                 f"in blocks of {tc.outer_width(xn)} columns")
        if kernel.can_split() and tc.splits_outer_rows(xn, rn):
            return f"{alone}; a per-element consumer would make each program walk every row in narrower blocks"
        online = kernel.can_split(online_sums=config.target_for(device) == "triton")
        if online and tc.splits_outer_rows(xn, rn) and tc.cdiv(xn, tc.outer_width(xn)) < tc.SM_COUNT:
            return (f"{alone}; a per-element consumer would leave SMs without a block of columns, "
                    "each program walking every row twice")
        if rn > tc.OUTER_FUSED_MAX_ROWS and tc.cdiv(xn, tc.outer_width(xn)) >= 2 * tc.SM_COUNT:
            return (f"{alone}, several an SM; a per-element consumer would make each of them walk "
                    f"its {rn} rows twice, which the cache does not hold until the second pass")
        return ""
    longest_held = max(tc.WIDE_PERSISTENT_MAX_RBLOCK.values())
    if kernel.can_split() and kernel.xnumel < 2 * tc.SM_COUNT and kernel.rnumel > longest_held:
        # a GPU program of a looped reduction along the contiguous dim takes one row
        splits = kernel.xnumel < tc.split_blocks(inner=True)
        alone = "splits its rows across programs" if splits else "reads each row once"
        return (f"{kernel.xnumel} rows of {kernel.rnumel}: alone, the reduction {alone}; a per-element "
                "consumer would make every row one program that reads it twice")
    return ""


def _writes_across_the_walk(kernel: FusedKernel, member: Member) -> str:
    """Why a per-element consumer must not join a reduction that walks its reduced
    dims in another order (codegen.common.reduction_order; "" when it may): it
    writes across that walk, an element a row of the walk apart. A group norm over
    a channels-last input on a GPU, whose output eager makes contiguous: apart, a
    2-D tile writes it coalesced (H200, 32 groups [32, 256, 56, 56], per call,
    fused -> apart: bf16 127.6 -> 63.1 us, fp32 96.3 -> 99.5; Inductor 64.4, 96.5)."""
    from .codegen.common import reduction_order, steps_by_one  # it imports this module

    order = reduction_order(kernel)
    if order is None or steps_by_one(member.store_index, order, R):
        return ""
    return f"the reduction walks its rows in memory order ({order}), which it would write across"


def _absorbs_well(kernel: FusedKernel, device) -> bool:
    """Whether a reduction that takes over the pointwise kernel of the value it
    reduces (`kernel`, both together) beats the two apart: where it reduces
    along the contiguous dim, and, in Triton, in rows that start on 16 bytes
    and are no longer than a program could hold. Per call, a value stored for a
    matmul and its sums (tanh-GELU's backward), apart -> absorbed:
    - H200, us: rows bf16 [8192, 4096] 72.2 -> 70.0 (Inductor, absorbed, 66.3),
      [16384, 1024] 38.8 -> 37.9; fp32 [8192, 4096] 122.0 -> 102.0, [2048,
      25088] 190.6 -> 158.4, [65536, 256] 71.2 -> 48.6. Rows off 16 bytes: bf16
      [4096, 12289] 113.5 -> 167.6, [4096, 50257] 445 -> 594. Columns (a bias
      gradient): bf16 [8192, 4096] 80.3 -> 82.1, [8192, 3072] 62.5 -> 68.5; the
      GPT-2 block's fc bias gradient absorbed took 102.8 (Inductor keeps them
      apart: 53.0 + 16.3 + 2.6).
    - C++, one thread, ms: rows fp32 [4096, 1024] 14.0 -> 11.7, [512, 50257]
      132 -> 122; columns fp32 [4096, 1024] 15.7 -> 36.0."""
    from .codegen import triton_config as tc  # it imports this module

    if not tc.reduces_contiguous(kernel):
        return False
    if config.target_for(device) != "triton":
        return True
    itemsize = max(m.node.buffer.dtype.itemsize for m in kernel.members)
    aligned = kernel.rnumel * itemsize % 16 == 0
    return aligned and tc.pow2(kernel.rnumel) <= tc.WIDE_PERSISTENT_MAX_RBLOCK.get(itemsize, 0)


def _first_phase(member: Member, kernel: FusedKernel) -> int:
    if kernel.rnumel == 1 and not any(m.role == "reduction" for m in kernel.members):
        return 0  # a pointwise kernel: one loop, no phases
    return -1 if member.role == "row" else 0


def _phase_after(producer: Member, consumer: Member, kernel: FusedKernel) -> int:
    """The earliest phase in which `consumer` can read `producer`'s value."""
    if kernel.rnumel == 1 and not any(m.role == "reduction" for m in kernel.members):
        return 0
    p = producer.phase
    if producer.role in ("full", "scan"):  # same loop is fine
        return p
    if producer.role == "reduction":  # its value exists after loop p // 2
        return p + 1 if consumer.role == "row" else p + 2
    # a row value: rows in the same slot, loops in the next loop
    return p if consumer.role == "row" else p + 1


def _why_not_fused(member: Member, kernel: FusedKernel, consumed: set) -> str:
    """Why `member` cannot join `kernel` as placed ("" if it can): it must read
    what the kernel computes where it is written, and a full member that reads
    none of it must load some element the kernel loads, at the same index."""
    by_name = {m.node.name: m for m in kernel.members}
    for name, idxs in member.reads.items():
        producer = by_name.get(name)
        if producer is None:
            continue
        if not _same_index(idxs, producer, member):
            return f"it reads {name} at another index than the kernel writes it (e.g. transposed)"
        if producer.role == "full" and member.role == "row":
            return f"a per-row value cannot depend on the whole row {name}"
    if member.role == "full" and not consumed and not _shares_a_load(member, kernel):
        return "it loads no element the kernel loads at the same index (fused, one of them would walk memory transposed)"
    return ""


def layout_deciding(indices: list, x: sympy.Symbol = X) -> list:
    """Of the load indices that walk r, those that decide a reduction's layout:
    the ones that also walk x (full-size inputs); loads along r alone (a weight, a
    row's statistics) only where there are none. Four per-row vectors read along
    r outvoted a LayerNorm backward's one [rows, cols] input, and its column sums
    walked that input transposed (H200, [8192, 4096] bf16: 703 us, against 129)."""
    along_r = [i for i in indices if R in i.free_symbols]
    return [i for i in along_r if x in i.free_symbols] or along_r


def _shares_a_load(member: Member, kernel: FusedKernel) -> bool:
    """Whether `member` loads an element at the same kernel index as a member of
    `kernel`, at an index that varies along both x and r (along r, in a kernel of
    one row): sharing a scalar, or a weight along one dim, saves nothing worth a
    walk in another layout (a LayerNorm's input gradient, fused by the loss's
    scalar gradient with the weight gradient's column sums, read its input again
    in other blocks: H200, [8192, 4096] bf16, 147 us for that kernel, against 31
    as the row kernel's epilogue)."""
    walks = {R} if kernel.xnumel == 1 else {X, R}
    for m in kernel.members:
        for name in member.reads.keys() & m.reads.keys():
            theirs = [i for i in m.reads[name] if i is not None and walks <= i.free_symbols]
            if any(i is not None and any(fold_divmod(i - j) == 0 for j in theirs) for i in member.reads[name]):
                return True
    return False


def _same_index(read_indices, producer: Member, consumer: Member) -> bool:
    for idx in read_indices:
        if idx is None:
            return False
        if producer.role in ("reduction", "row") and R in idx.free_symbols:
            return False
        if fold_divmod(idx - producer.store_index) != 0:
            return False
    return True


def _needs(step) -> str:
    if isinstance(step, ExternStep):
        return f"it reads {step.buffer.name}, the result of {_op(step.buffer)} (an extern call)"
    return "it reads a value computed by a later kernel"


def _op(buf) -> str:
    return buf.origin_ops[0] if getattr(buf, "origin_ops", None) else type(buf).__name__


def _deps(buf: ir.Buffer) -> list[str]:
    if isinstance(buf, ir.ComputedBuffer):
        iv = loop_vars("i", len(buf.ranges))
        rv = loop_vars("r", len(buf.reduction_ranges))
        deps = list(_reads(buf.evaluate(iv, rv)))
        if buf.store_target is not None:
            deps.append(buf.store_target.name)
        return deps + _scatter_source(buf)
    if isinstance(buf, ir.ExternCall):
        return list(_refs(buf.args) + _refs(list(buf.kwargs.values())))
    if isinstance(buf, ir.MultiOutput):
        return [buf.parent.name]
    return []


def _scatter_source(buf: ir.ComputedBuffer) -> list[str]:
    """The buffer a scatter copies before it adds (the wrapper copies it)."""
    return [buf.scatter_init.buffer] if buf.is_scatter and isinstance(buf.scatter_init, ir.TensorRef) else []


def _refs(args: Sequence) -> list[str]:
    out = []
    for a in args:
        if isinstance(a, ir.TensorRef):
            out.append(a.buffer)
        elif isinstance(a, (list, tuple)):
            out.extend(_refs(a))
    return out


def schedule(graph) -> Scheduler:
    return Scheduler(graph).run()
