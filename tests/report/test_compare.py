"""compare: exit 0 when every limit holds, 1 when one is exceeded, 2 on bad input."""
import pytest

from pytest_fusion.__main__ import main
from pytest_fusion.report import schema
from pytest_fusion.report.compare import SpecError, parse_fail

SPEC = "--fail=kernels:0,bytes:2%,speedup:-5%"


@pytest.fixture
def run(tmp_path, make_doc):
    """compare OLD NEW (reports holding the given tests) -> exit status"""
    def run(old_tests, new_tests, *args):
        old, new = tmp_path / "old.json", tmp_path / "new.json"
        schema.dump(make_doc(old_tests), old)
        schema.dump(make_doc(new_tests), new)
        return main(["compare", str(old), str(new), *args])
    return run


def test_unchanged_passes(capsys, run, make_test):
    tests = [make_test("t.py::a"), make_test("t.py::b", kernels=2)]
    assert run(tests, tests, SPEC) == 0
    assert "all gates passed" in capsys.readouterr().out


def test_one_more_kernel_fails(capsys, run, make_test):
    assert run([make_test("t.py::a")], [make_test("t.py::a", kernels=2)], SPEC) == 1
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if "kernels" in line and "t.py::a" in line)
    assert row.split()[-5:] == ["1", "2", "+1", "+0", "FAIL"]
    assert "1 gate failed" in out


@pytest.mark.parametrize("new_bytes, rc", [(8160, 0), (8200, 1)])  # old: 8000 B; +2% = 8160
def test_bytes_tolerance(capsys, new_bytes, rc, run, make_test):
    new = make_test("t.py::a", bytes_read=4000, bytes_written=new_bytes - 4000)
    assert run([make_test("t.py::a")], [new], SPEC) == rc
    if rc:
        assert "+2.5%" in capsys.readouterr().out


@pytest.mark.parametrize("new_speedup, rc", [(1.91, 0), (1.8, 1), (3.0, 0)])  # old 2.0; -5% = 1.9
def test_speedup_drop(new_speedup, rc, run, make_test):
    assert run([make_test("t.py::a")], [make_test("t.py::a", speedup=new_speedup)], SPEC) == rc


def test_fewer_kernels_and_bytes_is_no_regression(run, make_test):
    old = [make_test("t.py::a", kernels=3, bytes_read=9000)]
    assert run(old, [make_test("t.py::a", kernels=1)], SPEC) == 0


def test_missing_and_new_tests_are_listed_not_failed(capsys, run, make_test):
    assert run([make_test("t.py::a"), make_test("t.py::gone")],
                [make_test("t.py::a"), make_test("t.py::added")], SPEC) == 0
    out = capsys.readouterr().out
    assert "missing in NEW: t.py::gone" in out and "new in NEW: t.py::added" in out


def test_unmeasured_metric_is_not_a_pass_or_a_failure(capsys, run, make_test):
    assert run([make_test("t.py::a")], [make_test("t.py::a", speedup=None)], SPEC) == 0
    assert "n/a" in capsys.readouterr().out


def test_bad_spec_and_bad_file_are_usage_errors(tmp_path, capsys, run, make_test):
    assert run([make_test("t.py::a")], [make_test("t.py::a")], "--fail=kernel:0") == 2
    assert "METRIC:LIMIT" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "nope.json"), str(tmp_path / "old.json")]) == 2
    with pytest.raises(SpecError):
        parse_fail("bytes:lots")


def test_reports_compiled_with_other_settings_say_so(tmp_path, capsys, make_doc, make_test):
    """A report records the compiler's settings; compare names those that differ
    (a run with FUSION_FAST_MATH=1 against one without), and gates as before."""
    old, new = make_doc([make_test("t.py::a")]), make_doc([make_test("t.py::a")])
    old["options"]["compiler"] = {"fusion": True, "fast_math": False, "pdl": True}
    new["options"]["compiler"] = {"fusion": True, "fast_math": True, "pdl": True}
    schema.dump(old, tmp_path / "old.json")
    schema.dump(new, tmp_path / "new.json")
    assert main(["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json"), SPEC]) == 0
    out = capsys.readouterr().out
    assert "note: the reports' compiler settings differ (fast_math False -> True)" in out
    assert main(["compare", str(tmp_path / "old.json"), str(tmp_path / "old.json"), SPEC]) == 0
    assert "compiler settings" not in capsys.readouterr().out


def test_compare_real_reports(tmp_path, tiny_doc):
    """Two real runs' reports: the second made one kernel more in one test."""
    schema.dump(tiny_doc, tmp_path / "old.json")
    tiny_doc["tests"][0]["metrics"]["kernels"] += 1
    schema.dump(tiny_doc, tmp_path / "new.json")
    assert main(["compare", str(tmp_path / "old.json"), str(tmp_path / "old.json"), "--fail=kernels:0"]) == 0
    assert main(["compare", str(tmp_path / "old.json"), str(tmp_path / "new.json"), "--fail=kernels:0"]) == 1


@pytest.mark.parametrize("outcome", ["failed", "error"])
def test_a_test_that_stopped_passing_fails(capsys, run, make_test, outcome):
    """passed -> failed: its figures (no kernel compiled, nothing measured) are no
    improvement; the outcome row fails, shown without --all."""
    new = make_test("t.py::a", outcome=outcome, kernels=0, speedup=None)
    assert run([make_test("t.py::a")], [new], SPEC) == 1
    out = capsys.readouterr().out
    assert [line.split() for line in out.splitlines() if "t.py::a" in line] == [["t.py::a", "outcome", "passed", outcome, "FAIL"]]
    assert "1 test compared, 0 missing, 0 new: 1 gate failed" in out


def test_a_test_that_failed_before_and_passes_now_is_no_failure(run, make_test):
    assert run([make_test("t.py::a", outcome="failed", kernels=3)], [make_test("t.py::a")], SPEC) == 0
