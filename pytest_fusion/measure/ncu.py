"""DRAM bytes per call, measured by Nsight Compute (ncu) in a child process.

ncu profiles a whole process and slows every kernel it profiles, so the parent
re-runs the one test under ncu with --fusion-ncu-child: there the fixture wraps one
warm call of each compiled function in cudaProfilerStart/Stop (ncu runs with
--profile-from-start off) and skips timing and NVML. The parent sums the DRAM bytes
read and written over every kernel ncu saw: the total of a call, since per kernel
the L2 cache hides writes that reach DRAM later.
"""
from __future__ import annotations

import csv
import glob
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from .profile import MeasureError

METRICS = {"dram__bytes_read.sum": "read", "dram__bytes_write.sum": "write"}
# ncu costs about 3 s plus 24 ms a kernel, on top of the child's start and compile
TIMEOUT_S = 600
PLACES = ("/usr/local/cuda/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
# the child re-runs a test of this session: it must not write this session's report,
# traces or baselines, which ini keys may turn on
CHILD_INI = ("fusion_report=false", "fusion_report_path=", "fusion_json=", "fusion_trace_dir=",
             "fusion_baseline=false", "fusion_update=false", "fusion_strict=false", "fusion_min_geomean=")
HINTS = {
    "ERR_NVGPUCTRPERM": "this user may not read the GPU's performance counters: run as root, or load the "
                        "driver with NVreg_RestrictProfilingToAdminUsers=0",
    "LibraryNotLoaded": "ncu could not inject its library into the process (a sandbox such as gVisor?)",
}


def find() -> str:
    """The ncu executable: $FUSION_NCU, else PATH, else the CUDA toolkit's and Nsight Compute's folders."""
    override = os.environ.get("FUSION_NCU")
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise MeasureError(f"--fusion-ncu: FUSION_NCU={override} is not an executable file")
    found = shutil.which("ncu")
    for pattern in PLACES:
        found = found or next((p for p in sorted(glob.glob(pattern), reverse=True) if os.access(p, os.X_OK)), None)
    if found is None:
        raise MeasureError("--fusion-ncu needs Nsight Compute: ncu is not on PATH, in /usr/local/cuda/bin or in "
                           "/opt/nvidia/nsight-compute/*/ (install it, or set FUSION_NCU=/path/to/ncu)")
    return found


def profiled_call(call, device: torch.device, warmup: int) -> None:
    """The child's side: one warm call, the only thing ncu profiles."""
    for _ in range(warmup):
        call()
    torch.cuda.synchronize(device)
    torch.cuda.profiler.start()
    try:
        call()
        torch.cuda.synchronize(device)
    finally:
        torch.cuda.profiler.stop()


def parse_csv(text: str) -> dict:
    """{"read", "write", "kernels"} from ncu's --csv --print-units base output: bytes
    summed over every kernel. Lines before the header ("==PROF==", the program's
    output) and rows of other metrics are skipped."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"') and '"Metric Value"' in line), None)
    if start is None:
        raise MeasureError("ncu printed no CSV table")
    total = {"read": 0, "write": 0}
    kernels = set()
    for row in csv.DictReader(lines[start:]):
        key = METRICS.get(row.get("Metric Name"))
        if key is None:
            continue
        if row["Metric Unit"] not in ("byte", "bytes"):
            raise MeasureError(f"ncu reported {row['Metric Name']} in {row['Metric Unit']!r}, not bytes")
        try:
            value = float(row["Metric Value"].replace(",", ""))  # thousands separators
        except ValueError:
            raise MeasureError(f"ncu reported {row['Metric Name']} = {row['Metric Value']!r} "
                               f"for kernel {row.get('Kernel Name')}") from None
        total[key] += int(value)
        kernels.add((row.get("Process ID"), row["ID"]))
    return {**total, "kernels": len(kernels)}


def _child_env(device: torch.device) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS" and not k.startswith("PYTEST_XDIST")}
    # the GPU this test ran on, as the child's only one
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = visible.split(",") if visible else [str(i) for i in range(torch.cuda.device_count())]
    env["CUDA_VISIBLE_DEVICES"] = ids[device.index if device.index is not None else torch.cuda.current_device()]
    return env


def _pythonpath(config) -> str:
    """This package's root first (the child imports pytest_fusion), then $PYTHONPATH made absolute."""
    root = Path(__file__).resolve().parents[2]
    here = config.invocation_params.dir
    rest = [str(here / p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    return os.pathsep.join([str(root), *rest])


def command(ncu: str, config, nodeid: str, settings, log: str) -> list[str]:
    cmd = [ncu, "--profile-from-start", "off", "--clock-control", "none", "--target-processes", "all",
           "--metrics", ",".join(METRICS), "--csv", "--print-units", "base", "--log-file", log,
           sys.executable, "-m", "pytest", "-p", "pytest_fusion", nodeid, "--fusion-ncu-child", "-q",
           "-p", "no:cacheprovider", f"--rootdir={config.rootpath}", f"--import-mode={config.option.importmode}",
           # addopts may fan out (xdist) or write files (--junitxml); the test's own settings follow
           "-o", "addopts=", "--fusion-device=cuda", f"--fusion-backend={settings.backend}",
           f"--fusion-warmup={settings.warmup}", f"--fusion-tolerance-scale={settings.tolerance_scale}"]
    for kv in CHILD_INI:
        cmd += ["-o", kv]
    if config.inipath is not None:
        cmd += ["-c", str(config.inipath)]
    return cmd


def _tail(text: str, n: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-n:])


def measure_dram(ncu: str, config, nodeid: str, settings, device: torch.device) -> dict:
    """Run `nodeid` under ncu in a child process: {"read", "write", "kernels"} of its measured calls."""
    with tempfile.TemporaryDirectory(prefix="fusion-ncu-") as tmp:
        log = os.path.join(tmp, "ncu.log")
        cmd = command(ncu, config, nodeid, settings, log)
        env = dict(_child_env(device), PYTHONPATH=_pythonpath(config))
        # a session of its own: a timeout kills ncu and the test process under it
        with subprocess.Popen(cmd, cwd=config.rootpath, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", start_new_session=True) as proc:
            try:
                out, _ = proc.communicate(timeout=TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                out, _ = proc.communicate()
                raise MeasureError(f"ncu did not finish {nodeid} in {TIMEOUT_S} s:\n{_tail(out)}") from None
        ncu_out = Path(log).read_text(errors="replace") if os.path.exists(log) else ""
    shown = f"ncu's output:\n{_tail(ncu_out)}\nthe test's output:\n{_tail(out)}"
    hint = next((f" ({h})" for key, h in HINTS.items() if key in ncu_out + out), "")
    if proc.returncode != 0 or "==ERROR==" in ncu_out:
        raise MeasureError(f"ncu failed on {nodeid} (exit {proc.returncode}){hint}: {shlex.join(cmd)}\n{shown}")
    try:
        dram = parse_csv(ncu_out)
    except MeasureError as e:
        raise MeasureError(f"{e}{hint}\n{shown}") from None
    if dram["kernels"] == 0:
        raise MeasureError(f"ncu captured no kernel in the measured calls of {nodeid}{hint}\n{shown}")
    return dram
