"""Lowering driver: a functional ATen FX graph -> buffers of loop IR.

Every FX value lowers to a `TensorValue`:
- `View`: a strided window onto a buffer in memory (inputs, computed buffers,
  extern results; permute/slice/expand keep it a View, so externs get it free);
- `Lazy`: a pointwise function of the index that is not in memory yet. Consumers
  inline it (this is vertical fusion); it is realized into a buffer only when
  something needs memory: an output, an extern argument, many re-reads.
"""
from __future__ import annotations

import math
import operator
from typing import Callable, Sequence

import sympy
import torch
import torch.fx

from . import ir
from .index import contiguous_strides, is_dense, linear_index, loop_vars


class TensorValue:
    size: tuple[int, ...]
    dtype: torch.dtype
    origins: tuple[str, ...]

    def load(self, index: Sequence[sympy.Expr]) -> ir.Expr:
        raise NotImplementedError

    @property
    def ndim(self):
        return len(self.size)


class View(TensorValue):
    def __init__(self, buffer: ir.Buffer, size, stride, offset=0):
        self.buffer = buffer
        self.size = tuple(int(s) for s in size)
        self.stride = tuple(int(s) for s in stride)
        self.offset = int(offset)
        self.dtype = buffer.dtype
        self.origins = ()

    def load(self, index):
        return ir.load(self.buffer.name, linear_index(index, self.stride, self.offset), self.dtype)

    def ref(self) -> ir.TensorRef:
        b = self.buffer
        whole = self.size == tuple(b.size) and self.stride == tuple(b.stride) and self.offset == 0
        return ir.TensorRef(b.name, self.size, self.stride, self.offset, whole)


class Lazy(TensorValue):
    def __init__(self, size, dtype, fn: Callable, origins=()):
        self.size = tuple(int(s) for s in size)
        self.dtype = dtype
        self.fn = fn
        self.origins = tuple(dict.fromkeys(origins))
        self._memo: dict = {}
        self.realized: View | None = None
        self._walked: list | None = None
        self._loads: int | None = None

    def load(self, index):
        reader = ir.reader()
        if self._read_back(reader):
            reader.reads_back(self.realized.buffer)
            return self.realized.load(index)
        key = (tuple(index), reader)  # what an inner value inlines depends on the reader
        if key not in self._memo:
            e = self.fn(list(index))
            assert e.dtype == self.dtype, (e, self.dtype)
            self._memo[key] = e
        return self._memo[key]

    def _read_back(self, reader) -> bool:
        """Whether `reader` loads this value from the buffer it was realized in
        instead of recomputing it: when that buffer comes first (so the order of
        buffers still holds) and recomputing would read more than one value
        (a bias gradient then reads the stored activation gradient, not its inputs)."""
        return (self.realized is not None and reader is not None
                and self.realized.buffer.order < reader.order and self.count_loads() > 1)

    def count_loads(self) -> int:
        """Loads of the whole inlined expression (asked at each read of a stored value: kept)."""
        if self._loads is None:
            self._loads = sum(e.op == "load" for e in self._walk())
        return self._loads

    def count_ops(self) -> int:
        """Operations (loads and constants included) of the whole inlined expression."""
        return len(self._walk())

    def _walk(self) -> list:
        if self._walked is None:
            with ir.reading_as(None):
                self._walked = self.load(loop_vars("i", self.ndim)).walk()
        return self._walked


class GraphLowering:
    """Walks the ATen graph once, calling the lowering registered for each op."""

    # realize a Lazy that several nodes read once its expression reads this many times
    REALIZE_READS = 8
    # realize any Lazy once its expression holds this many operations: inlined on, an
    # unrolled loop's would grow without bound, past the depth Python's recursion
    # limit lets us walk (Inductor realizes at 100 too); the scheduler still fuses it
    # with its reader, so it costs no traffic where they fit one kernel. Counting
    # them evaluates the expression, so only values this many lowered nodes deep are
    # counted (counting each node's took an eighth of a GPT-2 block's compile)
    REALIZE_OPS = 100
    COUNT_OPS_DEPTH = 24

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence, device: torch.device):
        self.gm = gm
        self.example_inputs = list(example_inputs)
        self.device = device
        self.buffers: list[ir.Buffer] = []
        self.inputs: list[ir.InputBuffer] = []
        self.outputs: list[View] = []
        self.op_of: dict[str, str] = {}  # fx node name -> short ATen op name
        self.env: dict[torch.fx.Node, object] = {}
        self.current: torch.fx.Node | None = None
        self.mutations: list[ir.ComputedBuffer] = []
        self.effects: list[ir.ExternCall] = []  # calls run for what they do, not for a value (asserts)
        self.device_copies: dict[torch.fx.Node, View] = {}  # values of another device, copied to this one
        self.crosses_devices = False  # some op runs on, or copies from, another device
        self.elsewhere: set[torch.fx.Node] = set()  # nodes ATen computed on another device
        self.lazy_depth: dict[torch.fx.Node, int] = {}  # nodes inlined into this one's value, along its longest path
        self.random_seed: View | None = None  # drawn once a call (lowerings.randomness)
        self.random_numbers = 0  # random values numbered so far

    # -- naming --------------------------------------------------------------
    def new_name(self, prefix="buf") -> str:
        return f"{prefix}{len(self.buffers)}"

    def register(self, buf: ir.Buffer) -> ir.Buffer:
        buf.order = len(self.buffers)
        self.buffers.append(buf)
        return buf

    # -- realization ---------------------------------------------------------
    def realize(self, value: TensorValue, stride: Sequence[int] | None = None) -> View:
        if isinstance(value, View):
            return value
        assert isinstance(value, Lazy), value
        if value.realized is not None and (stride is None or value.realized.stride == tuple(stride)):
            return value.realized
        stride = tuple(stride) if stride is not None else contiguous_strides(value.size)
        fn = value.load
        buf = self.register(
            ir.ComputedBuffer(
                name=self.new_name(),
                size=value.size,
                stride=stride,
                dtype=value.dtype,
                device=self.device,
                kind="pointwise",
                ranges=value.size,
                body=lambda idx, fn=fn: fn(idx),
                origins=value.origins,
                origin_ops=self.ops_of(value.origins),
            )
        )
        view = View(buf, value.size, stride)
        view.origins = value.origins
        value.realized = view
        return view

    def view_of_realized(self, a: "Lazy") -> View | None:
        """A view (permute, slice...) of a computed value that is in memory anyway (or
        that it covers whole): a strided window on that buffer, not a copy."""
        base = getattr(a, "view_of", None)
        if base is None:
            return None
        root, stride, offset = base
        contiguous = contiguous_strides(root.size)
        done = root.realized is not None and root.realized.stride == contiguous
        if not done and math.prod(a.size) < math.prod(root.size):
            return None
        return View(self.realize(root, contiguous).buffer, a.size, stride, offset)

    def ops_of(self, origins) -> tuple[str, ...]:
        return tuple(self.op_of.get(o, o) for o in origins)

    # -- driver --------------------------------------------------------------
    def run(self):
        from .lowerings import lower_node

        placeholder_index = 0
        for node in self.gm.graph.nodes:
            self.current = node
            if node.op == "placeholder":
                self.env[node] = self._placeholder(node, placeholder_index)
                placeholder_index += 1
            elif node.op == "call_function":
                self.op_of[node.name] = _op_name(node.target)
                args, kwargs = self._args(node)
                if node.target is operator.getitem:
                    self.env[node] = args[0][args[1]]
                else:
                    self.env[node] = lower_node(self, node, args, kwargs)
                self._maybe_realize_inputs(node)
                self._realize_if_large(node)
            elif node.op == "get_attr":
                self.env[node] = self._constant(node)
            elif node.op == "output":
                self._outputs(node)
            else:
                raise NotImplementedError(f"FX node kind {node.op}")
        self.current = None
        return self

    def _args(self, node):
        return self.args_with(node, {})

    def args_with(self, node, replaced: dict):
        """The node's args and kwargs as lowered values, `replaced` {fx node: value} taking precedence."""
        def look(a):
            if not isinstance(a, torch.fx.Node):
                return a
            return replaced[a] if a in replaced else self.env[a]

        args = torch.fx.node.map_aggregate(node.args, look)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, look)
        return args, kwargs

    def _placeholder(self, node, position):
        ex = self.example_inputs[position]
        if not isinstance(ex, torch.Tensor):
            return ex  # a python scalar input
        buf = ir.InputBuffer(
            name=f"arg{position}",
            size=tuple(ex.shape),
            stride=tuple(ex.stride()),
            dtype=ex.dtype,
            device=ex.device,
            position=position,
            offset=ex.storage_offset(),
        )
        self.inputs.append(buf)
        self.register(buf)
        return View(buf, buf.size, buf.stride, 0)

    def _constant(self, node):
        value = getattr(self.gm, node.target)
        if not isinstance(value, torch.Tensor):
            return value
        buf = self.register(ir.ConstantBuffer(
            name=self.new_name("const"), size=tuple(value.shape), stride=tuple(value.stride()),
            dtype=value.dtype, device=value.device, offset=value.storage_offset(), value=value,
        ))
        return View(buf, buf.size, buf.stride, 0)

    def _maybe_realize_inputs(self, node):
        """A Lazy read by several consumers is realized once re-reading it would
        cost more loads than one write and one read per consumer."""
        for a in node.all_input_nodes:
            v = self.env.get(a)
            if isinstance(v, Lazy) and v.realized is None and len(a.users) > 1:
                if v.count_loads() >= self.REALIZE_READS:  # a reshape: its root stored once
                    self.env[a] = self._root_view(v, contiguous_strides(v.size)) or self.realize(v)

    def _realize_if_large(self, node):
        v = self.env[node]
        if not isinstance(v, Lazy) or v.realized is not None:
            return
        depth = 1 + max((self.lazy_depth.get(a, 0) for a in node.all_input_nodes), default=0)
        if depth > self.COUNT_OPS_DEPTH and v.count_ops() > self.REALIZE_OPS:
            val = node.meta.get("val")  # stored in eager's layout: it may be an output (a channels_last pooling)
            stride = tuple(val.stride()) if _dense(val) else None
            self.env[node] = self._root_view(v, stride) or self.realize(v, stride)
            depth = 0
        self.lazy_depth[node] = depth

    def _outputs(self, node):
        outs = node.args[0]
        flat = list(outs) if isinstance(outs, (list, tuple)) else [outs]
        holders: dict[str, torch.fx.Node] = {}
        for o in flat:
            if not isinstance(o, torch.fx.Node):
                self.outputs.append(o)
                continue
            self.outputs.append(self._unshared(o, self.realize_output(o), holders))

    def _unshared(self, node, v, holders: dict):
        """Output `v`, copied where it lies in a buffer an earlier output holds while
        eager gives the two separate memory: an identical reduction is lowered once,
        and sum(1) and sum(1, keepdim=True) came back as one tensor (writing one
        changed the other)."""
        if not isinstance(v, View) or isinstance(v.buffer, ir.InputBuffer):
            return v
        first = holders.setdefault(v.buffer.name, node)
        if first is node or share_memory(first.meta.get("val"), node.meta.get("val")):
            return v
        val = node.meta.get("val")
        return self.realize(Lazy(v.size, v.dtype, v.load, v.origins), tuple(val.stride()) if _dense(val) else None)

    def _returned_nodes(self) -> list:
        outs = self.gm.graph.output_node().args[0]
        return [o for o in (outs if isinstance(outs, (list, tuple)) else [outs]) if isinstance(o, torch.fx.Node)]

    def returned(self, node) -> bool:
        return node in self._returned_nodes()

    def returned_as(self, value):
        """The output node whose value is `value` (a computed value, not yet stored), or None."""
        return next((o for o in self._returned_nodes() if self.env.get(o) is value), None)

    def realize_output(self, node):
        """The value of output `node`, computed values stored in the layout eager gives them."""
        v = self.env[node]
        if isinstance(v, Lazy):
            val = node.meta.get("val")
            stride = tuple(val.stride()) if _dense(val) else None
            v = self._root_view(v, stride) or self.realize(v, stride)
        return v

    def _root_view(self, v: Lazy, stride: Sequence[int] | None) -> View | None:
        """A view of a computed value, as a window on its root's buffer where it lies
        there with `stride` (None: any) and the root is stored anyway or is all of
        it: one store serves both (a matmul's input, reshaped for the matmul and
        returned for the backward, was written twice)."""
        base = getattr(v, "view_of", None)
        if base is None or (stride is not None and tuple(base[1]) != tuple(stride)):
            return None
        return self.view_of_realized(v)

    # -- reporting -----------------------------------------------------------
    def ir_text(self) -> str:
        return "\n".join(ir.describe_buffer(b) for b in self.buffers)


def share_memory(a, b) -> bool:
    """Whether two traced (fake) tensors share memory in eager: a view of the other, or one tensor."""
    from torch.multiprocessing.reductions import StorageWeakRef

    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return True  # nothing to tell by: leave them as they are
    return StorageWeakRef(a.untyped_storage()) == StorageWeakRef(b.untyped_storage())


def _dense(val) -> bool:
    """A non-overlapping, dense layout (a permuted contiguous one): safe to allocate and to store into."""
    return isinstance(val, torch.Tensor) and val.numel() > 0 and is_dense(val.shape, val.stride())


def replayable(node: torch.fx.Node) -> bool:
    """An FX call that gives the same value each time it runs (not a random op):
    one whose inputs are all such calls can be recomputed, or evaluated ahead."""
    return node.op == "call_function" and torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ())


def _op_name(target) -> str:
    name = getattr(target, "__name__", str(target))
    if hasattr(target, "overloadpacket"):
        name = target.overloadpacket.__name__
    return name.rstrip("_") if name.endswith("_") and not name.startswith("_") else name
