"""The decomposition table: ATen core decompositions plus the composite ops we
want as primitives we can fuse (softmax, norms, gelu), taken from torch._decomp."""
from __future__ import annotations

import functools

import torch
from torch._decomp import core_aten_decompositions, get_decompositions

aten = torch.ops.aten

# Composite ops whose decompositions are pure pointwise + reductions: decomposing
# them is what lets softmax or layer_norm become one kernel.
_EXTRA = [
    aten._softmax,
    aten._log_softmax,
    aten._softmax_backward_data,
    aten._log_softmax_backward_data,
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.native_group_norm,
    aten.native_group_norm_backward,
    aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional,
    aten.native_batch_norm_backward,
    aten._native_batch_norm_legit,
    aten.native_batch_norm,
    aten._batch_norm_with_update,
    aten._batch_norm_with_update_functional,
    aten._batch_norm_no_update,
    aten.var_mean.correction,
    aten.gelu,
    aten.gelu_backward,
    aten.leaky_relu,
    aten.leaky_relu_backward,
    aten.elu,
    aten.elu_backward,
    aten.hardtanh,
    aten.hardtanh_backward,
    aten.embedding,
    aten.embedding_dense_backward,
    aten.index_select,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten.mean.dim,
    aten.mean.default,
    aten.clamp_min,
    aten.clamp_max,
    aten.linalg_vector_norm,
    aten.repeat,
    aten.slice_scatter,
    aten.diagonal,
]

# Ops we lower ourselves (or call as externs) even though core decompositions exist.
_KEEP = {
    # its decomposition (math attention) leaves the flash backward op without the
    # logsumexp it needs: gradients would be wrong. An extern call, forward and backward.
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.addmm.default,
    aten.mm.default,
    aten.bmm.default,
    aten.baddbmm.default,
    aten.convolution.default,
}


@functools.lru_cache(None)
def decomposition_table() -> dict:
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA))
    for op in _KEEP:
        table.pop(op, None)
    return table
