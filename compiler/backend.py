"""The Dynamo backend `fusion`: AOTAutograd with our decompositions, forward and
backward graphs compiled by `compile_graph`."""
from __future__ import annotations

import functools

import torch
from torch._dynamo.backends.common import aot_autograd

from .compile_fx import compile_graph
from .decompositions import decomposition_table


def _partition(*args, **kwargs):
    from torch._functorch.partitioners import default_partition

    return default_partition(*args, **kwargs)


def fusion_backend(gm: torch.fx.GraphModule, example_inputs, **kwargs):
    return aot_autograd(
        fw_compiler=functools.partial(compile_graph, kind="forward"),
        bw_compiler=functools.partial(compile_graph, kind="backward"),
        inference_compiler=functools.partial(compile_graph, kind="inference"),
        decompositions=decomposition_table(),
        partition_fn=_partition,
        keep_inference_input_mutations=True,
    )(gm, example_inputs)


def register() -> None:
    """Make `torch.compile(backend="fusion")` work without the entry point."""
    from torch._dynamo.backends.registry import _BACKENDS, register_backend

    if "fusion" not in _BACKENDS or _BACKENDS["fusion"] is None:
        register_backend(name="fusion")(fusion_backend)
