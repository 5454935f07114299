"""Bad marker arguments and bad options are usage errors (exit 4) that name the
test and the marker, never an INTERNALERROR."""
from __future__ import annotations

import pytest

BAD_MARKERS = [
    ("expect_kernels('1')", "n must be an int, not str '1'"),
    ("expect_kernels(1.0)", "n must be an int, not float 1.0"),
    ("expect_kernels(True)", "n must be an int, not bool True"),
    ("expect_kernels(-1)", "n cannot be negative: -1"),
    ("expect_kernels()", "missing a required argument: 'n'"),
    ("expect_kernels(1, 2)", "too many positional arguments"),
    ("expect_kernels(1, externs=1)", "got an unexpected keyword argument 'externs'"),
    ("expect_kernels(1, fallback=-2)", "fallback cannot be negative: -2"),
    ("expect_launches(None)", "n must be an int, not NoneType None"),
    ("max_launches(-3)", "n cannot be negative: -3"),
    ("max_memory_traffic('24 XB')", "size: unknown size unit 'XB' in '24 XB'"),
    ("max_memory_traffic('24 mb')", "size: unknown size unit 'mb' in '24 mb'"),
    ("max_memory_traffic('lots')", "size: cannot read 'lots' as a size"),
    ("max_memory_traffic(-5)", "size: a size cannot be negative: -5"),
    ("max_memory_traffic(1.5)", "size: a size is an int of bytes or a string like '80 MB', not float 1.5"),
    ("max_peak_memory('1 GB', 2)", "too many positional arguments"),
    ("min_speedup(0)", "x must be a positive finite number, not 0"),
    ("min_speedup('2x')", "x must be a positive finite number, not '2x'"),
    ("min_speedup(2, over='tvm')", "over must be one of 'eager', 'inductor', not 'tvm'"),
    ("min_speedup(2, device='tpu')", "device must be one of None, 'cpu', 'cuda', not 'tpu'"),
    ("min_speedup(2, on='cuda')", "got an unexpected keyword argument 'on'"),
    ("expect_graph_breaks(-1)", "n cannot be negative: -1"),
    ("fusion_options(rounds=0)", "rounds must be at least 1"),
    ("fusion_options(speed=1)", "got an unexpected keyword argument 'speed'"),
]


@pytest.mark.parametrize("marker, problem", BAD_MARKERS, ids=[m for m, _ in BAD_MARKERS])
def test_bad_marker_is_usage_error(pytester, marker, problem):
    pytester.makepyfile(test_it=f"import pytest\n\n@pytest.mark.{marker}\ndef test_case():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    shown = marker.replace("'", "*").replace("(", "[(]").replace(")", "[)]")
    result.stderr.fnmatch_lines([f"ERROR: test_it.py::test_case: @pytest.mark.{shown}: *{problem}*"])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_all_bad_markers_listed_and_class_markers_checked(pytester):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.max_peak_memory("9 XiB")
class TestA:
    def test_one(self):
        pass

@pytest.mark.parametrize("n", [pytest.param(1, marks=pytest.mark.expect_launches(-1))])
def test_two(n):
    pass
""")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: test_it.py::TestA::test_one: @pytest.mark.max_peak_memory('9 XiB'): *unknown size unit 'XiB'*",
        "test_it.py::test_two[[]1[]]: @pytest.mark.expect_launches(-1): n cannot be negative: -1",
    ])


@pytest.mark.parametrize("option, problem", [
    ("--fusion-rounds=0", "must be at least 1, not 0"),
    ("--fusion-rounds=many", "must be an integer, not 'many'"),
    ("--fusion-warmup=-1", "must be at least 0, not -1"),
    ("--fusion-device=tpu", "must be one of auto, cpu, cuda, not 'tpu'"),
    ("--fusion-backend=xla", "must be one of fusion, inductor, not 'xla'"),
    ("--fusion-tolerance-scale=0", "must be positive, not 0"),
    ("--fusion-nvml-seconds=-2", "must be zero or more, not -2"),
])
def test_bad_option_is_usage_error(pytester, option, problem):
    pytester.makepyfile(test_it="def test_case():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{option.split('=')[0]}*{problem}*"])


@pytest.mark.parametrize("ini, problem", [
    ("fusion_rounds = 0", "ini key fusion_rounds = '0': must be at least 1, not 0"),
    ("fusion_no_perf = maybe", "ini key fusion_no_perf = 'maybe': must be true or false, not 'maybe'"),
    ("fusion_backend = tvm", "ini key fusion_backend = 'tvm': must be one of fusion, inductor, not 'tvm'"),
    ("fusion_ncu = sometimes", "ini key fusion_ncu = 'sometimes': must be true or false, not 'sometimes'"),
    ("fusion_report = maybe", "ini key fusion_report = 'maybe': must be true or false, not 'maybe'"),
])
def test_bad_ini_is_usage_error(pytester, ini, problem):
    pytester.makeini(f"[pytest]\n{ini}\n")
    pytester.makepyfile(test_it="def test_case():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: {problem}"])


@pytest.mark.parametrize("x", ["inf", "nan"])
def test_min_speedup_of_no_finite_number_is_a_usage_error(pytester, x):
    pytester.makepyfile(test_it=f"import pytest\n\n@pytest.mark.min_speedup(float('{x}'))\ndef test_case():\n    pass\n")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"ERROR: test_it.py::test_case: @pytest.mark.min_speedup({x}): "
                                 f"x must be a positive finite number, not {x}"])


def test_two_min_speedup_marks_with_one_key_on_one_level_are_a_usage_error(pytester):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.min_speedup(2, over="inductor")
@pytest.mark.min_speedup(1.5, over="inductor")
def test_function():
    pass

@pytest.mark.min_speedup(1.1)
@pytest.mark.min_speedup(1.2, over="eager")
class TestClass:
    def test_method(self):
        pass
""")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: test_it.py::test_function: @pytest.mark.min_speedup(1.5, over='inductor') and "
        "@pytest.mark.min_speedup(2, over='inductor'): two marks over='inductor' with device=None on one function; "
        "keep one, or give each its own device",
        "test_it.py::TestClass::test_method: @pytest.mark.min_speedup(1.2, over='eager') and "
        "@pytest.mark.min_speedup(1.1): two marks over='eager' with device=None on one class; *",
    ])
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_two_marks_of_another_marker_on_one_level_are_a_usage_error(pytester):
    """Only min_speedup marks stack; two of any other marker on one function, class or
    module would keep one silently."""
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.expect_kernels(1)
@pytest.mark.expect_kernels(5)
def test_function():
    pass

@pytest.mark.fusion_options(rounds=2)
@pytest.mark.fusion_options(rounds=3)
class TestClass:
    def test_method(self):
        pass

@pytest.mark.expect_kernels(2)  # a closer mark replaces the module's: fine
def test_closer_wins():
    pass

pytestmark = pytest.mark.expect_kernels(3)
""")
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([
        "ERROR: test_it.py::test_function: @pytest.mark.expect_kernels(5) and @pytest.mark.expect_kernels(1): "
        "two expect_kernels marks on one function; keep one",
        "test_it.py::TestClass::test_method: @pytest.mark.fusion_options(rounds=3) and "
        "@pytest.mark.fusion_options(rounds=2): two fusion_options marks on one class; keep one",
    ])
    assert "test_closer_wins" not in result.stderr.str()


def test_stacked_min_speedup_marks_that_differ_are_fine(pytester):
    from pytest_fusion import markers

    item = pytester.getitem("""
import pytest

pytestmark = [pytest.mark.min_speedup(3, over="eager"), pytest.mark.min_speedup(1.1, over="inductor")]

@pytest.mark.min_speedup(2, over="eager")  # replaces the module's eager mark
@pytest.mark.min_speedup(2.5, over="eager", device="cuda")
@pytest.mark.min_speedup(0.9, over="inductor", device="cuda")
def test_case():
    pass
""", "test_case")
    assert markers.problems(item) == []
    assert [(a["over"], a["device"], a["x"]) for _, a in markers.gates_of(item)] == [
        ("eager", None, 2.0), ("eager", "cuda", 2.5), ("inductor", None, 1.1), ("inductor", "cuda", 0.9)]
