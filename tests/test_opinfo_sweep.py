"""scripts/opinfo_sweep.py, run as the README gives it, on a few ops."""
from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


@pytest.mark.parametrize("backward", [False, True], ids=["forward", "backward"])
def test_the_opinfo_sweep_compares_samples_with_eager(backward):
    pytest.importorskip("expecttest", reason="torch's OpInfo database needs expecttest (the dev extras install it)")
    cmd = [sys.executable, "scripts/opinfo_sweep.py", "--dtype", "float32", "--only", "scatter_add,hardshrink,cumsum",
           "--jobs", "2", *(["--backward"] if backward else [])]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = re.search(r"^cpu float32( backward)?: (\{.*\})$", proc.stdout, re.M)
    assert summary, proc.stdout
    totals = ast.literal_eval(summary.group(2))
    assert totals.get("samples", 0) >= 6 and totals.get("match") == totals["samples"], proc.stdout
