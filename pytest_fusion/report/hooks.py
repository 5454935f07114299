"""pytest hooks of the report: its options, collecting each test's
`report.fusion_result` (set by the plugin) on the controller, so one report covers
all xdist workers, and writing the JSON, then the HTML rendered from it."""
from __future__ import annotations

import dataclasses
import os

import pytest

from compiler.config import config as compiler_config

from .. import settings
from ..machine import machine_info, resolve_device
from . import schema

DEFAULT_HTML = os.path.join("reports", "fusion-report.html")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fusion", "pytest-fusion")
    group.addoption("--fusion-report", action="store_true", default=None, dest="fusion_report",
                    help=f"write the HTML report (to {DEFAULT_HTML} unless --fusion-report-path says where)")
    group.addoption("--fusion-report-path", dest="fusion_report_path", metavar="PATH",
                    help="write the HTML report to PATH (implies --fusion-report)")
    group.addoption("--fusion-json", dest="fusion_json", metavar="PATH",
                    help="write the JSON report to PATH (default with --fusion-report: next to the HTML)")
    group.addoption("--fusion-trace-dir", dest="fusion_trace_dir", metavar="DIR",
                    help="write torch.profiler traces of the measured calls under DIR (TensorBoard, Perfetto)")
    parser.addini("fusion_report", default="", help="write the HTML report (true or false)")
    parser.addini("fusion_report_path", default="", help="path of the HTML report")
    parser.addini("fusion_json", default="", help="path of the JSON report")
    parser.addini("fusion_trace_dir", default="", help="folder for torch.profiler traces")


def _setting(config: pytest.Config, name: str):
    """Command line over ini; relative paths are relative to where pytest was run."""
    value = config.getoption(name)
    if value in (None, ""):
        value = config.getini(name)
    return value or None


def _path(config: pytest.Config, value: str) -> str:
    return os.path.join(str(config.invocation_params.dir), os.path.expanduser(value))


def trace_dir(config: pytest.Config) -> str | None:
    """The folder the plugin writes profiler traces to, or None when not asked for."""
    value = _setting(config, "fusion_trace_dir")
    return _path(config, value) if value else None


def _report_flag(config: pytest.Config) -> bool:
    """--fusion-report, or the ini key; a value that is no bool is a usage error naming it."""
    if config.getoption("fusion_report"):
        return True
    raw = config.getini("fusion_report")
    try:
        return settings._bool(raw)
    except ValueError as e:
        raise pytest.UsageError(f"ini key fusion_report = {raw!r}: {e}") from None


def output_paths(config: pytest.Config) -> tuple[str | None, str | None]:
    """(json_path, html_path); the JSON is always written when the HTML is."""
    html = _setting(config, "fusion_report_path")
    if html is None and _report_flag(config):
        html = DEFAULT_HTML
    js = _setting(config, "fusion_json")
    if js is None and html is not None:
        js = os.path.splitext(html)[0] + ".json"
    return (_path(config, js) if js else None), (_path(config, html) if html else None)


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # xdist worker: the controller writes the report
        return
    json_path, html_path = output_paths(config)
    if json_path:
        config.pluginmanager.register(ReportWriter(config, json_path, html_path), "fusion-report-writer")


def _device(config: pytest.Config, tests: list[dict]):
    """The device the tests ran on, as the plugin resolved it (worker 0's under xdist)."""
    import torch

    if any(str(g.get("device", "")).startswith("cuda") for t in tests for g in t["graphs"]):
        return torch.device("cuda")
    return resolve_device(settings.from_config(config).device) or torch.device("cpu")


_RANK = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}


def _one_line(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple):  # skips: (path, lineno, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr or "")
    return text.strip().splitlines()[0] if text.strip() else ""


class ReportWriter:
    """Lives on the controller; xdist hands it every worker's reports."""

    def __init__(self, config: pytest.Config, json_path: str, html_path: str | None):
        self.config, self.json_path, self.html_path = config, json_path, html_path
        self.tests: dict[str, dict] = {}  # insertion order = order the tests finished
        self.error: str | None = None
        self.json_written = False

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        entry = self.tests.setdefault(report.nodeid, {"result": None, "outcome": "passed", "message": "",
                                                      "duration_s": 0.0})
        entry["duration_s"] += report.duration
        result = getattr(report, "fusion_result", None)
        if result:
            entry["result"] = result
        if report.failed:
            outcome = "failed" if report.when == "call" else "error"
        elif report.skipped:
            outcome = "skipped"
        else:
            return
        if _RANK[outcome] > _RANK[entry["outcome"]]:
            entry["outcome"], entry["message"] = outcome, _one_line(report)

    def _tests(self) -> list[dict]:
        out = []
        for nodeid, e in self.tests.items():
            if e["result"] is None:  # not a fusion test
                continue
            t = dict(e["result"])
            # the worse of pytest's outcome (teardown included) and the plugin's
            # (a failure to measure is an error)
            outcome = max(e["outcome"], t.get("outcome", "passed"), key=lambda o: _RANK.get(o, 0))
            t.update(nodeid=nodeid, outcome=outcome, duration_s=round(e["duration_s"], 4),
                     message=t.get("message") or e["message"])
            t.setdefault("gates", [])
            t.setdefault("graphs", [])
            t.setdefault("baseline", None)
            t["metrics"] = dict(t.get("metrics") or {})
            t["metrics"].setdefault("graph_breaks", 0)
            out.append(t)
        return out

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        tests = self._tests()
        options = dataclasses.asdict(settings.from_config(self.config))
        options.update({k: _setting(self.config, f"fusion_{k}") for k in ("report_path", "json", "trace_dir")})
        options["compiler"] = compiler_config.report_settings()  # FUSION_FAST_MATH=1, FUSION_ENABLE=0, ...
        doc = schema.document(tests, machine_info(_device(self.config, tests)), options,
                              schema.git_commit(self.config.rootpath))
        try:
            # the JSON is written even when it fails validation: it is what one debugs with
            schema.dump(doc, self.json_path)
            self.json_written = True
            schema.validate(doc)
            if self.html_path:
                from .html import write_html

                write_html(doc, self.html_path)
        except Exception as e:  # never an INTERNALERROR: say it and fail the run
            self.error = f"{type(e).__name__}: {e}"
            if session.exitstatus == pytest.ExitCode.OK:
                session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter) -> None:
        tr = terminalreporter
        if self.error:
            tr.write_sep("-", "fusion report failed", red=True)
            tr.write_line(self.error)
        if not self.json_written:
            return
        tr.write_sep("-", "fusion report")
        tr.write_line(f"JSON: {self.json_path}")
        if self.html_path and not self.error:
            tr.write_line(f"HTML: {self.html_path}")
