"""The Python wrapper: allocates buffers, launches kernels and ATen calls in
order, reuses freed buffers, returns the outputs. Generated as source (the
report shows it) and exec'd once."""
from __future__ import annotations

import math

import torch

from .. import ir
from ..graph import View
from ..index import is_dense
from ..scheduler import ExternStep, FusedKernel, read_only_at


class WrapperCode:
    def __init__(self, graph, sched, launch_code, in_place: bool = False):
        """launch_code(kernel_step, arg_names) -> one line of Python launching it.
        in_place: a pointwise kernel may write its output over an input it is the
        last to read (the backend's kernels must allow aliased pointers). A
        scatter takes over the buffer it starts from on any backend: its
        kernel does not read that buffer."""
        self.g = graph
        self.sched = sched
        self.launch_code = launch_code
        self.lines: list[str] = []
        self.ns: dict = {"torch": torch, "empty_strided": torch.empty_strided, "reinterpret": _reinterpret, "laid_out": _laid_out}
        self.allocated: dict[str, str] = {}  # buffer -> python name holding its storage
        self.pool: dict[tuple, list[str]] = {}
        self.in_place = in_place
        self.buffers = {b.name: b for b in graph.buffers}
        self.taken: set[str] = set()  # inputs whose storage a kernel's output took over

    def stash(self, value, prefix="const") -> str:
        """A name for `value` in the wrapper's namespace: underscored, as no buffer's
        is (a graph's constant const4 read `const4 = const4`, a local unbound)."""
        name = f"_{prefix}{len(self.ns)}"
        self.ns[name] = value
        return name

    # -- values -----------------------------------------------------------------
    def pyrepr(self, v) -> str:
        if isinstance(v, ir.TensorRef):
            base = self.allocated.get(v.buffer, v.buffer)
            if v.is_whole:
                return base
            return f"reinterpret({base}, {tuple(v.size)}, {tuple(v.stride)}, {v.offset})"
        if isinstance(v, list):
            return "[" + ", ".join(self.pyrepr(x) for x in v) + "]"
        if isinstance(v, tuple):
            return "(" + "".join(self.pyrepr(x) + ", " for x in v) + ")"
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        if isinstance(v, float) and math.isfinite(v):
            return repr(v)
        if isinstance(v, torch.dtype):
            return str(v)
        return self.stash(v)

    def view_repr(self, v: View) -> str:
        return self.pyrepr(v.ref())

    # -- code -------------------------------------------------------------------------
    def generate(self) -> str:
        g = self.g
        args = ", ".join(f"arg{i}" for i in range(len(g.example_inputs)))
        self.lines.append("def call(args):")
        if g.example_inputs:
            self.lines.append(f"    {args}{',' if len(g.example_inputs) == 1 else ''} = args")
        self.lines.append("    args.clear()")
        for i, b in enumerate(g.inputs):
            self.allocated[b.name] = b.name
        for b in g.buffers:
            if isinstance(b, ir.ConstantBuffer):
                self.lines.append(f"    {b.name} = {self.stash(b.value)}")
                self.allocated[b.name] = b.name
        last_use = self._last_uses()
        outputs = {o.buffer.name for o in g.outputs if isinstance(o, View)}
        for pos, step in enumerate(self.sched.steps):
            if isinstance(step, FusedKernel):
                dying = [n for n in last_use.get(pos, []) if n not in outputs and n in self.allocated]
                self._kernel(step, dying)
            else:
                self._extern(step)
            for name in last_use.get(pos, []):
                if name not in outputs and name in self.allocated and not name.startswith("arg") and name not in self.taken:
                    self._free(name)
        outs = []
        for o in g.outputs:
            outs.append(self.view_repr(o) if isinstance(o, View) else self.pyrepr(o))
        self.lines.append(f"    return ({''.join(x + ', ' for x in outs)})")
        return "\n".join(self.lines) + "\n"

    def _alloc(self, buf: ir.Buffer):
        key = (tuple(buf.size), tuple(buf.stride), buf.dtype)
        if self.pool.get(key):
            old = self.pool[key].pop()
            self.lines.append(f"    {buf.name} = {old}  # reuse")
        else:
            self.lines.append(
                f"    {buf.name} = empty_strided({tuple(buf.size)}, {tuple(buf.stride)}, dtype={buf.dtype}, device={self.pyrepr_device()})"
            )
        self.allocated[buf.name] = buf.name

    def _free(self, name: str):
        buf = self.buffers[name]
        if isinstance(buf, ir.ComputedBuffer):
            self.pool.setdefault((tuple(buf.size), tuple(buf.stride), buf.dtype), []).append(name)
        else:
            self.lines.append(f"    del {name}")
        self.allocated.pop(name, None)

    def pyrepr_device(self) -> str:
        if "device" not in self.ns:
            self.ns["device"] = self.g.device
        return "device"

    def _kernel(self, k: FusedKernel, dying: list[str]):
        from .common import kernel_args

        for m in k.members:
            if m.node.buffer.is_scatter:
                self._scatter_start(k, m.node.buffer, dying)
            elif m.stored and m.node.buffer.store_target is None:
                donor = self._in_place_donor(k, m, dying) if self.in_place else None
                if donor:
                    self._take_over(donor, m.node.buffer, dying)
                else:
                    self._alloc(m.node.buffer)
        args = kernel_args(k)
        names = [self.allocated.get(n, n) for n in args.all()]
        self.lines.append("    " + self.launch_code(k, names))

    def _scatter_start(self, k: FusedKernel, buf: ir.ComputedBuffer, dying: list[str]):
        """A scatter's kernel writes only the elements its indices pick: the rest it
        starts from. That is the buffer it copies itself, where that buffer dies at
        this kernel and the kernel reads none of it (a chain of index_puts, an
        index_put into a value computed for it): no copy. Else a fresh copy or fill."""
        init = buf.scatter_init
        if (isinstance(init, ir.TensorRef) and init.is_whole and init.buffer in dying
                and self._reusable(init.buffer, buf) and not any(init.buffer in m.reads for m in k.members)):
            self._take_over(init.buffer, buf, dying)
            return
        self._alloc(buf)
        self.lines.append(f"    {self._scatter_init(buf)}")

    def _reusable(self, name: str, out: ir.Buffer) -> bool:
        """Whether buffer `name` is storage of ours (not an input's or a view's) in
        `out`'s layout, which `out` could take over once `name` is dead."""
        buf = self.buffers[name]
        fresh = isinstance(buf, ir.ComputedBuffer) or (isinstance(buf, ir.ExternCall) and buf.kind == "extern" and buf.returns_tensor)
        return fresh and (tuple(buf.size), tuple(buf.stride), buf.dtype) == (tuple(out.size), tuple(out.stride), out.dtype)

    def _take_over(self, name: str, out: ir.Buffer, dying: list[str]):
        """`out` lives in the storage of `name`, which dies here."""
        self.taken.add(name)
        dying.remove(name)
        self.lines.append(f"    {out.name} = {self.allocated[name]}  # in place of {name}")
        self.allocated[out.name] = out.name

    def _scatter_init(self, buf: ir.ComputedBuffer) -> str:
        init = buf.scatter_init
        if isinstance(init, ir.TensorRef):
            return f"{buf.name}.copy_({self.pyrepr(init)})"
        return f"{buf.name}.fill_({self.pyrepr(init)})" if init else f"{buf.name}.zero_()"

    def _in_place_donor(self, k: FusedKernel, m, dying: list[str]) -> str | None:
        """An input this pointwise kernel reads last, in m's layout and only where
        m writes: m can overwrite it (a write to a line the producer just left in
        L2, and one allocation fewer). Only the kernel's last member: the code of
        earlier ones, which might load the input again, runs before m stores."""
        if k.is_reduction or m is not k.members[-1]:
            return None
        for name in dying:
            if self._reusable(name, m.node.buffer) and read_only_at(k.members, name, m.store_index):
                return name
        return None

    def _extern(self, step: ExternStep):
        buf = step.buffer
        if isinstance(buf, ir.MultiOutput):
            self.lines.append(f"    {buf.name} = laid_out({buf.parent.name}{buf.subscript}, {tuple(buf.stride)})")
        else:
            op = self.stash(buf.target, "aten_")
            call_args = ", ".join([self.pyrepr(a) for a in buf.args] + [f"{k}={self.pyrepr(v)}" for k, v in buf.kwargs.items()])
            call = f"laid_out({op}({call_args}), {tuple(buf.stride)})" if buf.returns_tensor else f"{op}({call_args})"
            self.lines.append(f"    {buf.name} = {call}  # {buf.target} ({buf.kind})")
        self.allocated[buf.name] = buf.name

    def _last_uses(self) -> dict[int, list[str]]:
        """step position -> buffers whose last reader is that step."""
        from ..scheduler import _deps, _scatter_source
        from .common import kernel_args

        last: dict[str, int] = {}
        for pos, step in enumerate(self.sched.steps):
            if isinstance(step, FusedKernel):  # and what its scatters copy before it runs
                reads = kernel_args(step).inputs + [n for m in step.members for n in _scatter_source(m.node.buffer)]
            else:
                reads = _deps(step.buffer)
            for n in reads:
                last[n] = pos
        out: dict[int, list[str]] = {}
        for n, pos in last.items():
            out.setdefault(pos, []).append(n)
        return out


def _laid_out(t: torch.Tensor, stride):
    """An ATen result in the layout the graph recorded, which kernels read it with:
    some ops stride their output like their inputs, whose layout may be ours."""
    if all(a == b or n < 2 for a, b, n in zip(t.stride(), stride, t.shape)) or not is_dense(t.shape, stride):
        return t
    return torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device).copy_(t)


def _reinterpret(base: torch.Tensor, size, stride, offset):
    return torch.as_strided(base, size, stride, base.storage_offset() + offset)
