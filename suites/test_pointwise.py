"""Pointwise chains: everything fuses into one kernel that reads each input once
and writes the output once, so a call moves only its inputs and its output.

Speed on CUDA: at least 0.9x TorchInductor (no slower, with room for noise), which
also fuses these into one kernel. Over eager, which runs one kernel per op, each
reading and writing whole tensors, the byte ratio bounds the speedup (noted per
test); the committed GPU baseline holds the measured one within 10%.
"""
import pytest
import torch

from suites import models as M
from suites.sizes import F32, budget, pick

N = pick(cpu=100_003, cuda=10_000_000)
ROWS, DIM = pick(cpu=(37, 1024), cuda=(16384, 1024))


@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
@pytest.mark.max_memory_traffic(budget(read=N * F32, write=N * F32))
@pytest.mark.min_speedup(0.9, over="inductor", device="cuda")  # eager: 3 kernels, 6 tensor passes vs 2
def test_sin_chain(fusion):
    fusion.run(M.sin_chain, fusion.randn(N))


@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
@pytest.mark.max_memory_traffic(budget(read=N * F32, write=N * F32))
@pytest.mark.min_speedup(0.9, over="inductor", device="cuda")  # eager: 9 kernels, 22 passes vs 2
def test_tanh_gelu_written_out(fusion):
    fusion.run(M.gelu_tanh, fusion.randn(N))


@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
@pytest.mark.max_memory_traffic(budget(read=N * F32, write=N * F32))
@pytest.mark.min_speedup(0.9, over="inductor", device="cuda")  # eager: 5 kernels, 12 passes vs 2
def test_relu_plus_sigmoid_times_tanh(fusion):
    fusion.run(M.relu_sigmoid_tanh, fusion.randn(N))


@pytest.mark.expect_kernels(1)
@pytest.mark.expect_graph_breaks(0)
# x in, y out, and the four [DIM] parameter vectors
@pytest.mark.max_memory_traffic(budget(read=(ROWS * DIM + 4 * DIM) * F32, write=ROWS * DIM * F32))
@pytest.mark.min_speedup(0.9, over="inductor", device="cuda")  # eager: 9 kernels, 18 passes vs 2
def test_pointwise_model(fusion):
    model = M.PointwiseModel(DIM).to(fusion.device).eval()
    with torch.no_grad():  # inference: no activations saved for a backward
        fusion.run(model, fusion.randn(ROWS, DIM))
