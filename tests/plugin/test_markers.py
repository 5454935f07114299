"""Every marker passing and failing, marker scope (module, class, pytest.param)
and registration."""
from __future__ import annotations

import json

import pytest

# one fused pointwise kernel: x -> ((x + 1) * 2).sin(), 1001 float32 in, 1001 out
SIN = "lambda x: ((x + 1) * 2).sin()"
# two kernels: the column sums cannot join the row sums' kernel
TWO = "lambda x: x.sin().sum(-1) + x.cos().sum(0).sum()"


def one(marker: str, body: str = f"fusion.run({SIN}, fusion.randn(1001))") -> str:
    return f"""
import pytest, torch

@pytest.mark.{marker}
def test_case(fusion):
    {body}
"""


@pytest.mark.parametrize(
    "marker",
    [
        "expect_kernels(1)",
        "expect_kernels(1, extern=0, fallback=0)",
        "expect_launches(1)",
        "max_launches(1)",
        "max_memory_traffic('8008 B')",  # 1001 float32 read + written
        "max_memory_traffic(8008)",
        "max_memory_traffic('8.008 KB')",
        "min_speedup(0.0001)",
        "expect_graph_breaks(0)",
        "max_peak_memory('4004 B')",  # the output, nothing else
    ],
)
def test_marker_passes(results, run, marker):
    result = run(one(marker))
    result.assert_outcomes(passed=1)
    (res,) = results(result).values()
    assert res["outcome"] == "passed" and res["message"] == ""
    assert all(g["passed"] for g in res["gates"]), res["gates"]


@pytest.mark.parametrize(
    "marker, line",
    [
        ("expect_kernels(2)", "expected 2 kernels, generated 1 (-1)"),
        ("expect_kernels(1, extern=1)", "expect_kernels.extern: expected 1 extern call, made 0 (-1)"),
        ("expect_kernels(1, fallback=2)", "expect_kernels.fallback: expected 2 fallbacks, made 0 (-2)"),
        ("expect_launches(3)", "expected 3 launches per call, measured 1 (-2)"),
        ("max_launches(0)", "expected at most 0 launches per call, measured 1 (+1)"),
        ("max_memory_traffic('8 KB')", "expected at most 8 KB of memory traffic per call, moved 8.01 KB (+0.1%)"),
        ("min_speedup(1e6)", "expected at least 1e+06x over eager, measured"),
        ("expect_graph_breaks(1)", "expected 1 graph break, Dynamo made 0 (-1)"),
        ("max_peak_memory(100)", "expected at most 100 B peak memory per call, measured 4 KB (+3904%)"),
    ],
)
def test_marker_fails_with_one_line_reason(results, run, marker, line):
    result = run(one(marker))
    result.assert_outcomes(failed=1)
    # the failure's first line, and the short summary (cut to the terminal's width)
    result.stdout.fnmatch_lines([f"{line}*", "FAILED test_it.py::test_case - Failed: *"])
    (res,) = results(result).values()
    assert res["outcome"] == "failed" and res["message"].startswith(line)
    assert [g["passed"] for g in res["gates"]].count(False) == 1


@pytest.mark.parametrize("marker", ["max_memory_traffic('1 MB')", "expect_graph_breaks(0)", "max_launches(1)"])
def test_gate_fails_when_nothing_compiled_was_called(results, run, marker):
    """No call of a compiled function: 0 bytes and no Dynamo graph at all judge nothing."""
    result = run(one(marker, "x = fusion.randn(10)"))
    result.assert_outcomes(failed=1)
    (res,) = results(result).values()
    assert res["message"].startswith("nothing to"), res["message"]
    assert [g["measured"] for g in res["gates"]] == [None]


def test_failure_section_shows_kernels_ops_and_split_reason(run):
    result = run(one("expect_kernels(1)", f"fusion.run({TWO}, fusion.randn(16, 33))"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "expected 1 kernel, generated 4 (+3)",
        "*Captured fusion call*",
        "gates:",
        "  FAIL expect_kernels: expected 1 kernel, generated 4 (+3)",
        "graph * (inference, cpu): 6 ATen ops -> 4 kernels, 0 externs, 0 fallbacks, compiled in *",
        "  cpp_red_fused_sin_sum_0: reduction, 16x33, fuses sin, sum (*",
        "  cpp_red_fused_cos_sum_1: reduction, *",
        "    not fused with the kernel before: *",
        "launches per call: 4: cpp_red_fused_sin_sum_0, cpp_red_fused_cos_sum_1, *",
        "bytes per call: *",
        "median time per call: eager *, fusion *",
    ])


def test_failure_section_says_how_triton_kernels_launch(run, monkeypatch):
    """A Triton kernel's line in the failure section is followed by its launch
    configuration (here Triton under the interpreter, with its one configuration)."""
    pytest.importorskip("triton")
    from compiler import config

    monkeypatch.setattr(config, "cpu_target", "triton")
    result = run(one("expect_kernels(0)"))
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "  triton_poi_fused_add_mul_sin_0: pointwise, 1001x1, fuses *",
        "    launch: XBLOCK=1024 num_warps=1, 1 program; Triton's interpreter",
    ])


def test_graph_break_failure_names_the_reason(results, run):
    src = """
import pytest, torch

def toy(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
    return x * b

@pytest.mark.expect_graph_breaks(0)
def test_case(fusion):
    fusion.run(toy, fusion.randn(10), fusion.randn(10))
"""
    result = run(src)
    result.assert_outcomes(failed=1)
    (res,) = results(result).values()
    assert res["message"].startswith("expected 0 graph breaks, Dynamo made 1 (+1): "), res["message"]


def test_graph_break_counted_once_per_function_however_many_compiles(results, run):
    """A second shape recompiles the function and meets its breaks again: still the
    function's breaks, once each; two breaks of one function (one reason text) stay two."""
    src = """
import pytest, torch

def one(x):
    y = x.sin()
    torch._dynamo.graph_break()
    return y.cos()

def two(x):
    y = x.sin()
    torch._dynamo.graph_break()
    y = y.cos()
    torch._dynamo.graph_break()
    return y.exp()

@pytest.mark.expect_graph_breaks(1)
def test_one(fusion):
    g = fusion.compile(one)
    g(fusion.randn(10))
    g(fusion.randn(20))
    fusion.run(one, fusion.randn(30))

@pytest.mark.expect_graph_breaks(3)
def test_one_and_two(fusion):
    for n in (10, 20):
        fusion.run(one, fusion.randn(n))
        fusion.run(two, fusion.randn(n))
"""
    result = run(src, "--fusion-no-perf")
    result.assert_outcomes(passed=2)
    assert results(result)["test_it.py::test_one_and_two"]["metrics"]["graph_breaks"] == 3


def test_module_and_class_markers_closest_wins(results, run):
    src = f"""
import pytest

pytestmark = pytest.mark.expect_kernels(5)

def test_module_level(fusion):
    fusion.run({SIN}, fusion.randn(1001))

@pytest.mark.expect_kernels(1)
class TestClass:
    def test_class_level(self, fusion):
        fusion.run({SIN}, fusion.randn(1001))

    @pytest.mark.expect_kernels(4)
    def test_function_level(self, fusion):
        fusion.run({TWO}, fusion.randn(16, 33))
"""
    result = run(src)
    result.assert_outcomes(passed=2, failed=1)
    res = results(result)
    assert res["test_it.py::test_module_level"]["message"] == "expected 5 kernels, generated 1 (-4)"


def test_parametrize_marks(results, run):
    src = f"""
import pytest

@pytest.mark.parametrize("fn, n", [
    pytest.param({SIN}, 1, marks=pytest.mark.expect_kernels(1), id="one"),
    pytest.param({TWO}, 4, marks=pytest.mark.expect_kernels(1), id="four"),
    pytest.param({SIN}, 1, id="unmarked"),
])
def test_case(fusion, fn, n):
    fusion.run(fn, fusion.randn(16, 33))
"""
    result = run(src)
    result.assert_outcomes(passed=2, failed=1)
    res = results(result)
    assert res["test_it.py::test_case[four]"]["message"] == "expected 1 kernel, generated 4 (+3)"
    assert res["test_it.py::test_case[unmarked]"]["gates"] == []


def test_several_failures_in_one_line(run):
    result = run(one("expect_kernels(2)\n@pytest.mark.expect_launches(2)"))
    result.stdout.fnmatch_lines(["expected 2 kernels, generated 1 (-1); expected 2 launches per call, measured 1 (-1)"])


def test_markers_registered_and_strict(pytester):
    result = pytester.runpytest("--markers")
    for name in ("expect_kernels(n, *, extern=None, fallback=None)", "expect_launches(n)", "max_launches(n)",
                 "max_memory_traffic(size)", "min_speedup(x, *, over='eager', device=None)",
                 "expect_graph_breaks(n)", "max_peak_memory(size)", "fusion_options("):
        result.stdout.fnmatch_lines([f"@pytest.mark.{name}*"])
    pytester.makepyfile("import pytest\n@pytest.mark.expect_kernels(0)\ndef test_x():\n    pass\n")
    pytester.runpytest("--strict-markers", "-p", "no:cacheprovider").assert_outcomes(passed=1)


@pytest.mark.slow
def test_stacked_min_speedup(pytester):
    """min_speedup marks with different `over` (or device) stack, a closer one with the
    same key replaces a farther one. A process of its own: the inductor reference
    imports TorchInductor (see test_inductor.py)."""
    pytester.makepyfile(test_it=f"""
import pytest

pytestmark = pytest.mark.min_speedup(1e6, over="eager")  # too strict: applies where no closer eager mark is

@pytest.mark.min_speedup(1e-4, over="eager")
@pytest.mark.min_speedup(1e-4, over="inductor")
def test_both_pass(fusion):
    fusion.run({SIN}, fusion.randn(1001))

@pytest.mark.min_speedup(1e-4, over="eager")
@pytest.mark.min_speedup(1e6, over="inductor")
def test_inductor_fails(fusion):
    fusion.run({SIN}, fusion.randn(1001))

@pytest.mark.min_speedup(1e-4, over="eager")
@pytest.mark.min_speedup(0.9, over="inductor", device="cuda")
def test_cuda_gate_not_applicable(fusion):
    fusion.run({SIN}, fusion.randn(1001))

@pytest.mark.min_speedup(1e-4, over="inductor")
def test_module_eager_mark_stacks(fusion):
    fusion.run({SIN}, fusion.randn(1001))
""")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--fusion-device=cpu", "--fusion-rounds=2",
                                           "--fusion-report-path=out.html", "-rf", timeout=300)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines_random([
        "expected at least 1e+06x over inductor, measured *",  # the one-line reasons
        "expected at least 1e+06x over eager, measured *",
        "  ok   min_speedup over eager: *x over eager, at least 0.0001x *",  # the section
        "  FAIL min_speedup over inductor: expected at least 1e+06x over inductor, *",
        "*test_both_pass * *x eager, *x inductor  passed",  # the summary table
    ])
    tests = {t["nodeid"].split("::")[1]: t for t in json.loads((pytester.path / "out.json").read_text())["tests"]}

    def gates(name):
        return [(g["over"], g["device"], g["expected"], g["passed"]) for g in tests[name]["gates"]]

    assert gates("test_both_pass") == [("eager", None, 1e-4, True), ("inductor", None, 1e-4, True)]
    assert gates("test_inductor_fails") == [("eager", None, 1e-4, True), ("inductor", None, 1e6, False)]
    assert gates("test_cuda_gate_not_applicable") == [("eager", None, 1e-4, True), ("inductor", "cuda", 0.9, None)]
    assert tests["test_cuda_gate_not_applicable"]["gates"][1]["message"].startswith("n/a: applies on cuda only")
    # the inductor reference is compiled only for a gate that applies here
    assert set(tests["test_cuda_gate_not_applicable"]["metrics"]["speedup"]) == {"eager"}
    assert gates("test_module_eager_mark_stacks") == [("eager", None, 1e6, False), ("inductor", None, 1e-4, True)]
    html = (pytester.path / "out.html").read_text()
    assert '<td class="marker">min_speedup over inductor</td>' in html
