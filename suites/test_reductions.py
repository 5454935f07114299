"""Reductions with their prologue and epilogue: the norms in float32 and bfloat16,
and the seed's (ceil + floor).sum(-1).softmax(-1).

Softmax, log_softmax, layer_norm and rms_norm are one kernel each: statistics and
normalization of a row in one pass over memory, so a call moves x in and y out.
On CUDA each must be at least 0.9x TorchInductor (no slower, with room for noise);
over eager, which runs ATen's own fused kernels for most of these, about 1x is
expected, and the committed GPU baseline holds it.
"""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from suites import models as M
from suites.sizes import F32, ITEMSIZE, budget, numel, pick

ROWS, COLS = pick(cpu=(65, 999), cuda=(8192, 4096))
# the usual 32 groups on a GPU (groups of 8 channels); groups of 4 channels on the CPU
GN_SHAPE, GROUPS = pick(cpu=((3, 32, 7, 9), 8), cuda=((32, 256, 56, 56), 32))
GN_N, GN_C = GN_SHAPE[:2]
X = ROWS * COLS


def dtypes(traffic):
    """float32 and bfloat16 cases, each with its byte budget: traffic(itemsize)."""
    return [
        pytest.param(dt, id=str(dt).removeprefix("torch."), marks=pytest.mark.max_memory_traffic(traffic(ITEMSIZE[dt])))
        for dt in (torch.float32, torch.bfloat16)
    ]


NO_SLOWER_THAN_INDUCTOR = pytest.mark.min_speedup(0.9, over="inductor", device="cuda")


@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
@NO_SLOWER_THAN_INDUCTOR
@pytest.mark.parametrize("dtype", dtypes(lambda s: budget(read=X * s, write=X * s)))
def test_softmax(fusion, dtype):
    fusion.run(lambda x: x.softmax(-1), fusion.randn(ROWS, COLS, dtype=dtype))


@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
@NO_SLOWER_THAN_INDUCTOR
@pytest.mark.parametrize("dtype", dtypes(lambda s: budget(read=X * s, write=X * s)))
def test_log_softmax(fusion, dtype):
    fusion.run(lambda x: F.log_softmax(x, -1), fusion.randn(ROWS, COLS, dtype=dtype))


@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
@NO_SLOWER_THAN_INDUCTOR
@pytest.mark.parametrize("dtype", dtypes(lambda s: budget(read=(X + 2 * COLS) * s, write=X * s)))  # + weight, bias
def test_layer_norm(fusion, dtype):
    norm = nn.LayerNorm(COLS).to(fusion.device, dtype).eval()
    with torch.no_grad():  # inference: mean and rstd are not saved for a backward
        fusion.run(norm, fusion.randn(ROWS, COLS, dtype=dtype))


@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
@NO_SLOWER_THAN_INDUCTOR
@pytest.mark.parametrize("dtype", dtypes(lambda s: budget(read=(X + COLS) * s, write=X * s)))  # + weight
def test_rms_norm(fusion, dtype):
    fusion.run(M.rms_norm, fusion.randn(ROWS, COLS, dtype=dtype), fusion.randn(COLS, dtype=dtype))


def group_norm_traffic(s):
    # One kernel: the statistics of a group, then its normalized values, the group
    # read again from cache (on a GPU it stays in registers); the per-channel scale
    # and shift are recomputed where they are used, never written.
    return budget(read=numel(GN_SHAPE) * s + 2 * GN_C * s, write=numel(GN_SHAPE) * s)


# 1 kernel (TorchInductor makes 3: statistics, per-channel scale/shift, normalize)
@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
@NO_SLOWER_THAN_INDUCTOR
@pytest.mark.parametrize("dtype", dtypes(group_norm_traffic))
def test_group_norm(fusion, dtype):
    norm = nn.GroupNorm(GROUPS, GN_C).to(fusion.device, dtype).eval()
    with torch.no_grad():
        fusion.run(norm, fusion.randn(*GN_SHAPE, dtype=dtype))


CF_ROWS, CF_COLS = pick(cpu=(129, 257), cuda=(4096, 4096))


# 2 kernels: the row sums (reading a and b once), then the softmax over the row sums
@pytest.mark.expect_kernels(2)
@pytest.mark.expect_graph_breaks(0)
@pytest.mark.max_memory_traffic(budget(read=2 * CF_ROWS * CF_COLS * F32 + CF_ROWS * F32, write=2 * CF_ROWS * F32))
@NO_SLOWER_THAN_INDUCTOR  # eager: ceil, floor, add, sum: 8 passes vs 2
def test_ceil_floor_sum_softmax(fusion):
    fusion.run(M.ceil_floor_softmax, fusion.randn(CF_ROWS, CF_COLS), fusion.randn(CF_ROWS, CF_COLS))
