"""The `fusion` fixture: inputs, run (checked against eager), compile, records,
and torch.compile routing in marked tests."""
from __future__ import annotations



def test_inputs_records_and_metrics(results, run):
    result = run("""
import torch

def test_case(fusion):
    x = fusion.randn(8, 33)
    assert x.device == fusion.device and x.dtype == torch.float32 and x.abs().sum() > 0
    assert fusion.rand(5, dtype=torch.float64).dtype == torch.float64
    i = fusion.randint(0, 7, (100,))
    assert i.dtype == torch.int64 and 0 <= int(i.min()) and int(i.max()) < 7
    assert fusion.randn_like(fusion.ones(3, dtype=torch.float16)).dtype == torch.float16
    assert fusion.tensor([1.0, 2.0]).device == fusion.device
    out = fusion.run(lambda x: (x.relu() + 1).sum(-1), x)
    assert out.shape == (8,)
    assert [k.name for k in fusion.kernels] == ["cpp_red_fused_add_relu_sum_0"]
    assert fusion.kernels[0].aten_ops == ["relu", "add", "sum"]
    assert len(fusion.graphs) == 1 and fusion.externs == [] and fusion.fallbacks == []
    assert fusion.graph_breaks == 0
    (rec,) = fusion.records
    assert rec.launches == 1 and rec.launch_names == ["cpp_red_fused_add_relu_sum_0"]
    assert len(rec.times_ms["eager"]) == len(rec.times_ms["fusion"]) == 2
    m = fusion.metrics
    assert m["kernels"] == 1 and m["launches"] == 1 and m["bytes_read"] == 8 * 33 * 4
""")
    result.assert_outcomes(passed=1)
    (res,) = results(result).values()
    assert set(res) == {"nodeid", "outcome", "duration_s", "message", "gates", "graphs", "metrics", "baseline"}
    m = res["metrics"]
    for key in ("kernels", "externs", "fallbacks", "graph_breaks", "graph_break_reasons", "launches", "launch_names",
                "bytes_read", "bytes_written", "peak_memory_bytes", "times_ms", "median_ms", "speedup", "compile_s",
                "bandwidth", "nvml"):
        assert key in m, key
    assert m["bytes_written"] == 8 * 4 and m["peak_memory_bytes"] == 8 * 4
    assert m["bandwidth"]["achieved_gbps"] > 0 and m["bandwidth"]["peak_gbps"] > 0
    assert m["compile_s"]["fusion"] > 0 and m["nvml"] is None
    (g,) = res["graphs"]
    assert g["kernels"][0]["aten_ops"] == ["relu", "add", "sum"] and "void cpp_red_fused_add_relu_sum_0" in g["kernels"][0]["source"]


def test_run_compares_with_eager(run):
    result = run("""
import torch

def test_differs(fusion):
    fusion.run(lambda x: x + torch.rand_like(x), fusion.randn(100))

def test_unchecked(fusion):
    fusion.run(lambda x: x + torch.rand_like(x), fusion.randn(100), check=False)
""")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["E * AssertionError: fusion.run: compiled output differs from eager (rtol=0.0001, atol=1e-05), "
                                 "and from the float64 result (ours by up to *, eager's by up to *):",
                                 "E * fusion.run: eager's own calls differ from one another: the function draws random "
                                 "numbers (dropout, rand), which compiled code draws otherwise. Pass check=False, *"])


def test_run_accepts_an_exact_result_where_eager_is_off(run):
    """Where eager's float32 result is the inexact one (here its path rounds
    through bfloat16; Dynamo traces the exact one), the compiled output passes
    if it is within tolerance of the result computed in float64, with a warning
    saying so; a compiled output off both still fails."""
    result = run("""
import torch

def through_bf16(x):
    if torch.compiler.is_compiling() or x.dtype == torch.float64:
        return (x * 3).sin()
    return (x * 3).to(torch.bfloat16).sin().float()

def off_both(x):
    return (x * 3).sin() + (1e-3 if torch.compiler.is_compiling() else 0.0)

def test_eager_off(fusion):
    fusion.run(through_bf16, fusion.randn(1000))

def test_ours_off(fusion):
    fusion.run(off_both, fusion.randn(1000))
""", "--fusion-no-perf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*test_eager_off: eager's output is off the float64 result (rtol=0.0001, atol=1e-05) "
                                 "and the compiled one is not: it passes (ours by up to *e-0[78], eager's by up to 0.0*)"])
    result.stdout.fnmatch_lines(["E * compiled output differs from eager (rtol=0.0001, atol=1e-05), and from the float64 result "
                                 "(ours by up to 0.001*, eager's by up to *e-0[78]):"])


def test_compile_is_recorded_and_measured_after_the_test(results, run):
    result = run("""
import pytest

@pytest.mark.expect_kernels(1)
@pytest.mark.expect_launches(1)
def test_case(fusion):
    f = fusion.compile(lambda x: x.sigmoid() * x)
    x = fusion.randn(64)
    f(x)
    f(x)  # called again: recorded once, measured once
    assert len(fusion.graphs) == 1 and fusion.records == []  # measured after the body
""")
    result.assert_outcomes(passed=1)
    (res,) = results(result).values()
    assert res["metrics"]["launches"] == 1 and len(res["metrics"]["times_ms"]["fusion"]) == 2


def test_torch_compile_is_routed_in_marked_tests(results, run):
    result = run("""
import pytest, torch
from pytest_fusion.fixture import REAL_COMPILE

class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2 + 1

@pytest.mark.expect_kernels(1, extern=1)
@pytest.mark.expect_launches(2)
def test_module():
    m = torch.compile(Block(), mode="max-autotune")  # inductor's mode: dropped for ours
    x = torch.randn(4, 8)
    with torch.no_grad():
        torch.testing.assert_close(m(x), m._orig_mod(x))

@pytest.mark.expect_kernels(1, extern=1)
def test_module_compile_method():
    m = Block()
    m.compile()
    with torch.no_grad():
        m(torch.randn(4, 8))

@pytest.mark.expect_kernels(3)
@pytest.mark.expect_graph_breaks(1)
def test_decorator_with_a_graph_break():
    @torch.compile(backend="eager")  # any backend: ours is used
    def toy(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b
    toy(torch.randn(10), torch.randn(10))

def test_not_routed_without_a_marker():
    assert torch.compile is REAL_COMPILE

@pytest.mark.expect_kernels(0)
def test_routed_only_while_the_test_runs():
    assert torch.compile is not REAL_COMPILE
""")
    result.assert_outcomes(passed=5)
    res = results(result)
    assert res["test_it.py::test_module"]["metrics"]["launch_names"] == ["aten::mm", "cpp_poi_fused_add_addmm_mul_relu_0"]
    assert res["test_it.py::test_decorator_with_a_graph_break"]["metrics"]["graph_break_reasons"]
    assert "test_it.py::test_not_routed_without_a_marker" not in res


def test_fusion_options_alone_routes_torch_compile(results, run):
    """fusion_options is a fusion marker too: the test's torch.compile is ours, measured."""
    result = run("""
import pytest, torch
from pytest_fusion.fixture import REAL_COMPILE

@pytest.mark.fusion_options(no_perf=True)
def test_options_only():
    assert torch.compile is not REAL_COMPILE
    torch.compile(lambda x: (x + 1).sin())(torch.randn(10))
""")
    result.assert_outcomes(passed=1)
    m = results(result)["test_it.py::test_options_only"]["metrics"]
    assert m["kernels"] == 1 and m["launches"] == 1


def test_failing_body_keeps_records_and_section(results, run):
    result = run("""
import pytest

@pytest.mark.expect_kernels(1)
def test_case(fusion):
    fusion.run(lambda x: x.cos() * 3, fusion.randn(20))
    assert False, "the test's own assertion"
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*the test's own assertion*", "*Captured fusion call*", "  cpp_poi_fused_cos_mul_0: *"])
    (res,) = results(result).values()
    assert res["outcome"] == "failed" and res["metrics"]["kernels"] == 1 and res["graphs"]
    assert res["gates"][0]["passed"] is None and "not evaluated" in res["gates"][0]["message"]


def test_measurement_failure_is_a_clear_error(results, run):
    # the measured call must run what the test compiled: this function recompiles
    # on every call (Dynamo guards on the counter), which the measurement refuses
    result = run("""
import pytest

calls = [0]

def bump(x):
    calls[0] += 1
    return x * calls[0]

@pytest.mark.expect_launches(1)
def test_case(fusion):
    f = fusion.compile(bump)
    f(fusion.randn(4))
""")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["pytest-fusion could not measure: bump recompiled when called again*"])
    assert "INTERNALERROR" not in result.stdout.str()
    (res,) = results(result).values()
    assert res["outcome"] == "error"


def test_summary_table_and_junit_properties(run, pytester):
    result = run("""
import pytest

@pytest.mark.expect_kernels(1)
def test_one(fusion):
    fusion.run(lambda x: x * 2, fusion.randn(10))

@pytest.mark.expect_kernels(2)
def test_two(fusion):
    fusion.run(lambda x: x * 2, fusion.randn(10))
""", "--junitxml=junit.xml")
    result.stdout.fnmatch_lines([
        "*= pytest-fusion =*",
        "test * kernels  launches  bytes * speedup  verdict",
        "test_it.py::test_one * 1 * 1 * 80 B *x eager  passed",
        "test_it.py::test_two * 1 * 1 * 80 B *x eager  failed",
    ])
    xml = (pytester.path / "junit.xml").read_text()
    for prop in ('name="fusion_kernels" value="1"', 'name="fusion_launches" value="1"',
                 'name="fusion_bytes" value="80"', 'name="fusion_speedup_eager"', 'name="fusion_verdict" value="failed"'):
        assert prop in xml, prop


def test_result_survives_serialization(run, pytester):
    result = run("""
def test_case(fusion):
    fusion.run(lambda x: x.exp(), fusion.randn(10))
""")
    (report,) = [r for r in result.reprec.getreports("pytest_runtest_logreport") if getattr(r, "fusion_result", None)]
    config = pytester.parseconfigure()
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    back = config.hook.pytest_report_from_serializable(config=config, data=data)
    assert back.fusion_result == report.fusion_result and back.fusion_result["metrics"]["kernels"] == 1


def test_junit_verdict_is_the_final_outcome(run, pytester, monkeypatch):
    """A test that fails its baseline after passing its gates: failed in JUnit too."""
    monkeypatch.delenv("CI", raising=False)
    src = """
import pytest

@pytest.mark.expect_kernels(1)
def test_case(fusion):
    fusion.run(lambda x: x * 2, fusion.randn(10))
"""
    run(src, "--fusion-baseline", "--fusion-no-perf").assert_outcomes(passed=1)  # records it
    path = pytester.path / "reports/baselines/cpu.json"
    path.write_text(path.read_text().replace('"kernels": 1', '"kernels": 0'))
    result = run(src, "--fusion-baseline", "--fusion-no-perf", "--junitxml=junit.xml")
    result.assert_outcomes(failed=1)
    xml = (pytester.path / "junit.xml").read_text()
    assert 'name="fusion_verdict" value="failed"' in xml and 'value="passed"' not in xml


def test_teardown_error_is_an_error_in_the_table_and_junit(run, pytester):
    result = run("""
import pytest

@pytest.fixture
def broken_teardown():
    yield
    raise RuntimeError("teardown broke")

@pytest.mark.expect_kernels(1)
def test_case(fusion, broken_teardown):
    fusion.run(lambda x: x * 2, fusion.randn(10))
""", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, errors=1)
    result.stdout.fnmatch_lines(["test_it.py::test_case * 1 * 1 * 80 B *x eager  error"])
    assert 'name="fusion_verdict" value="error"' in (pytester.path / "junit.xml").read_text()


def test_works_without_the_report_layer(results, run):
    result = run("""
import pytest

@pytest.mark.expect_kernels(1)
def test_case(fusion):
    fusion.run(lambda x: x * 2, fusion.randn(10))
""", "-p", "no:pytest_fusion.report.hooks")
    result.assert_outcomes(passed=1)
    assert results(result)["test_it.py::test_case"]["metrics"]["launches"] == 1


def test_bytes_are_per_call_as_launches_are(results, run):
    """A function run twice compiles one graph (Dynamo's cache) and is measured
    twice: bytes, like launches and times, are those of both calls; a call on
    another shape counts its own graph."""
    result = run("""
def f(x):
    return (x.relu() + 1).sum(-1)

def test_twice(fusion):
    x = fusion.randn(8, 33)
    fusion.run(f, x)
    one = fusion.metrics
    fusion.run(f, x)
    m = fusion.metrics
    assert len(fusion.graphs) == 1 and one["launches"] == 1 and m["launches"] == 2
    assert one["bytes_read"] == 8 * 33 * 4 and m["bytes_read"] == 2 * 8 * 33 * 4
    assert m["bytes_written"] == 2 * one["bytes_written"]

def test_two_shapes(fusion):
    fusion.run(f, fusion.randn(8, 33))
    fusion.run(f, fusion.randn(4, 33))
    assert len(fusion.graphs) == 2 and fusion.metrics["bytes_read"] == 12 * 33 * 4
""")
    result.assert_outcomes(passed=2)
    m = results(result)["test_it.py::test_twice"]["metrics"]
    assert m["launches"] == 2 and m["bytes_read"] == 2 * 8 * 33 * 4


def test_a_backward_compiled_outside_the_recorded_calls_is_warned_of(results, run):
    """loss.backward() after a compiled forward's call compiles the backward
    outside the calls the fixture records: the gates judge the forward alone, and
    a warning says so. The backward inside fusion.run is counted, and not warned of."""
    result = run("""
import torch

def step(x, w):
    return ((x * w).sin() * 2).sum()

def test_outside(fusion):
    x, w = fusion.randn(64), fusion.randn(64, requires_grad=True)
    f = fusion.compile(step)
    f(x, w).backward()
    assert [g.kind for g in fusion.graphs] == ["forward"]

def test_inside(fusion):
    x, w = fusion.randn(64), fusion.randn(64, requires_grad=True)

    def train(x, w):
        step(x, w).backward()
        return w.grad

    fusion.run(train, x, w, check=False)
    assert sorted(g.kind for g in fusion.graphs) == ["backward", "forward"]
""", "-W", "always::pytest.PytestWarning")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert out.count("compiled outside the calls the fusion fixture records") == 1, out
    assert "test_it.py::test_outside" in out and "1 graph (backward; 1 kernel)" in out, out
