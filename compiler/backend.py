"""The Dynamo backend `fusion`: AOTAutograd with our decompositions, forward and
backward graphs compiled by `compile_graph`."""
from __future__ import annotations

import contextlib
import copy
import functools
import warnings

import torch
from torch._dynamo.backends.common import aot_autograd
from torch._subclasses.fake_tensor import DataDependentOutputException, DynamicOutputShapeException

from .aten_refusals import refused_by_aten
from .compile_fx import compile_graph, has_symbolic_sizes, run_uncompiled
from .config import config
from .decompositions import decomposition_table
from .dynamo_splits import rejoin_split_calls
from .graph import replayable

aten = torch.ops.aten


# their gradient goes where the input equals the result: that input is compared
# bit for bit with the saved result, so it must be saved, not recomputed (where
# the joint graph compares it)
_COMPARED_WITH_RESULT = (aten.amax.default, aten.amin.default, aten.max.default, aten.min.default)


def _partition(joint: torch.fx.GraphModule, *args, **kwargs):
    """AOTAutograd's min-cut partition: the backward recomputes what is cheap to
    recompute from fewer saved tensors (a softmax from its input and the row max
    and sum, not the whole softmax), since our kernels fuse that recomputation
    into the loads they make anyway. The values a max or min reduces are saved:
    recomputed, they may round otherwise (another reduction order, a vectorized
    libm) and match no element of the result."""
    from torch._functorch.partitioners import min_cut_rematerialization_partition
    from torch.utils.checkpoint import CheckpointPolicy

    for target in _COMPARED_WITH_RESULT:
        for node in joint.graph.find_nodes(op="call_function", target=target):
            if node.args[0].op == "call_function" and _compared(node.args[0]):
                node.args[0].meta["recompute"] = CheckpointPolicy.MUST_SAVE
    for node in _constant_indices(joint):
        node.meta["recompute"] = CheckpointPolicy.MUST_RECOMPUTE
    return min_cut_rematerialization_partition(joint, *args, **kwargs)


def _constant_indices(joint: torch.fx.GraphModule) -> list:
    """Integer and bool tensors computed from no input and no random op (the indices
    nearest upsampling reads at, a causal mask): recomputed in the backward rather
    than saved, where lowerings can read their values (lowerings/indexing.py)."""
    constant: set = set()
    for node in joint.graph.nodes:
        if replayable(node) and all(a in constant for a in node.all_input_nodes):
            constant.add(node)
    return [n for n in constant if isinstance(v := n.meta.get("val"), torch.Tensor)
            and not v.dtype.is_floating_point and not v.dtype.is_complex]


def _compared(node: torch.fx.Node) -> bool:
    """Whether the joint graph compares `node` (or an alias of it) with `eq`: a
    max's gradient does; log_softmax's max, taken only to shift the exponent, is
    not (saved, its fp32 input cost cross entropy a saved [rows, classes] tensor)."""
    return any(u.target is aten.eq.Tensor or u.target is aten.alias.default and _compared(u) for u in node.users)


def fusion_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    if has_symbolic_sizes(example_inputs):
        return _per_shape(gm)
    return _compiled(gm, example_inputs)


def _compiled(gm: torch.fx.GraphModule, args):
    """The graph through AOTAutograd and our compiler; as it is where ATen would
    raise (aten_refusals) or where a shape or a size depends on the data
    (narrow at a tensor's value, a boolean mask's index_put backward and its
    nonzero), which fake tensors cannot trace, for us or TorchInductor: Dynamo
    then ran it eagerly, with a traceback in the log and no record to say why."""
    refused = refused_by_aten(gm)
    if refused:
        return _uncompiled(gm, args, f"runs uncompiled, where ATen raises: {refused}")
    early = _early_backward(args)
    try:
        with torch._functorch.config.patch(force_non_lazy_backward_lowering=True) if early else contextlib.nullcontext():
            return _aot(early)(rejoin_split_calls(gm), args)
    except (DataDependentOutputException, DynamicOutputShapeException) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return _uncompiled(gm, args, f"runs uncompiled: a shape or a size in it depends on the data ({type(e).__name__}: {first})")


def _early_backward(args) -> bool:
    """Whether AOTAutograd compiles a training graph's backward with its forward
    (config.early_backward): where kernels compile in the background, on CUDA,
    the backward's then compile while the forward's do and while it runs."""
    return (config.early_backward and hasattr(torch._functorch.config, "force_non_lazy_backward_lowering")
            and any(isinstance(a, torch.Tensor) and a.device.type == "cuda" for a in args))


def _aot(early_backward: bool = False):
    return aot_autograd(
        fw_compiler=functools.partial(compile_graph, kind="forward"),
        bw_compiler=functools.partial(compile_graph, kind="backward", early=early_backward),
        inference_compiler=functools.partial(compile_graph, kind="inference"),
        decompositions=decomposition_table(),
        partition_fn=_partition,
        keep_inference_input_mutations=True,
    )


def _per_shape(gm: torch.fx.GraphModule):
    """Dynamo traced with symbolic sizes (a second shape came by). Our kernels
    are built for fixed sizes: each set of sizes, strides and dtypes a call
    brings compiles once, from this graph, as Dynamo would with dynamic=False
    (minus its recompiles of the Python around the graph). A Python float that
    Dynamo passed as a tensor to read with .item() is a constant too, as Dynamo
    makes it without dynamic=True. Past `config.max_shapes` such keys, new ones
    run the graph uncompiled."""
    compiled: dict = {}
    uncompiled: dict = {}
    scalars = _read_with_item(gm)

    def call(*args):
        key = (torch.is_grad_enabled(),) + tuple(
            (tuple(x.shape), tuple(x.stride()), x.dtype, x.device, x.requires_grad) if isinstance(x, torch.Tensor) else x
            for x in args) + tuple(args[i].item() for i in scalars)
        fn = compiled.get(key) or uncompiled.get(key)
        if fn is None:
            if len(compiled) < config.max_shapes:
                fn = compiled[key] = _compiled(_with_values(gm, {i: args[i].item() for i in scalars}), list(args))
            else:
                fn = uncompiled[key] = _uncompiled(gm, args, (
                    f"compiled for {len(compiled)} shapes already (FUSION_MAX_SHAPES): further shapes run "
                    "uncompiled; pad the inputs to fewer shapes or raise the limit"))
        return fn(*args)

    return call


def _read_with_item(gm: torch.fx.GraphModule) -> list[int]:
    """Positions of the inputs the graph reads with .item() (a Python float under
    dynamic=True): fake tensors cannot give AOTAutograd their values."""
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return [i for i, n in enumerate(inputs) if any(_is_item(u) for u in n.users)]


def _is_item(node: torch.fx.Node) -> bool:
    return node.op == "call_method" and node.target == "item"


def _with_values(gm: torch.fx.GraphModule, values: dict[int, float]) -> torch.fx.GraphModule:
    """A copy of gm where each .item() of the inputs at `values` is that value."""
    if not values:
        return gm
    gm = copy.deepcopy(gm)
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, value in values.items():
        for item in [u for u in inputs[i].users if _is_item(u)]:
            for user in list(item.users):
                user.args = torch.fx.node.map_arg(user.args, lambda n: value if n is item else n)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda n: value if n is item else n)
            gm.graph.erase_node(item)
    gm.recompile()
    return gm


def _uncompiled(gm, args, note: str):
    warnings.warn(f"pytest-fusion: a graph {note}", stacklevel=3)
    boxed = run_uncompiled(gm, list(args), "forward" if torch.is_grad_enabled() else "inference", note)
    return lambda *a: boxed(list(a))


def register() -> None:
    """Make `torch.compile(backend="fusion")` work without the entry point (again
    when it already does: Dynamo refuses a second registration of a name)."""
    from torch._dynamo.backends.registry import _BACKENDS, _COMPILER_FNS, register_backend

    if "fusion" not in _COMPILER_FNS and _BACKENDS.get("fusion") is None:
        register_backend(name="fusion")(fusion_backend)
