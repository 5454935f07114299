"""The C++ target: render, build with g++, and launch through ctypes."""
from __future__ import annotations

import ctypes

import torch

from ..runtime import cpp_build
from . import cpp

render = cpp.render


def build(name: str, source: str, kernel):
    lib, path, hit = cpp_build.build(name, source)
    fn = getattr(lib, name)
    fn.restype = None
    fn.argtypes = None  # raw ints are passed as pointers by ctypes.c_void_p below
    nargs = source.split(f"void {name}(", 1)[1].split(")", 1)[0].count("__restrict__")
    fn.argtypes = [ctypes.c_void_p] * nargs
    return _ranged(name, fn), path, hit


def _ranged(name: str, fn):
    """C++ kernels are invisible to torch.profiler: under it, launch inside a range
    named after the kernel (launch counts, traces); otherwise call straight through."""
    profiling = torch._C._autograd._profiler_enabled
    record = torch.profiler.record_function

    def launch(*args):
        if profiling():
            with record(name):
                return fn(*args)
        return fn(*args)

    return launch


def launch_code(kernel, arg_names) -> str:
    return f"{kernel.name}({', '.join(n + '.data_ptr()' for n in arg_names)})"
