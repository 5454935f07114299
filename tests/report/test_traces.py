"""Profiler traces: written where TensorBoard's PyTorch profiler plugin
(torch-tb-profiler 0.4.3) finds them, with the CUDA runtime/driver categories it
does not know renamed to "runtime" so that its operator view shows GPU time.

data/cuda_h200_raw.json.gz is a real torch.profiler chrome trace (torch 2.11,
CUDA 13, an H200: ((x + 1) * 2).sin().sum() three times) as torch exports it; this
machine has no GPU, so the GPU-time check loads that recording."""
import gzip
import json
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
import torch

from pytest_fusion.report.traces import fix_categories, rewrite_trace, save_trace, trace_path, write_trace

RAW_GPU = Path(__file__).parent / "data" / "cuda_h200_raw.json.gz"


def _events(path) -> list[dict]:
    with gzip.open(path, "rt") as f:
        return json.load(f)["traceEvents"]


def _cpu_profile():
    x = torch.randn(256, 256)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            (x.sin() * 2).sum()
    return prof


def test_write_trace_layout_and_content(tmp_path):
    path = write_trace(_cpu_profile(), trace_path(tmp_path, "suites/test_a.py::test_b[float32]", "fusion"))
    assert re.fullmatch(r"suites_test_a\.py_test_b_float32-[0-9a-f]{8}/fusion\.pt\.trace\.json\.gz",
                        Path(path).relative_to(tmp_path).as_posix())
    names = {e.get("name") for e in _events(path)}
    assert {"aten::sin", "aten::mul", "aten::sum"} <= names


def test_ids_that_differ_only_in_dropped_characters_get_their_own_folders(tmp_path):
    """Test ids "a b" and "a:b" slug alike; their traces must not overwrite each other."""
    folders = {Path(trace_path(tmp_path, f"t.py::test[{i}]", "fusion")).parent for i in ("a b", "a:b", "a_b")}
    assert len(folders) == 3
    assert Path(trace_path(tmp_path, "cpu", "fusion")).parent.name == "cpu"  # a plain name stays as it is


def test_cuda_categories_become_runtime(tmp_path):
    raw = _events(RAW_GPU)
    assert {"cuda_runtime", "kernel"} <= {e.get("cat") for e in raw}
    fixed = _events(rewrite_trace(RAW_GPU, tmp_path / "w.pt.trace.json.gz"))
    cats = [e.get("cat") for e in fixed]
    assert "cuda_runtime" not in cats and "cuda_driver" not in cats
    assert cats.count("runtime") == sum(e.get("cat") in ("cuda_runtime", "cuda_driver") for e in raw)
    assert len(fixed) == len(raw)
    original = {"traceEvents": [{"cat": "cuda_driver"}]}
    assert fix_categories(original)["traceEvents"][0]["cat"] == "runtime"
    assert original["traceEvents"][0]["cat"] == "cuda_driver"  # the caller's trace is left alone


def test_save_trace_of_an_exported_profile(tmp_path):
    """The plugin exports each measured call's trace once and keeps it as a dict."""
    with gzip.open(RAW_GPU, "rt") as f:
        trace = json.load(f)
    path = save_trace(trace, trace_path(tmp_path, "t.py::test", "fusion"))
    assert {e.get("cat") for e in _events(path)} >= {"runtime", "kernel"}


def _get(base: str, path: str):
    with urllib.request.urlopen(base + path, timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture
def tensorboard(tmp_path):
    """TensorBoard with torch-tb-profiler on a free local port, over tmp_path/logs."""
    pytest.importorskip("torch_tb_profiler", reason="pip install tensorboard torch-tb-profiler")
    tb = shutil.which("tensorboard", path=str(Path(sys.executable).parent))
    if tb is None:
        pytest.skip("no tensorboard executable next to this python")
    logdir = tmp_path / "logs"
    logdir.mkdir()
    proc = subprocess.Popen([tb, "--logdir", str(logdir), "--host", "127.0.0.1", "--port", "0", "--load_fast=false"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        yield logdir, proc
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _serve(proc, want: set[str]) -> str:
    """Base URL of the profiler plugin once TensorBoard has loaded every run in want."""
    base = None
    while base is None:
        line = proc.stdout.readline()
        if not line:
            raise AssertionError("TensorBoard exited before serving")
        m = re.search(r"(http://127\.0\.0\.1:\d+)/", line)
        if m:
            base = m.group(1) + "/data/plugin/pytorch_profiler"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        runs = _get(base, "/runs")
        if want <= set(runs["runs"]) and not runs["loading"]:
            return base
        time.sleep(0.5)
    raise AssertionError(f"TensorBoard did not load {want}: {runs}")


def test_tensorboard_loads_written_traces_and_shows_gpu_time(tensorboard):
    logdir, proc = tensorboard
    write_trace(_cpu_profile(), trace_path(logdir, "cpu", "fusion"))
    rewrite_trace(RAW_GPU, trace_path(logdir, "gpu", "fusion"))
    (logdir / "gpu_unmapped").mkdir()
    shutil.copy(RAW_GPU, logdir / "gpu_unmapped" / "fusion.pt.trace.json.gz")
    base = _serve(proc, {"cpu", "gpu", "gpu_unmapped"})

    def operators(run):
        assert _get(base, f"/workers?run={run}&view=Operator") == ["fusion"]
        return _get(base, f"/operation?run={run}&worker=fusion&span=default&view=Operator&group_by=Operation")

    cpu = operators("cpu")
    assert {"aten::sin", "aten::sum"} <= {row[0] for row in cpu["host_total_time"]["rows"]}
    gpu = operators("gpu")
    device = {name: us for name, us in gpu["device_total_time"]["rows"]}
    assert {"aten::add", "aten::mul", "aten::sin", "aten::sum"} <= set(device) and all(v > 0 for v in device.values())
    overview = _get(base, "/overview?run=gpu&worker=fusion&span=default&view=Overview")
    assert {"title": "Device Type", "value": "GPU"} in overview["environments"]
    # as torch writes it, the same trace shows no GPU time: the mapping is what fixes that
    assert operators("gpu_unmapped")["device_total_time"] is None
