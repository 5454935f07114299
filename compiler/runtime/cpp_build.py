"""Build C++ kernels into shared libraries (g++ -O3 -march=native -fopenmp),
cache them by content hash and load them with ctypes."""
from __future__ import annotations

import concurrent.futures
import ctypes
import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from ..errors import KernelCompileError
from .cache import cache_dir, content_hash, valid_entry, write_entry

# -ffp-contract=off, as Inductor: a fused multiply-add keeps a*b unrounded, so a*b - mean
# over one element is a rounding error instead of eager's exact 0 (std over it gave inf, not nan)
# C++14, not 17: the C++17 <cmath> (special functions) alone triples the time g++ takes per kernel
FLAGS = ["-O3", "-march=native", "-ffp-contract=off", "-fopenmp", "-fno-math-errno", "-fno-trapping-math",
         "-shared", "-fPIC", "-std=c++14", "-w"]
LIBS = ["-lmvec", "-lm"]


@functools.lru_cache(None)
def compiler_id() -> str:
    cxx = os.environ.get("CXX", "g++")
    if shutil.which(cxx) is None:
        raise KernelCompileError("no C++ compiler", f"{cxx} was not found on PATH; set CXX or install g++", None)
    out = subprocess.run([cxx, "--version"], capture_output=True, text=True).stdout.splitlines()[0]
    return f"{cxx}|{out}|{' '.join(FLAGS)}"


def build(name: str, source: str) -> tuple[ctypes.CDLL, Path, bool]:
    """The loaded library for `source`; returns (lib, source path, cache hit)."""
    lib, src_path, hit = submit(name, source)
    return lib.result(), src_path, hit


# g++ runs in a subprocess, so threads build a graph's kernels in parallel
_POOL = concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 1, thread_name_prefix="fusion-cxx")


def submit(name: str, source: str) -> tuple[concurrent.futures.Future, Path, bool]:
    """Like build, but a cache miss builds in the background: returns
    (future of the lib, source path, cache hit)."""
    key = content_hash(compiler_id(), source)
    entry_dir = cache_dir() / "cpp" / key[:2]
    so_path = entry_dir / f"{key}.so"
    src_path = entry_dir / f"{key}_{name}.cpp"
    if not src_path.exists():
        write_entry(src_path, source.encode())
    if valid_entry(so_path):
        try:
            done: concurrent.futures.Future = concurrent.futures.Future()
            done.set_result(ctypes.CDLL(str(so_path)))
            return done, src_path, True
        except OSError:
            pass  # unloadable despite its digest: rebuild
    return _POOL.submit(_build_and_load, name, source, src_path, so_path), src_path, False


def _build_and_load(name: str, source: str, src_path: Path, so_path: Path) -> ctypes.CDLL:
    write_entry(so_path, _compile(name, source, src_path))
    return ctypes.CDLL(str(so_path))


def _compile(name: str, source: str, src_path: Path) -> bytes:
    cxx = os.environ.get("CXX", "g++")
    with tempfile.TemporaryDirectory(prefix="fusion-build-") as tmp:
        src = Path(tmp) / f"{name}.cpp"
        src.write_text(source)
        out = Path(tmp) / f"{name}.so"
        proc = subprocess.run([cxx, *FLAGS, str(src), "-o", str(out), *LIBS], capture_output=True, text=True)
        if proc.returncode != 0:
            raise KernelCompileError(name, proc.stderr[-4000:], src_path)
        return out.read_bytes()
