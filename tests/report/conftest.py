"""Shared by the report tests: a real pytest run of tiny fusion tests (the plugin,
the compiler and the report hooks, in a subprocess like pytester's), and small
hand-written report documents for the pure data functions (merge, compare)."""
from __future__ import annotations

import copy
import importlib.metadata
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

TINY_TESTS = '''
import pytest


@pytest.mark.expect_kernels(1)
def test_sin_chain_fuses(fusion):
    fusion.run(lambda x: ((x + 1) * 2).sin(), fusion.randn(1001))


# ceil/floor/sum then a softmax over the sums: the row sums cannot join the
# softmax's kernel (a different iteration space), so this makes 2 kernels
@pytest.mark.expect_kernels(1)
def test_sum_then_softmax_in_one_kernel(fusion):
    fn = lambda a, b: ((a.ceil() + b.floor()).sum(-1).softmax(-1) * 10) ** 3
    fusion.run(fn, fusion.randn(33, 65), fusion.randn(33, 65))


def test_plain_test_is_not_in_the_report():
    assert True
'''

FAILING = "test_tiny.py::test_sum_then_softmax_in_one_kernel"
PASSING = "test_tiny.py::test_sin_chain_fuses"


def plugin_args() -> list[str]:
    """-p pytest_fusion only when its pytest11 entry point is not installed (or
    plugins are not loaded from entry points)."""
    if os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD"):
        return ["-p", "pytest_fusion"]
    try:
        importlib.metadata.distribution("pytest-fusion")
        return []
    except importlib.metadata.PackageNotFoundError:
        return ["-p", "pytest_fusion"]


def _run_pytest(where: Path, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *plugin_args(), *args],
                          cwd=where, env=env, capture_output=True, text=True, timeout=timeout)


def _write_tiny(where: Path, ini: str = "") -> None:
    """The tiny tests run on the CPU on any machine: the report tests read its C++ kernels."""
    (where / "test_tiny.py").write_text(TINY_TESTS)
    (where / "pytest.ini").write_text("[pytest]\nfusion_device = cpu\nfusion_rounds = 3\nfusion_warmup = 1\n" + ini)


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory) -> dict:
    """One real run; the report options come from the ini file (the flag's default
    HTML path and an explicit JSON path)."""
    where = tmp_path_factory.mktemp("tiny")
    _write_tiny(where, "fusion_report = true\nfusion_json = out/fusion.json\n")
    proc = _run_pytest(where)
    assert proc.returncode == 1, proc.stdout[-3000:] + proc.stderr[-3000:]  # the one failing gate
    json_path, html_path = where / "out" / "fusion.json", where / "reports" / "fusion-report.html"
    assert json_path.exists() and html_path.exists(), proc.stdout[-3000:]
    return {"dir": where, "proc": proc, "json": json_path, "html": html_path,
            "doc": json.loads(json_path.read_text()), "failing": FAILING, "passing": PASSING}


@pytest.fixture
def tiny_doc(tiny_run) -> dict:
    return copy.deepcopy(tiny_run["doc"])


def _make_test(nodeid: str, outcome: str = "passed", kernels: int = 1, bytes_read: int = 4000,
              bytes_written: int = 4000, speedup: float | None = 2.0, fusion_ms: float = 1.0) -> dict:
    metrics = {"kernels": kernels, "externs": 0, "fallbacks": 0, "graph_breaks": 0, "graph_break_reasons": [],
               "launches": kernels, "launch_names": [], "bytes_read": bytes_read, "bytes_written": bytes_written,
               "peak_memory_bytes": None, "times_ms": {"fusion": [fusion_ms] * 3},
               "median_ms": {"fusion": fusion_ms}, "speedup": {"eager": speedup} if speedup else {},
               "compile_s": {"fusion": 0.1}, "bandwidth": None, "nvml": None}
    gate = {"marker": "expect_kernels", "expected": 1, "measured": kernels, "passed": kernels == 1, "message": ""}
    return {"nodeid": nodeid, "outcome": outcome, "duration_s": 0.5, "message": "", "gates": [gate],
            "graphs": [], "metrics": metrics, "baseline": None}


def _make_doc(tests: list[dict], device_class: str = "cpu", created: str = "2026-01-01T00:00:00+00:00",
             commit: str | None = "abc123") -> dict:
    from pytest_fusion.report import schema

    machine = {"hostname": "host", "python": "3.11", "torch": "2.13", "triton": None, "platform": "linux",
               "cpu": "cpu", "device": "cpu" if device_class == "cpu" else "cuda", "device_name": device_class,
               "device_class": device_class, "driver": None, "cuda": None}
    doc = schema.document(tests, machine, {"backend": "fusion"}, commit)
    doc["created"] = created
    return doc


@pytest.fixture
def make_test():
    """A test's result dict with the given figures (for merge and compare)."""
    return _make_test


@pytest.fixture
def make_doc():
    """A schema-valid report document holding the given tests."""
    return _make_doc


@pytest.fixture
def run_pytest():
    """run_pytest(folder, *args): pytest with the plugin in a subprocess."""
    return _run_pytest


@pytest.fixture
def write_tiny():
    """write_tiny(folder, ini=""): the tiny tests and a pytest.ini for them."""
    return _write_tiny
