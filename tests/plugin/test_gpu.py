"""What only a GPU measures: device kernel launches (and CUDA graph launches apart),
peak memory from the caching allocator, CUDA-event timings, NVML readings, DRAM
bytes from Nsight Compute. Skipped, with the reason, on a machine without CUDA."""
from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_cuda_launches_memory_timing_and_nvml(results, run):
    result = run("""
import pytest, torch

@pytest.mark.expect_kernels(1)
@pytest.mark.expect_launches(1)
@pytest.mark.max_memory_traffic("80 MB")
@pytest.mark.max_peak_memory("41 MB")
@pytest.mark.min_speedup(1.2, device="cuda")
def test_sin_chain(fusion):
    assert fusion.device.type == "cuda"
    fusion.run(lambda x: ((((x + 1) * 2).sin() * 3).cos() + 1).relu(), fusion.randn(10_000_000))

@pytest.mark.expect_kernels(1, extern=1)
@pytest.mark.max_launches(3)  # cuBLAS may split K: a GEMM and a reduction kernel
def test_matmul_extern(fusion):
    a, b = fusion.randn(256, 256), fusion.randn(256, 256)
    fusion.run(lambda a, b: (a @ b).relu() * 2, a, b)
""", "--fusion-device=cuda", "--fusion-rounds=5", "--fusion-nvml-seconds=0.5")
    result.assert_outcomes(passed=2)
    res = results(result)
    m = res["test_it.py::test_sin_chain"]["metrics"]
    print(m["launch_names"], m["peak_memory_bytes"], m["median_ms"], m["speedup"], m["nvml"], m["bandwidth"])
    assert m["launch_names"][0].startswith("triton_")
    assert 40_000_000 <= m["peak_memory_bytes"] <= 40_000_512  # the output only (allocations round to 512 B)
    nv = m["nvml"]
    assert nv["clock_sm_mhz"] > 0 and nv["power_w"] > 0 and nv["energy_j_per_call"] > 0
    assert isinstance(nv["throttle_reasons"], list)
    mm = res["test_it.py::test_matmul_extern"]["metrics"]
    print(mm["launch_names"])
    assert mm["launch_names"][-1] == "triton_poi_fused_mul_relu_0" and "gemm" in mm["launch_names"][0]


def test_cuda_graph_launches_counted_apart():
    from pytest_fusion.measure.profile import profile_call

    device = torch.device("cuda")
    x = torch.randn(1024, device=device)
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        (x * 2).sin()  # warm up off the default stream, as CUDA graph capture asks
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        y = (x * 2).sin()
    prof = profile_call(graph.replay, device)
    assert prof.graph_launches == 1 and prof.launches == 0
    prof = profile_call(lambda: (x * 2).sin(), device)
    assert prof.launches == 2 and prof.graph_launches == 0
    del y


def test_inductor_backend_on_gpu(pytester, monkeypatch):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.expect_kernels(1)
@pytest.mark.expect_launches(1)
@pytest.mark.max_memory_traffic("8 MB")
def test_case(fusion):
    fusion.run(lambda x: ((x + 1) * 2).sin(), fusion.randn(1_000_000))
""")
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")  # Inductor counts bytes only when it compiles
    result = pytester.runpytest_subprocess("--fusion-backend=inductor", "--fusion-rounds=3", "-p", "no:cacheprovider",
                                           "--fusion-nvml-seconds=0", timeout=300)
    result.assert_outcomes(passed=1)


def test_timing_under_xdist_with_fewer_gpus_than_workers(pytester):
    pytest.importorskip("xdist")
    if torch.cuda.device_count() >= 2:
        pytest.skip("needs fewer GPUs than the 2 xdist workers")
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.min_speedup(0.01)
@pytest.mark.expect_kernels(1)
def test_case(fusion):
    fusion.run(lambda x: x.sin(), fusion.randn(1000))
""")
    result = pytester.runpytest_subprocess("-n", "2", "-rs", "-p", "no:cacheprovider", timeout=300)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*timing under xdist needs one GPU per worker: 2 workers, 1 GPU*"])


def test_missing_nvml_is_a_test_error(pytester, monkeypatch):
    # a module named pynvml that fails to import stands for an absent nvidia-ml-py
    pytester.makepyfile(pynvml="raise ImportError('nvidia-ml-py is not installed')")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path), prepend=":")
    pytester.makepyfile(test_it="def test_case(fusion):\n    fusion.run(lambda x: x * 2, fusion.randn(100))\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fusion-device=cuda", timeout=300)
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*pytest-fusion: NVML readings need nvidia-ml-py on a GPU run: pip install nvidia-ml-py*"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_ncu_dram_bytes_of_a_call(results, run):
    from pytest_fusion.measure import MeasureError, ncu

    try:
        ncu.find()
    except MeasureError as e:
        pytest.skip(str(e))
    # 2**25 float32 in and out (134 MB each): more than the L2 (50 MB on an H100) holds,
    # so most writes reach DRAM within the profiled call
    result = run("""
import pytest

@pytest.mark.expect_kernels(1)
@pytest.mark.max_memory_traffic("280 MB")
def test_pointwise(fusion):
    fusion.run(lambda x: ((x + 1) * 2).sin(), fusion.randn(2**25))
""", "--fusion-device=cuda", "--fusion-no-perf", "--fusion-ncu")
    result.assert_outcomes(passed=1)
    (res,) = results(result).values()
    m = res["metrics"]
    dram, counted = m["dram_bytes"], m["bytes_total"]
    print("ncu:", dram, "compiler:", counted)
    assert counted == 2 * 4 * 2**25 and dram["kernels"] == 1
    assert 0.5 * counted <= dram["read"] + dram["write"] <= 2 * counted
    gate = next(g for g in res["gates"] if g["marker"] == "max_memory_traffic.dram")
    assert gate["passed"] is True and gate["measured"] == dram["read"] + dram["write"]
    result.stdout.fnmatch_lines(["*test_pointwise * 268 MB (ncu *)*passed"])


def test_ncu_missing_is_a_test_error(run, monkeypatch):
    monkeypatch.setenv("FUSION_NCU", "/nonexistent/ncu")
    result = run("def test_case(fusion):\n    fusion.run(lambda x: x * 2, fusion.randn(100))\n",
                 "--fusion-device=cuda", "--fusion-no-perf", "--fusion-ncu")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*pytest-fusion: --fusion-ncu: FUSION_NCU=/nonexistent/ncu is not an executable file*"])
    assert "INTERNALERROR" not in result.stdout.str()
