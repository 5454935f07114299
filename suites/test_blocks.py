"""Matmuls with pointwise and reductions around them: the seed's MixedModel, a
transformer MLP block and an attention block. Matmuls are externs (cuBLAS/ATen);
what sits between them fuses, and each extern's output is written once and read
once by the kernel after it. Byte budgets count the externs' reads and writes too.

Speed on CUDA: the matmuls dominate and run the same library kernel in eager and
in ours, so the floors gate what the fused glue saves (MixedModel, attention) or
that fusion costs nothing (the MLP block).
"""
import pytest
import torch

from suites import models as M
from suites.sizes import F32, budget, pick

ROWS, DIM = pick(cpu=(64, 512), cuda=(16384, 512))


# x -> addmm -> h -> [scale, bias, relu, affine, gelu] -> g -> addmm -> y -> [sigmoid] -> out
@pytest.mark.expect_kernels(2, extern=2, fallback=0)
@pytest.mark.expect_graph_breaks(0)
@pytest.mark.max_memory_traffic(budget(read=(4 * ROWS * DIM + 2 * DIM * DIM + 4 * DIM) * F32, write=4 * ROWS * DIM * F32))
@pytest.mark.min_speedup(1.1, over="eager", device="cuda")  # glue: 14 passes of [rows, dim] in eager, 4 fused (H100: 1.15-1.17x)
def test_mixed_model(fusion):
    model = M.MixedModel(DIM).to(fusion.device).eval()
    with torch.no_grad():  # inference: no activations saved for a backward
        fusion.run(model, fusion.randn(ROWS, DIM))


BATCH, SEQ, WIDTH = pick(cpu=(2, 37, 256), cuda=(8, 2048, 1024))
HIDDEN, TOKENS = 4 * WIDTH, BATCH * SEQ


def mlp_block_traffic():
    x, h = TOKENS * WIDTH, TOKENS * HIDDEN
    weights = 2 * HIDDEN * WIDTH + HIDDEN + 3 * WIDTH  # fc1, fc2, their biases, norm weight and bias
    # layer_norm reads x once (one kernel) and writes n; fc1 reads n, writes h;
    # gelu reads h, writes g; fc2 reads g, writes y; the residual add reads y and x,
    # writes the output
    read = x + x + h + h + x + x
    write = x + h + h + x + x
    return budget(read=(read + weights) * F32, write=write * F32)


# 3 kernels: layer_norm (statistics and normalize in one), bias+gelu, residual add.
@pytest.mark.expect_kernels(3, extern=2, fallback=0)
@pytest.mark.expect_graph_breaks(0)
@pytest.mark.max_memory_traffic(mlp_block_traffic())
@pytest.mark.min_speedup(0.95, over="eager", device="cuda")  # matmul-bound: fusion must cost nothing
def test_mlp_block(fusion):
    block = M.MLPBlock(WIDTH, HIDDEN).to(fusion.device).eval()
    with torch.no_grad():
        fusion.run(block, fusion.randn(BATCH, SEQ, WIDTH))


B, HEADS, LEN, HEAD_DIM = pick(cpu=(2, 4, 33, 16), cuda=(8, 16, 1024, 64))


def attention_traffic():
    qkv = B * HEADS * LEN * HEAD_DIM
    scores = B * HEADS * LEN * LEN
    # bmm reads q, k and writes the scores; softmax (one kernel) reads them and
    # writes the probabilities; bmm reads those and v and writes the output
    read = 3 * qkv + 2 * scores
    write = 2 * scores + qkv
    return budget(read=read * F32, write=write * F32)


# softmax(QK^T/sqrt(d))V: the scale fuses into the softmax, which is one kernel
# even though it reads the scores through the [batch*heads] view of the bmm output.
@pytest.mark.expect_kernels(1, extern=2, fallback=0)
@pytest.mark.expect_graph_breaks(0)
@pytest.mark.max_memory_traffic(attention_traffic())
@pytest.mark.min_speedup(1.0, over="eager", device="cuda")  # eager: div + softmax, 4 passes of the scores vs 3
def test_attention(fusion):
    q, k, v = (fusion.randn(B, HEADS, LEN, HEAD_DIM) for _ in range(3))
    fusion.run(M.attention, q, k, v)
