"""--fusion-backend=inductor: the same markers against TorchInductor, with its own
kernel count and its kernels' profiler ranges. A process of its own (Inductor's
import-time registrations); one small function (Inductor compiles slowly on CPU)."""
from __future__ import annotations

import json

import pytest


@pytest.mark.slow
def test_same_gates_against_inductor(pytester, monkeypatch):
    pytester.makeconftest("""
import json

def pytest_runtest_logreport(report):
    if getattr(report, "fusion_result", None):
        with open("results.jsonl", "a") as f:
            f.write(json.dumps(report.fusion_result) + "\\n")
""")
    pytester.makepyfile(test_it="""
import pytest

def fn(x):
    return ((x + 1) * 2).sin()

@pytest.mark.expect_kernels(1)
@pytest.mark.expect_launches(1)
@pytest.mark.min_speedup(0.0001)
def test_pass(fusion):
    fusion.run(fn, fusion.randn(257))

@pytest.mark.expect_kernels(5)
def test_fail(fusion):
    fusion.run(fn, fusion.randn(257))

@pytest.mark.max_memory_traffic(1000)
def test_bytes(fusion):
    fusion.run(fn, fusion.randn(257))
""")
    # Inductor counts bytes only when it compiles a graph, not for one from its cache
    monkeypatch.setenv("TORCHINDUCTOR_FX_GRAPH_CACHE", "0")
    result = pytester.runpytest_subprocess("--fusion-backend=inductor", "--fusion-rounds=2", "-p", "no:cacheprovider",
                                           "--fusion-device=cpu", "-rs", timeout=300)
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines_random([
        "expected 5 kernels, generated 1 (-4)",
        "expected at most 1 KB of memory traffic per call, moved 2.06 KB (+106%)",
    ])
    res = {r["nodeid"]: r for r in map(json.loads, (pytester.path / "results.jsonl").read_text().splitlines())}
    m = res["test_it.py::test_pass"]["metrics"]
    assert m["kernels"] == 1 and m["externs"] is None and res["test_it.py::test_pass"]["graphs"] == []
    assert m["launches"] == 1 and "cpp_fused_add_mul_sin" in m["launch_names"][0]
    assert set(m["times_ms"]) == {"eager", "inductor"} and set(m["speedup"]) == {"eager"}
    assert m["compile_s"]["inductor"] > 0
