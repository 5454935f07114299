"""pytest-xdist with -n 2: count gates work in the workers, results reach the
controller's table and JUnit XML, timing gates skip with a warning (2 workers
share one CPU), and a bad marker still exits 4 without an INTERNALERROR."""
from __future__ import annotations

import pytest

pytest.importorskip("xdist")


def test_xdist_two_workers(pytester):
    pytester.makepyfile(test_it="""
import pytest

@pytest.mark.expect_kernels(1)
@pytest.mark.expect_launches(1)
def test_counts_pass(fusion):
    fusion.run(lambda x: (x + 1).sin(), fusion.randn(64))

@pytest.mark.expect_kernels(3)
def test_counts_fail(fusion):
    fusion.run(lambda x: (x + 1).sin(), fusion.randn(64))

@pytest.mark.min_speedup(0.001)
@pytest.mark.expect_kernels(1)
def test_timing_skipped(fusion):
    fusion.run(lambda x: (x + 1).sin(), fusion.randn(64))

@pytest.mark.max_memory_traffic("12 QB")
def test_bad_marker():
    pass
""")
    result = pytester.runpytest_subprocess("-n", "2", "-p", "no:cacheprovider", "--fusion-device=cpu", "--fusion-rounds=2", "-rs",
                                           "--junitxml=junit.xml", timeout=240)
    out = result.stdout.str()
    assert "INTERNALERROR" not in out + result.stderr.str()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.assert_outcomes(passed=1, failed=1, skipped=1, errors=1)
    result.stdout.fnmatch_lines_random([
        "usage error: test_it.py::test_bad_marker: @pytest.mark.max_memory_traffic('12 QB'): *",
        "expected 3 kernels, generated 1 (-2)",
        "*min_speedup over eager: not measured: timing under xdist on the CPU: 2 workers share its cores*",
        "*pytest-fusion: timing gates skipped: timing under xdist on the CPU: 2 workers share its cores*",
        "test_it.py::test_counts_pass * 1 * 1 * passed",
        "test_it.py::test_counts_fail * 1 * 1 * failed",
    ])
    xml = (pytester.path / "junit.xml").read_text()
    assert 'name="fusion_kernels" value="1"' in xml and 'name="fusion_launches" value="1"' in xml
