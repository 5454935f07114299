"""pytest-fusion's hooks: options and markers, validation at collection, the
gates around each test's call, the result on its report, the summary table."""
from __future__ import annotations

import contextlib
import logging
import warnings

import pytest
import torch

import compiler

from . import gates, markers, results, settings
from .fixture import SETTINGS, STATE, TIMING_SKIP, create, fusion, routing  # noqa: F401  (fusion: the fixture)
from .machine import resolve_device, worker_index
from .measure import MeasureError
from .measure.profile import warm_up
from .units import plural

USAGE_ERROR = pytest.StashKey[str]()
RESULT = pytest.StashKey[dict]()  # the test's fusion_result, as its call (or setup) report has it
_warned_timing = [False]


def pytest_addoption(parser):
    settings.add_options(parser)


def _timing_skip(config, s: settings.Settings) -> str | None:
    """Why timings cannot be trusted in this process (xdist workers sharing a device)."""
    workerinput = getattr(config, "workerinput", None)
    if not workerinput or workerinput.get("workercount", 1) <= 1:
        return None
    n = workerinput["workercount"]
    if s.device != "cpu" and torch.cuda.is_available():
        gpus = torch.cuda.device_count()
        if gpus >= n:
            torch.cuda.set_device(worker_index(config) % gpus)  # one worker per GPU
            return None
        return f"timing under xdist needs one GPU per worker: {n} workers, {plural(gpus, 'GPU')}"
    return f"timing under xdist on the CPU: {n} workers share its cores"


def pytest_configure(config):
    for line in markers.help_lines():
        config.addinivalue_line("markers", line)
    s = settings.from_config(config)
    config.stash[SETTINGS] = s
    config.stash[TIMING_SKIP] = _timing_skip(config, s)
    if not hasattr(config, "workerinput"):  # xdist workers send their reports to the controller
        config.pluginmanager.register(_Summary(), "fusion-summary")


def pytest_collection_modifyitems(session, config, items):
    errors = {item: markers.problems(item) for item in items}
    errors = {item: e for item, e in errors.items() if e}
    if not errors:
        return
    if not hasattr(config, "workerinput"):
        raise pytest.UsageError("\n".join(e for errs in errors.values() for e in errs))
    # an xdist worker cannot stop the run with a usage error (the controller would
    # see a crash): each bad test errors in setup and the controller exits with 4
    for item, errs in errors.items():
        item.stash[USAGE_ERROR] = "\n".join(errs)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    if USAGE_ERROR in item.stash:
        pytest.fail(f"usage error: {item.stash[USAGE_ERROR]}", pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session):
    """The first profiler session of a process costs seconds on CUDA: pay it before
    the first test, when this process will measure something on a GPU."""
    if session.config.option.collectonly or session.config.getoption("fusion_ncu_child"):
        return  # under ncu nothing is timed or profiled by torch
    if not any(_uses_fusion(i) or _marked(i) for i in session.items):
        return
    device = resolve_device(session.config.stash[SETTINGS].device, worker_index(session.config))
    if device is not None and device.type == "cuda":
        warm_up(device)


def _uses_fusion(item) -> bool:
    return "fusion" in getattr(item, "fixturenames", ())


def _marked(item) -> bool:
    """Any fusion marker, fusion_options too: the test's torch.compile is ours."""
    return any(item.get_closest_marker(name) for name in markers.MARKERS)


def _quiet_torch_trace() -> None:
    """pytest (9+) attaches its log capture to every non-propagating logger, torch's
    structured-trace log too; torch then builds trace payloads on every compile
    (compiles about 30% slower, empty DEBUG lines in failures). Torch's own trace
    handler (TORCH_TRACE) stays."""
    log = logging.getLogger("torch.__trace")
    for h in [h for h in log.handlers if type(h).__module__.startswith("_pytest")]:
        log.removeHandler(h)


@pytest.hookimpl(wrapper=True, trylast=True)  # innermost: inside pytest's log capture
def pytest_runtest_call(item):
    marked = _marked(item)
    if not marked and not _uses_fusion(item):
        return (yield)
    spec = markers.gates_of(item)
    _quiet_torch_trace()
    state = create(item)
    try:
        with routing(state) if marked else contextlib.nullcontext(), compiler.capture() as body:
            outcome = yield
    except BaseException:
        _finish_failed(item, state)
        raise
    _warn_uncounted(item, state, body.graphs)
    _measure_or_fail(item, state, state.measure_pending)
    if state.ncu_child:  # the parent gates; this run only made the calls ncu measured
        state.close()
        return outcome
    metrics = state.final_metrics = state.metrics
    ctx = gates.Context(state.device.type, state.backend, bool(state.records), state.timing_off, state.timing_skip,
                        ncu=state.settings.ncu)
    verdict = state.verdict = gates.evaluate(spec, metrics, ctx)
    earlier = []  # failed timings, each followed by another
    while gates.speed_failed(verdict) and len(earlier) < state.settings.retimes:
        earlier.append(verdict.line())
        _measure_or_fail(item, state, state.retime)
        metrics = state.final_metrics = state.metrics
        metrics["retimed_after"] = earlier
        verdict = state.verdict = gates.evaluate(spec, metrics, ctx)
    state.close()
    if verdict.failures:
        item.add_report_section("call", "fusion", gates.section(verdict, state.graphs, metrics))
        again = f" (timed {len(earlier) + 1} times; first: {earlier[0]})" if earlier else ""
        pytest.fail(verdict.line() + again, pytrace=False)
    if verdict.skips:
        if state.timing_skip and not _warned_timing[0]:
            _warned_timing[0] = True
            warnings.warn(pytest.PytestWarning(f"pytest-fusion: timing gates skipped: {state.timing_skip}"))
        # reported at the test, not at this line
        raise pytest.skip.Exception("; ".join(verdict.skips), _use_item_location=True)
    return outcome


def _measure_or_fail(item, state, measure) -> None:
    """Run a measurement of the test's calls; if it failed, fail the test with why."""
    try:
        measure()
    except MeasureError:
        pass  # state.error says why; failing outside the handler keeps the report short
    if state.error:
        _finish_failed(item, state)
        pytest.fail(f"pytest-fusion could not measure: {state.error}", pytrace=False)


def _warn_uncounted(item, state, graphs) -> None:
    """Graphs the test body compiled outside the calls the fixture records: the
    backward that loss.backward() compiles after a compiled forward's call. The
    gates would judge the forward alone, silently: say so."""
    counted = {id(g) for g in state.graphs}
    stray = [g for g in graphs if id(g) not in counted]
    if not stray:
        return
    kinds = sorted({g.kind for g in stray})
    kernels = sum(len(g.kernels) for g in stray)
    warnings.warn(pytest.PytestWarning(
        f"pytest-fusion: {plural(len(stray), 'graph')} ({', '.join(kinds)}; {plural(kernels, 'kernel')}) compiled "
        "outside the calls the fusion fixture records (loss.backward() after calling a compiled function?): "
        "the gates do not count or time them; run the backward inside the function given to fusion.run"))


def _finish_failed(item, state) -> None:
    """The test body or its measurement failed: keep what it compiled for the report."""
    state.close()
    try:
        state.final_metrics = state.metrics
        item.add_report_section("call", "fusion", gates.section(None, state.graphs, state.final_metrics))
    except Exception as e:  # the original failure is what matters
        item.add_report_section("call", "fusion", f"(pytest-fusion could not summarize: {type(e).__name__}: {e})")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "setup" and USAGE_ERROR in item.stash:
        report.fusion_usage_error = item.stash[USAGE_ERROR]
        return report
    state = item.stash.get(STATE, None)
    concerned = state is not None or _uses_fusion(item) or _marked(item)
    unrun = call.when == "setup" and not report.passed
    if concerned and (call.when == "call" or unrun):
        report.fusion_result = item.stash[RESULT] = results.build(item, report, state)
    if call.when == "teardown" and RESULT in item.stash:
        # JUnit XML reads the teardown report's properties; by now the baseline
        # wrapper has had its say on the result, and teardown its own
        result = item.stash[RESULT]
        outcome = "error" if report.failed else result["outcome"]
        report.user_properties.extend(results.user_properties(dict(result, outcome=outcome)))
    return report


@pytest.hookimpl(wrapper=True)
def pytest_report_to_serializable(config, report):
    data = yield
    if data is not None:
        for key in ("fusion_result", "fusion_usage_error"):
            if getattr(report, key, None) is not None:
                data[key] = getattr(report, key)
    return data


@pytest.hookimpl(wrapper=True)
def pytest_report_from_serializable(config, data):
    report = yield
    if report is not None:
        for key in ("fusion_result", "fusion_usage_error"):
            if data.get(key) is not None:
                setattr(report, key, data[key])
    return report


class _Summary:
    """Collects each test's result (on the xdist controller too) for the table."""

    def __init__(self):
        self.results: dict[str, dict] = {}  # nodeid -> result
        self.usage_errors: list[str] = []

    def pytest_runtest_logreport(self, report):
        result = getattr(report, "fusion_result", None)
        if result is not None:
            self.results[report.nodeid] = result
        elif report.when == "teardown" and report.failed and report.nodeid in self.results:
            # an error in teardown makes the test an error, as in pytest's count and the JSON
            self.results[report.nodeid] = dict(self.results[report.nodeid], outcome="error")
        if getattr(report, "fusion_usage_error", None):
            self.usage_errors.append(report.fusion_usage_error)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session):
        if self.usage_errors:  # bad markers seen by xdist workers
            session.exitstatus = pytest.ExitCode.USAGE_ERROR

    def pytest_terminal_summary(self, terminalreporter):
        rows = [results.summary_row(r) for r in self.results.values()]
        if not rows:
            return
        header = ["test", "kernels", "launches", "bytes", "speedup", "verdict"]
        widths = [max(len(x[i]) for x in rows + [header]) for i in range(len(header))]
        # the test id takes what the other columns leave of the terminal's width
        width = max(24, terminalreporter._tw.fullwidth - sum(widths[1:]) - 2 * (len(header) - 1))
        rows = [[r[0] if len(r[0]) <= width else "..." + r[0][-(width - 3):]] + r[1:] for r in rows]
        widths[0] = max(len(x[0]) for x in rows + [header])
        terminalreporter.write_sep("=", "pytest-fusion")
        for row in [header] + rows:
            cells = [row[0].ljust(widths[0])] + [c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1])] + [row[-1]]
            terminalreporter.write_line("  ".join(cells))
