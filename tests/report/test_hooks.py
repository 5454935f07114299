"""The report options and xdist: one report from all workers."""
import json

import pytest


def test_default_path_json_beside_html_and_terminal_lines(tiny_run):
    out = tiny_run["proc"].stdout
    assert f"HTML: {tiny_run['html']}" in out and f"JSON: {tiny_run['json']}" in out


def test_json_alone_writes_no_html(tmp_path, run_pytest, write_tiny):
    write_tiny(tmp_path)
    proc = run_pytest(tmp_path, "--fusion-json=r.json", "-k", "sin_chain")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert json.loads((tmp_path / "r.json").read_text())["tests"][0]["outcome"] == "passed"
    assert not (tmp_path / "reports").exists()


def test_no_option_writes_nothing(tmp_path, run_pytest, write_tiny, monkeypatch):
    # ours alone: other installed plugins may write files of their own (pytest-benchmark's .benchmarks)
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    write_tiny(tmp_path)
    proc = run_pytest(tmp_path, "-k", "plain")
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "fusion report" not in proc.stdout
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pytest.ini", "test_tiny.py"]


@pytest.mark.slow
def test_xdist_workers_make_one_report(tmp_path, run_pytest, write_tiny, tiny_run):
    pytest.importorskip("xdist")
    write_tiny(tmp_path)
    proc = run_pytest(tmp_path, "-n", "2", "--fusion-report", "--fusion-report-path=x/report.html")
    assert proc.returncode == 1, proc.stdout[-3000:]
    doc = json.loads((tmp_path / "x" / "report.json").read_text())
    assert sorted(t["nodeid"] for t in doc["tests"]) == sorted(t["nodeid"] for t in tiny_run["doc"]["tests"])
    by_id = {t["nodeid"]: t for t in doc["tests"]}
    assert by_id[tiny_run["failing"]]["outcome"] == "failed"
    assert by_id[tiny_run["failing"]]["graphs"][0]["kernels"], "graphs must travel from the worker"
    assert (tmp_path / "x" / "report.html").exists()


@pytest.mark.parametrize("option", ["--fusion-json=afile/fusion.json", "--fusion-json=adir"])
def test_unwritable_json_is_reported_not_a_crash(tmp_path, run_pytest, write_tiny, option):
    """A JSON path under a regular file, or onto a folder: the run's summary stays,
    the failure is one line, and no temporary file is left behind."""
    write_tiny(tmp_path)
    (tmp_path / "afile").write_text("")
    (tmp_path / "adir").mkdir()
    proc = run_pytest(tmp_path, option, "-k", "sin_chain")
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "INTERNALERROR" not in out and "Traceback" not in out, out[-3000:]
    assert "fusion report failed" in proc.stdout and "JSON: " not in proc.stdout
    assert "1 passed" in proc.stdout and "= pytest-fusion =" in proc.stdout
    assert _files(tmp_path) == ["adir", "afile", "pytest.ini", "test_tiny.py"]
    assert list((tmp_path / "adir").iterdir()) == []


def test_unwritable_html_leaves_no_temporary(tmp_path, run_pytest, write_tiny):
    write_tiny(tmp_path)
    (tmp_path / "out.html").mkdir()  # the HTML cannot replace a folder
    proc = run_pytest(tmp_path, "--fusion-report-path=out.html", "-k", "sin_chain")
    assert proc.returncode == 1, proc.stdout[-3000:]
    assert "fusion report failed" in proc.stdout and "JSON: " in proc.stdout
    assert _files(tmp_path) == ["out.html", "out.json", "pytest.ini", "test_tiny.py"]


def _files(folder) -> list[str]:
    """What a run left in `folder`, less hidden folders other plugins make (.benchmarks)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
