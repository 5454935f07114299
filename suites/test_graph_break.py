"""The seeds' toy_example: a data-dependent branch makes Dynamo break the graph.
Both graphs still compile and fuse: graph 1 computes x = a / (|a| + 1) and the
branch condition (2 kernels: they share no input), graph 2 the rest (1 kernel:
b * -1 inlined into x * b).
"""
import pytest

from suites import models as M
from suites.sizes import F32, budget, pick

N = pick(cpu=1001, cuda=10_000_000)


@pytest.mark.expect_kernels(3)
@pytest.mark.expect_graph_breaks(1)
# graph 1 reads a and b, writes x and the condition (1 byte); graph 2 reads x and b, writes the output
@pytest.mark.max_memory_traffic(budget(read=4 * N * F32, write=2 * N * F32 + 1))
@pytest.mark.min_speedup(0.9, over="inductor", device="cuda")  # eager: 7 kernels, 13 passes vs 6
def test_toy_example_graph_break(fusion):
    a = fusion.randn(N)
    b = -(fusion.rand(N) + 0.1)  # negative: the branch is taken, graph 2 holds its body
    fusion.run(M.toy_example, a, b)
