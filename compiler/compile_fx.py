"""One ATen graph in, one callable out: lower, schedule, generate, build, record."""
from __future__ import annotations

import time
from pathlib import Path

import torch
import torch.fx
from torch.fx._lazy_graph_module import _LazyGraphModule

from . import ir
from .codegen import common
from .codegen.wrapper import WrapperCode
from .config import config
from .graph import GraphLowering, View
from .scheduler import ExternStep, FusedKernel, schedule
from .stats import CallRecord, GraphRecord, KernelRecord, next_graph_id, observed


def graph_device(gm: torch.fx.GraphModule, example_inputs) -> torch.device:
    """Where the graph's kernels run: a GPU its inputs are on, else (a graph of
    factories alone, torch.ones(3, device="cuda")) a GPU its values are made on."""
    devices = [x.device for x in example_inputs if isinstance(x, torch.Tensor)]
    if not devices:
        vals = [n.meta.get("val") for n in gm.graph.nodes]
        devices = [t.device for v in vals for t in (v if isinstance(v, (list, tuple)) else [v]) if isinstance(t, torch.Tensor)]
    for d in devices:
        if d.type != "cpu":
            return d
    return devices[0] if devices else torch.device("cpu")


def has_symbolic_sizes(example_inputs) -> bool:
    """Whether an input's size is a symbol (a SymInt of a known value, as the
    saved generator state of a checkpointed dropout has, is a size like any)."""
    from torch.fx.experimental.symbolic_shapes import is_concrete_int

    for x in example_inputs:
        if isinstance(x, torch.SymInt) and not is_concrete_int(x):
            return True
        if isinstance(x, torch.Tensor) and not all(is_concrete_int(s) for s in (*x.shape, *x.stride())):
            return True
    return False


def compile_graph(gm: torch.fx.GraphModule, example_inputs, kind: str = "inference", early: bool = False):
    """`early`: compiled before it is needed (config.early_backward), it counts
    as a compiled graph once it first runs (stats.observed)."""
    if has_symbolic_sizes(example_inputs):  # the fusion backend compiles each shape (backend._per_shape)
        return run_uncompiled(gm, example_inputs, kind, "symbolic sizes: kernels are built for fixed sizes", early)
    opaque = _opaque_higher_order_op(gm)
    if opaque is not None:
        return run_uncompiled(gm, example_inputs, kind, f"{opaque}: a higher-order op with no traced value to lower it by", early)
    start, device, gid, aten_graph, n_aten = _describe(gm, example_inputs)

    graph = GraphLowering(gm, example_inputs, device).run()
    _report_output_strides(graph)
    sched = schedule(graph)
    target = config.target_for(device)
    backend = _backend(target)
    buffers = {b.name: b for b in graph.buffers}

    kernels: list[KernelRecord] = []
    launchers: dict[str, object] = {}
    hits = 0
    index = 0
    for step in sched.steps:
        if not isinstance(step, FusedKernel):
            continue
        step.name = common.kernel_name(target, step, index)
        index += 1
        source = backend.render(step, step.name, buffers)
        launcher, path, hit = backend.build(step.name, source, step)
        hits += hit
        launchers[step.name] = launcher
        read, written = common.bytes_moved(step, buffers)
        kernels.append(
            KernelRecord(
                name=step.name,
                kind=common.kernel_kind(step),
                target=target,
                aten_nodes=step.origins(),
                aten_ops=step.origin_ops(),
                bytes_read=read,
                bytes_written=written,
                numel=step.xnumel,
                rnumel=step.rnumel,
                source=source,
                source_path=str(path) if path else None,
                split_reason=step.split_reason,
            )
        )

    if hasattr(backend, "wait"):  # C++ kernels build concurrently: finish here (Triton's: see _record_launch)
        backend.wait(launchers.values())
    wrapper = WrapperCode(graph, sched, backend.launch_code, in_place=backend.ALIASED_POINTERS_OK)
    wrapper_src = wrapper.generate()
    ns = dict(wrapper.ns)
    ns.update(launchers)
    exec(compile(wrapper_src, f"<fusion wrapper graph {gid}>", "exec"), ns)
    call = ns["call"]
    externs, fallbacks = _calls(sched, buffers)
    record = GraphRecord(
        graph_id=gid,
        kind=kind,
        device=str(device),
        aten_graph=aten_graph,
        ir=graph.ir_text(),
        kernels=kernels,
        externs=externs,
        fallbacks=fallbacks,
        aten_nodes=n_aten,
        compile_time_s=time.perf_counter() - start,
        wrapper_source=wrapper_src,
        cache_hits=hits,
    )
    for k in kernels:
        _record_launch(record, k, launchers[k.name])
    _debug_dump(record)
    if config.cuda_graphs and device.type == "cuda" and not graph.crosses_devices:  # host copies cannot be captured
        from .runtime import cuda_graphs

        call = cuda_graphs.wrap(call)
    return observed(call, record, early)


def _report_output_strides(graph: GraphLowering) -> None:
    """Tell AOTAutograd the strides of the forward's outputs, as Inductor does: it
    compiles the backward for the activations saved among them, and one eager
    left expanded (stride 0) we may return dense."""
    context = torch._guards.TracingContext.try_get()
    if context is not None and context.output_strides is not None and not context.output_strides:
        context.output_strides.extend(tuple(v.stride) if isinstance(v, View) else None for v in graph.outputs)


def _record_launch(record: GraphRecord, kernel: KernelRecord, launcher) -> None:
    """How the kernel launches, into its record. A Triton kernel may still be
    compiling in a worker process: the graph's first call waits for it, so that
    Dynamo builds its guards (about 30 ms, a cache flush among them) meanwhile,
    and the seconds that call waits count as the graph's compile time."""
    kernel.launch = getattr(launcher, "info", None)
    if getattr(launcher, "ready", True):
        return

    def ready(info: dict, waited_s: float) -> None:
        kernel.launch = info
        record.compile_time_s += waited_s

    launcher.when_ready(ready)


def _calls(sched, buffers):
    """Records of the extern and fallback calls, with the bytes their tensor
    arguments and results span (a stride-0 dimension is read once)."""
    results: dict[str, int] = {}
    for b in buffers.values():
        if isinstance(b, ir.MultiOutput):
            results[b.parent.name] = results.get(b.parent.name, 0) + b.nbytes
    externs, fallbacks = [], []
    for step in sched.steps:
        if isinstance(step, ExternStep) and isinstance(step.buffer, ir.ExternCall):
            b = step.buffer
            read = sum(_span(r, buffers) for r in _tensor_refs((b.args, tuple(b.kwargs.values()))))
            rec = CallRecord(
                name=b.name, op=str(b.target), kind=b.kind, aten_node=b.origins[0] if b.origins else "",
                reason=b.reason, bytes_read=read, bytes_written=results.get(b.name, b.nbytes if b.returns_tensor else 0),
            )
            (externs if b.kind == "extern" else fallbacks).append(rec)
    return externs, fallbacks


def _tensor_refs(args):
    for a in args:
        if isinstance(a, ir.TensorRef):
            yield a
        elif isinstance(a, (list, tuple)):
            yield from _tensor_refs(a)


def _span(ref: ir.TensorRef, buffers) -> int:
    n = 1
    for size, stride in zip(ref.size, ref.stride):
        if stride != 0:
            n *= size
    return n * buffers[ref.buffer].dtype.itemsize


def _describe(gm: torch.fx.GraphModule, example_inputs):
    """(start time, device, graph id, printed ATen graph, ATen node count) of a graph."""
    aten_graph = gm.print_readable(print_output=False) if hasattr(gm, "print_readable") else str(gm.graph)
    n_aten = sum(1 for n in gm.graph.nodes if n.op == "call_function")
    return time.perf_counter(), graph_device(gm, example_inputs), next_graph_id(), aten_graph, n_aten


def _opaque_higher_order_op(gm: torch.fx.GraphModule) -> str | None:
    """The name of a higher-order op that AOTAutograd left without a traced value
    we can tell (lowerings.extern.hop_value), or None: graphsafe_run_with_rng_state
    (dropout in a checkpointed region on a GPU, its generator a graph input)."""
    from .lowerings.extern import hop_value

    for node in gm.graph.nodes:
        if isinstance(node.target, torch._ops.HigherOrderOperator) and node.meta.get("val") is None \
                and node.users and hop_value(node) is None:
            return node.target.name()
    return None


def run_uncompiled(gm: torch.fx.GraphModule, example_inputs, kind: str, note: str, early: bool = False):
    """Run the graph as it is (correct, unfused), and say why in the record."""
    start, device, gid, aten_graph, n_aten = _describe(gm, example_inputs)
    record = GraphRecord(
        graph_id=gid, kind=kind, device=str(device), aten_graph=aten_graph, ir="", kernels=[],
        externs=[], fallbacks=[CallRecord(name="graph", op="<whole graph>", kind="fallback", aten_node="", reason=note)],
        aten_nodes=n_aten, compile_time_s=time.perf_counter() - start, wrapper_source="", note=note,
    )
    # its generated forward, called as Dynamo's eager backend calls it: through
    # GraphModule.__call__ (and a lazy module's first forward) an error eager raises
    # also printed the graph's code to stderr and lost its traceback
    _LazyGraphModule.force_recompile(gm)

    def call(args):
        a = list(args)
        args.clear()
        out = gm.forward(*a)
        return out if isinstance(out, (tuple, list)) else (out,)

    return observed(call, record, early)


def _backend(target: str):
    if target == "cpp":
        from .codegen import cpp_backend

        return cpp_backend
    if target == "triton":
        from .codegen import triton_backend

        return triton_backend
    raise ValueError(f"unknown codegen target {target!r} (FUSION_TARGET is 'cpp' or 'triton')")


def _debug_dump(record: GraphRecord):
    if not config.debug_dir:
        return
    d = Path(config.debug_dir) / f"graph_{record.graph_id}_{record.kind}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "aten_graph.py").write_text(record.aten_graph)
    (d / "ir.txt").write_text(record.ir)
    (d / "wrapper.py").write_text(record.wrapper_source)
    for k in record.kernels:
        (d / (k.name + (".cpp" if k.target == "cpp" else ".py"))).write_text(k.source)
