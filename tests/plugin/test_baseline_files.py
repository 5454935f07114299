"""Baselines, in process: a baseline file edited by hand with a value of the wrong
type fails the tests that read it with what is wrong (as an unreadable file does,
never an INTERNALERROR); a test that measured nothing is not recorded."""
from __future__ import annotations

import json

import pytest

SRC = """
import pytest

@pytest.mark.expect_kernels(1)
def test_case(fusion):
    fusion.run(lambda x: (x + 1).sin(), fusion.randn(100))
"""
CASE = "test_it.py::test_case"


def _set(*path_and_value):
    *path, key, value = path_and_value

    def edit(data):
        for p in path:
            data = data[p]
        data[key] = value
    return edit


@pytest.mark.parametrize("edit, problem", [
    (_set("tolerance", "bytes", "2%"), "tolerance.bytes must be a fraction (0.02 for 2%) or null, not '2%'"),
    (_set("tests", CASE, 5), f"the entry of {CASE} must be an object of metrics, not 5"),
    (_set("tests", CASE, "kernels", "1"), f"kernels of {CASE} must be an integer, not '1'"),
    (_set("tests", CASE, "bytes", [800]), f"bytes of {CASE} must be a number, not [800]"),
    (_set("tolerance", []), "'tolerance' must be an object"),
])
def test_wrong_value_types_are_not_a_baseline_file(run, pytester, monkeypatch, edit, problem):
    monkeypatch.delenv("CI", raising=False)
    run(SRC, "--fusion-baseline", "--fusion-no-perf").assert_outcomes(passed=1)  # records the entry
    path = pytester.path / "reports/baselines/cpu.json"
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    result = run(SRC, "--fusion-baseline", "--fusion-no-perf", "-rf")
    result.assert_outcomes(failed=1)
    assert f"/reports/baselines/cpu.json is not a baseline file: {problem}\n" in result.stdout.str()
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


def test_update_records_no_test_that_measured_nothing(run, pytester, monkeypatch):
    """A test that called nothing compiled has zeros, not figures: no baseline entry."""
    monkeypatch.delenv("CI", raising=False)
    result = run(SRC + "\ndef test_nothing(fusion):\n    fusion.randn(10)\n", "--fusion-update", "--fusion-no-perf")
    result.assert_outcomes(passed=2)
    data = json.loads((pytester.path / "reports/baselines/cpu.json").read_text())
    assert list(data["tests"]) == [CASE]
