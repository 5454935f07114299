"""Baselines end to end: real pytest runs (pytester) of tiny fusion tests with the
plugin and the compiler, against baseline files the tests write or edit."""
from __future__ import annotations

import json

import pytest

pytest_plugins = ["pytester"]

TINY = '''
import pytest


@pytest.mark.expect_kernels(1)
def test_chain(fusion):
    fusion.run(lambda x: ((x + 1) * 2).sin(), fusion.randn(1001))


@pytest.mark.expect_kernels(2)
def test_sum_then_softmax(fusion):
    fusion.run(lambda a: a.sum(-1).softmax(-1), fusion.randn(33, 65))
'''
CHAIN = "test_tiny.py::test_chain"
SOFTMAX = "test_tiny.py::test_sum_then_softmax"
# the cpu class on any machine; counts and bytes only, unless a test times
COUNTS_ONLY = ("-p", "no:cacheprovider", "--fusion-device=cpu", "--fusion-no-perf")
TIMED = ("-p", "no:cacheprovider", "--fusion-device=cpu", "--fusion-rounds=3", "--fusion-warmup=1")


@pytest.fixture(scope="module", autouse=True)
def _dynamo_imported():
    """pytester's in-process runs drop the modules a run imported, and Dynamo's lazily
    imported backends would register twice in the next run: import them here first."""
    import torch

    torch.compile(lambda x: x + 1, backend="fusion", dynamic=False)(torch.randn(3))
    torch._dynamo.reset()


@pytest.fixture
def tiny(pytester, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("COLUMNS", "400")  # short summary lines in full
    pytester.makepyfile(test_tiny=TINY)
    return pytester


def baseline(pytester) -> dict:
    return json.loads((pytester.path / "reports/baselines/cpu.json").read_text())


def edit(pytester, fn) -> None:
    path = pytester.path / "reports/baselines/cpu.json"
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def test_first_run_records_locally_then_matches(tiny):
    first = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY)
    first.assert_outcomes(passed=2)
    first.stdout.fnmatch_lines(["*reports/baselines/cpu.json: 2 added, 0 changed, 0 unchanged*",
                                f"*+ {CHAIN}: kernels 1, externs 0, fallbacks 0, graph_breaks 0, launches 1, bytes *"])
    data = baseline(tiny)
    assert data["device_class"] == "cpu"
    assert data["tolerance"] == {"bytes": 0.02, "ms": None, "speedup": None}  # CPU times are not gated
    entry = data["tests"][CHAIN]
    assert entry["kernels"] == 1 and entry["bytes"] == 2 * 1001 * 4 and len(entry["source_hash"]) == 16
    assert data["tests"][SOFTMAX]["kernels"] == 2
    assert "fusion_ms" not in entry and "speedup_eager" not in entry

    again = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY, "--fusion-json=out.json")
    again.assert_outcomes(passed=2)
    assert "fusion baselines" not in again.stdout.str()  # nothing new to write
    report = json.loads((tiny.path / "out.json").read_text())
    statuses = {t["nodeid"]: t["baseline"]["status"] for t in report["tests"]}
    assert statuses == {CHAIN: "match", SOFTMAX: "match"}
    kernels = report["tests"][0]["baseline"]["deltas"]["kernels"]
    assert kernels == {"baseline": 1, "measured": 1, "change": 0, "tolerance": 0, "verdict": "match"}


def test_count_regression_fails_with_a_readable_reason(tiny):
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)
    edit(tiny, lambda d: d["tests"][CHAIN].update(kernels=0, launches=0))
    result = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*- fusion baseline -*",
        "baseline: reports/baselines/cpu.json",
        "metric*baseline*measured*change*verdict",
        "kernels*0*1*+1*regressed",
        "bytes*8.01 KB*8.01 KB*+0.0%*match",
        f"if this is intended: pytest '{CHAIN}' --fusion-update on a cpu machine, then commit reports/baselines/cpu.json",
        f"FAILED {CHAIN} - baseline (cpu) regressed: kernels 0 -> 1 (+1); launches 0 -> 1 (+1)",
    ])


def test_bytes_compare_within_tolerance(tiny):
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)
    measured = baseline(tiny)["tests"][CHAIN]["bytes"]
    edit(tiny, lambda d: d["tests"][CHAIN].update(bytes=round(measured * 0.99)))  # +1%: within 2%
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)
    edit(tiny, lambda d: d["tests"][CHAIN].update(bytes=measured // 2))
    result = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"FAILED {CHAIN} - baseline (cpu) regressed: bytes 4 KB -> 8.01 KB (+100.0%, tolerance 2%)"])


def test_improvement_passes_with_a_note_and_fails_under_strict(tiny):
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)
    edit(tiny, lambda d: d["tests"][SOFTMAX].update(kernels=3))
    result = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([f"1 test improved beyond their baseline (record it with --fusion-update): {SOFTMAX}"])
    strict = tiny.runpytest("--fusion-strict", *COUNTS_ONLY, "-rf")
    strict.assert_outcomes(passed=1, failed=1)
    strict.stdout.fnmatch_lines([
        f"FAILED {SOFTMAX} - baseline (cpu) out of date (--fusion-strict): kernels 3 -> 2 (-1): run --fusion-update"])


def test_a_test_with_a_cuda_only_speed_gate_still_compares(tiny):
    tiny.makepyfile(test_tiny=TINY.replace("@pytest.mark.expect_kernels(1)\n",
                                           '@pytest.mark.expect_kernels(1)\n@pytest.mark.min_speedup(2, device="cuda")\n'))
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)
    assert set(baseline(tiny)["tests"]) == {CHAIN, SOFTMAX}
    edit(tiny, lambda d: d["tests"][CHAIN].update(kernels=0))
    result = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"FAILED {CHAIN} - baseline (cpu) regressed: kernels 0 -> 1 (+1)*"])


def test_missing_entry_is_an_error_in_ci(tiny, monkeypatch):
    monkeypatch.setenv("CI", "true")
    result = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY, "-rf")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([
        "2 tests have no baseline for their device class and CI is set*",
        f"FAILED {CHAIN} - no baseline for this test on cpu (no entry) and CI is set: run pytest '{CHAIN}' "
        "--fusion-update on a cpu machine and commit reports/baselines/cpu.json",
    ])
    assert not (tiny.path / "reports/baselines/cpu.json").exists()  # CI records nothing


def test_changed_test_source_invalidates_its_entry(tiny, monkeypatch):
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)
    old = baseline(tiny)["tests"][CHAIN]["source_hash"]
    tiny.makepyfile(test_tiny=TINY.replace("fusion.randn(1001)", "fusion.randn(2001)"))
    monkeypatch.setenv("CI", "1")
    result = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"FAILED {CHAIN} - no baseline for this test on cpu (the test's source changed since *"])
    monkeypatch.delenv("CI")
    local = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY)  # locally: recorded again
    local.assert_outcomes(passed=2)
    local.stdout.fnmatch_lines(["*cpu.json: 0 added, 1 changed, 0 unchanged*", f"*~ {CHAIN}: *"])
    entry = baseline(tiny)["tests"][CHAIN]
    assert entry["source_hash"] != old and entry["bytes"] == 2 * 2001 * 4


def test_update_rewrites_and_prints_what_changed(tiny):
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)
    edit(tiny, lambda d: d["tests"][CHAIN].update(kernels=4, bytes=100))
    result = tiny.runpytest("--fusion-update", *COUNTS_ONLY)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "*reports/baselines/cpu.json: 0 added, 1 changed, 1 unchanged*",
        f"  ~ {CHAIN}: kernels 4 -> 1 (-3); bytes 100 B -> 8.01 KB (+7908.0%, tolerance 2%)",
    ])
    assert baseline(tiny)["tests"][CHAIN]["kernels"] == 1
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)


def test_a_failing_test_is_not_recorded(tiny):
    tiny.makepyfile(test_tiny=TINY.replace("expect_kernels(2)", "expect_kernels(5)"))
    result = tiny.runpytest("--fusion-update", *COUNTS_ONLY)
    result.assert_outcomes(passed=1, failed=1)
    assert set(baseline(tiny)["tests"]) == {CHAIN}


def test_times_are_compared_where_the_file_has_a_tolerance(tiny):
    tiny.runpytest("--fusion-baseline", *TIMED).assert_outcomes(passed=2)
    assert "speedup_eager" not in baseline(tiny)["tests"][CHAIN]  # not on the cpu class by default

    def gate_times(d):
        d["tolerance"].update(speedup=0.1)
        d["tests"][CHAIN]["speedup_eager"] = 1e6
    edit(tiny, gate_times)
    result = tiny.runpytest("--fusion-baseline", *TIMED, "-rf")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"FAILED {CHAIN} - baseline (cpu) regressed: speedup_eager 1000000.00x -> *x (-*%, tolerance 10%)"])
    tiny.runpytest("--fusion-update", *TIMED).assert_outcomes(passed=2)
    assert 0 < baseline(tiny)["tests"][CHAIN]["speedup_eager"] < 1e6  # now recorded


def test_suite_geomean_floor(tiny):
    result = tiny.runpytest("--fusion-min-geomean=eager:1000", *TIMED)
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*= fusion suite =*", "cpu: geomean speedup over eager: *x over 2 tests",
                                 "FAILED suite gate: cpu: geomean speedup over eager *x is below 1000x (2 tests)"])
    ok = tiny.runpytest("--fusion-min-geomean=eager:0.001", *TIMED)
    assert ok.ret == pytest.ExitCode.OK
    untimed = tiny.runpytest("--fusion-min-geomean=inductor:1", *COUNTS_ONLY)
    assert untimed.ret == pytest.ExitCode.OK
    untimed.stdout.fnmatch_lines(["--fusion-min-geomean: no speedup over inductor was measured*not checked"])


@pytest.mark.parametrize("args, ini, message", [
    (["--fusion-min-geomean=speed:2"], "", "*--fusion-min-geomean*write REF:X with REF one of eager, inductor, not 'speed:2'*"),
    (["--fusion-min-geomean=eager:-1"], "", "*the floor in 'eager:-1' must be positive*"),
    ([], "fusion_strict = maybe", "*ini fusion_strict = 'maybe': must be true or false*"),
])
def test_bad_options_are_usage_errors(tiny, args, ini, message):
    tiny.makeini(f"[pytest]\n{ini}\n")
    result = tiny.runpytest(*args, *COUNTS_ONLY)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_unreadable_baseline_file_fails_the_tests_not_pytest(tiny):
    (tiny.path / "reports/baselines").mkdir(parents=True)
    (tiny.path / "reports/baselines/cpu.json").write_text("{not json")
    result = tiny.runpytest("--fusion-baseline", *COUNTS_ONLY, "-rf")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([f"FAILED {CHAIN} - baseline file */reports/baselines/cpu.json cannot be read: *"])
    assert "INTERNALERROR" not in result.stdout.str()


def test_baseline_dir_option_and_ini(tiny):
    tiny.makeini("[pytest]\nfusion_baseline = true\nfusion_baseline_dir = perf/base\n")
    tiny.runpytest(*COUNTS_ONLY).assert_outcomes(passed=2)
    assert (tiny.path / "perf/base/cpu.json").exists()
    tiny.runpytest(*COUNTS_ONLY, "--fusion-baseline-dir=elsewhere").assert_outcomes(passed=2)
    assert (tiny.path / "elsewhere/cpu.json").exists()


@pytest.mark.slow
def test_xdist_workers_compare_and_the_controller_writes(tiny):
    pytest.importorskip("xdist")
    tiny.runpytest("--fusion-baseline", *COUNTS_ONLY).assert_outcomes(passed=2)

    def regress_one_forget_other(d):
        d["tests"][CHAIN]["kernels"] = 0
        del d["tests"][SOFTMAX]
    edit(tiny, regress_one_forget_other)
    result = tiny.runpytest_subprocess("-n", "2", "--fusion-baseline", *COUNTS_ONLY, "--fusion-json=out.json")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines([f"FAILED {CHAIN} - baseline (cpu) regressed: kernels 0 -> 1 (+1)*"])
    report = json.loads((tiny.path / "out.json").read_text())
    assert {t["nodeid"]: t["baseline"]["status"] for t in report["tests"]} == {CHAIN: "regressed", SOFTMAX: "new"}
    data = baseline(tiny)["tests"]  # the controller recorded the new entry, kept the regressed one
    assert data[SOFTMAX]["kernels"] == 2 and data[CHAIN]["kernels"] == 0
