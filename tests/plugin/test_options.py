"""Every --fusion-* option, its ini key, and the precedence marker > option > ini."""
from __future__ import annotations

import pytest
import torch

SETTINGS = """
def test_case(fusion):
    s = fusion.settings
    print("SETTINGS", s.device, s.backend, s.rounds, s.warmup, s.no_perf, s.tolerance_scale, s.nvml_seconds, s.ncu, s.retimes)
"""


def test_defaults_and_every_option_on_the_command_line(pytester):
    pytester.makepyfile(test_it=SETTINGS)
    result = pytester.runpytest_inprocess("-s", "-p", "no:cacheprovider")
    result.stdout.fnmatch_lines(["*SETTINGS auto fusion 20 3 False 1.0 2.0 False 1"])
    result = pytester.runpytest_inprocess(
        "-s", "-p", "no:cacheprovider", "--fusion-device=cpu", "--fusion-backend=inductor", "--fusion-rounds=7",
        "--fusion-warmup=0", "--fusion-no-perf", "--fusion-tolerance-scale=2.5", "--fusion-nvml-seconds=0",
        "--fusion-ncu", "--fusion-retimes=0",
    )
    result.stdout.fnmatch_lines(["*SETTINGS cpu inductor 7 0 True 2.5 0.0 True 0"])


def test_precedence_marker_over_option_over_ini(pytester):
    pytester.makeini("[pytest]\nfusion_rounds = 9\nfusion_warmup = 4\nfusion_tolerance_scale = 3\nfusion_no_perf = true\n"
                     "fusion_ncu = true\n")
    pytester.makepyfile(test_it=SETTINGS + """
import pytest

@pytest.mark.fusion_options(rounds=2, no_perf=False)
def test_marked(fusion):
    s = fusion.settings
    print("MARKED", s.rounds, s.warmup, s.tolerance_scale, s.no_perf)
""")
    result = pytester.runpytest_inprocess("-s", "-p", "no:cacheprovider", "--fusion-warmup=1")
    result.stdout.fnmatch_lines(["*SETTINGS auto fusion 9 1 True 3.0 2.0 True 1", "*MARKED 2 1 3.0 False*"])


def test_rounds_are_the_timing_samples(results, run):
    result = run("def test_case(fusion):\n    fusion.run(lambda x: x * 3, fusion.randn(50))\n", "--fusion-rounds=5")
    (res,) = results(result).values()
    times = res["metrics"]["times_ms"]
    assert set(times) == {"eager", "fusion"} and len(times["eager"]) == len(times["fusion"]) == 5
    assert res["metrics"]["median_ms"]["fusion"] > 0 and res["metrics"]["speedup"]["eager"] > 0


def test_no_perf_keeps_count_gates_and_leaves_timing_unmeasured(results, run):
    result = run("""
import pytest

@pytest.mark.min_speedup(1000)
@pytest.mark.expect_kernels(1)
def test_counts_pass(fusion):
    fusion.run(lambda x: x * 3, fusion.randn(50))

@pytest.mark.min_speedup(1000)
@pytest.mark.expect_kernels(2)
def test_counts_fail(fusion):
    fusion.run(lambda x: x * 3, fusion.randn(50))
""", "--fusion-no-perf")
    result.assert_outcomes(passed=1, failed=1)
    res = results(result)["test_it.py::test_counts_pass"]
    assert res["metrics"]["times_ms"] == {} and res["metrics"]["launches"] == 1
    speed = next(g for g in res["gates"] if g["marker"] == "min_speedup")
    assert speed["passed"] is None and speed["message"] == "not measured: --fusion-no-perf"


def test_a_failed_speed_gate_is_timed_again_before_the_test_fails(results, run):
    """A stall of a shared machine can slow one timing: the test is timed again
    (--fusion-retimes, 1 by default), and every failed attempt is reported."""
    src = """
import pytest

@pytest.mark.min_speedup(1000)
@pytest.mark.expect_kernels(1)
def test_case(fusion):
    fusion.run(lambda x: x * 3, fusion.randn(50))
"""
    result = run(src, "--fusion-rounds=3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*expected at least 1000x over eager, measured *(timed 2 times; first: expected at least 1000x*"])
    metrics = results(result)["test_it.py::test_case"]["metrics"]
    assert len(metrics["retimed_after"]) == 1 and len(metrics["times_ms"]["fusion"]) == 3
    result = run(src, "--fusion-rounds=3", "--fusion-retimes=0")
    result.assert_outcomes(failed=1)
    assert "timed 2 times" not in result.stdout.str()
    assert "retimed_after" not in results(result)["test_it.py::test_case"]["metrics"]
    # a count gate is not timing: it fails at once
    result = run(src.replace("min_speedup(1000)", "min_speedup(0.001)").replace("expect_kernels(1)", "expect_kernels(2)"),
                 "--fusion-rounds=3")
    result.assert_outcomes(failed=1)
    assert "timed 2 times" not in result.stdout.str()


def test_tolerance_scale(run):
    # float32 exp/sin and a long sum: ours and ATen differ by about 2e-7 relative
    src = "def test_case(fusion):\n    fusion.run(lambda x: (x * 1.7).sin().exp().sum(-1), fusion.randn(8, 20001))\n"
    run(src, "--fusion-no-perf").assert_outcomes(passed=1)
    result = run(src, "--fusion-no-perf", "--fusion-tolerance-scale=0.0001")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*compiled output differs from eager (rtol=1e-08, atol=1e-09)*"])


def test_warmup_zero_still_measures(results, run):
    result = run("def test_case(fusion):\n    fusion.run(lambda x: x + 1, fusion.randn(5))\n", "--fusion-warmup=0")
    (res,) = results(result).values()
    assert res["metrics"]["launches"] == 1


def test_device_cpu(run):
    result = run("def test_case(fusion):\n    assert fusion.device.type == 'cpu'\n", "--fusion-device=cpu")
    result.assert_outcomes(passed=1)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip on a machine without CUDA")
def test_device_cuda_skips_without_a_gpu(results, run):
    result = run("""
import pytest

@pytest.mark.expect_kernels(1)
def test_marked():
    pass

def test_fixture(fusion):
    pass
""", "--fusion-device=cuda", "-rs")
    result.assert_outcomes(skipped=2)
    # each at its test, not inside the plugin
    result.stdout.fnmatch_lines([
        "SKIPPED [1] test_it.py:3: fusion device 'cuda' asked for, but this machine has no CUDA device",
        "SKIPPED [1] test_it.py:7: fusion device 'cuda' asked for, but this machine has no CUDA device",
    ])
    res = results(result)
    assert {r["outcome"] for r in res.values()} == {"skipped"} and len(res) == 2


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the gate on a machine without CUDA")
def test_cuda_only_gate_is_not_applicable_on_cpu_and_count_gates_decide(run, results):
    result = run("""
import pytest

@pytest.mark.min_speedup(2, device="cuda")
@pytest.mark.expect_kernels(1)
def test_counts_pass(fusion):
    fusion.run(lambda x: x * 3, fusion.randn(50))

@pytest.mark.min_speedup(2, device="cuda")
@pytest.mark.expect_kernels(7)
def test_counts_fail(fusion):
    fusion.run(lambda x: x * 3, fusion.randn(50))
""", "-rf")
    result.assert_outcomes(passed=1, failed=1)
    res = results(result)
    gate = next(g for g in res["test_it.py::test_counts_pass"]["gates"] if g["marker"] == "min_speedup")
    assert gate["passed"] is None and gate["message"].startswith("n/a: applies on cuda only")
