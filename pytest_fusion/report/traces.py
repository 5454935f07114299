"""torch.profiler traces of the measured calls, for TensorBoard and Perfetto.

Layout: DIR/<test>/<label>.pt.trace.json.gz. TensorBoard's PyTorch profiler plugin
(torch-tb-profiler) takes each folder holding *.pt.trace.json[.gz] files as a run and
each file as a worker, so a test is a run and its eager/fusion/inductor calls are its
workers. Perfetto (ui.perfetto.dev) and chrome://tracing open the same files.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import os
import re
import tempfile

from .schema import write_atomic

# torch-tb-profiler 0.4.3 predates these categories; unknown, its events are dropped
# and the operator view shows no GPU time. Under the name it knows they are counted.
CATEGORY_MAP = {"cuda_runtime": "runtime", "cuda_driver": "runtime"}


def _slug(text: str) -> str:
    """A folder or file name for `text`. Where characters were dropped or the name
    cut, a short hash of `text` follows, so ids such as "a b" and "a:b" stay apart."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", text).strip("_.")[:150] or "test"
    if slug == text:
        return slug
    return f"{slug}-{hashlib.sha1(text.encode()).hexdigest()[:8]}"


def trace_path(trace_dir: str | os.PathLike, nodeid: str, label: str) -> str:
    """Where a test's trace goes: one folder (TensorBoard run) per test, one file
    (worker) per label such as "fusion", "eager" or "inductor"."""
    return os.path.join(os.fspath(trace_dir), _slug(nodeid), f"{_slug(label)}.pt.trace.json.gz")


def fix_categories(trace: dict) -> dict:
    """A copy of the trace with the categories torch-tb-profiler does not know renamed
    (the input is left alone: the plugin may still be reading it)."""
    events = [dict(ev, cat=CATEGORY_MAP[ev["cat"]]) if isinstance(ev, dict) and ev.get("cat") in CATEGORY_MAP
              else ev for ev in trace.get("traceEvents", [])]
    return dict(trace, traceEvents=events)


def _read(path: str) -> dict:
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return json.load(f)


def _write(trace: dict, path: str) -> None:
    write_atomic(path, lambda f: json.dump(trace, f), gzip.open if path.endswith(".gz") else open)


def save_trace(trace: dict, path: str | os.PathLike) -> str:
    """Write a chrome trace already exported from a profile (a dict, as json.load
    reads it) with its categories fixed. A profile exports once only (a second
    export_chrome_trace raises "Trace is already saved"), so a caller that reads
    the trace itself passes it here rather than to write_trace."""
    path = os.fspath(path)
    _write(fix_categories(trace), path)
    return path


def rewrite_trace(src: str | os.PathLike, dst: str | os.PathLike) -> str:
    """Copy a chrome trace file (.json or .json.gz) with its categories fixed."""
    return save_trace(_read(os.fspath(src)), dst)


def write_trace(prof, path: str | os.PathLike) -> str:
    """Write a finished torch.profiler.profile that nobody exported yet. `path`
    should end in .pt.trace.json or .pt.trace.json.gz (see trace_path). Returns
    the path written."""
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    try:
        prof.export_chrome_trace(tmp)
        return rewrite_trace(tmp, path)
    finally:
        os.unlink(tmp)
