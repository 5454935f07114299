"""The C++ target: render, build with g++, and launch through ctypes."""
from __future__ import annotations

import ctypes

import torch

from ..runtime import cpp_build
from . import cpp

render = cpp.render
# kernels declare their pointers __restrict__: no output may alias an input
ALIASED_POINTERS_OK = False


def build(name: str, source: str, kernel):
    """Starts the build (a cache miss compiles in the background); `wait` finishes it."""
    lib, path, hit = cpp_build.submit(name, source)
    nargs = source.split(f"void {name}(", 1)[1].split(")", 1)[0].count("__restrict__")
    return _launcher(name, lib, nargs, flags_faults="fusion_nz<" in source or "fusion_in_range(" in source), path, hit


def wait(launchers) -> None:
    """Called once a graph's kernels are all submitted: finish building them."""
    for launch in launchers:
        launch.finish()


def _launcher(name: str, lib, nargs: int, flags_faults: bool):
    """C++ kernels are invisible to torch.profiler: under it, launch inside a range
    named after the kernel (launch counts, traces); otherwise call straight through."""
    profiling = torch._C._autograd._profiler_enabled
    record = torch.profiler.record_function
    fn = None

    def finish():
        nonlocal fn
        fn = getattr(lib.result(), name)
        fn.restype = None
        fn.argtypes = [ctypes.c_void_p] * nargs
        if flags_faults:
            fn = _raising_on_faults(fn, lib.result().fusion_take_fault, name)

    def launch(*args):
        if profiling():
            with record(name):
                return fn(*args)
        return fn(*args)

    launch.finish = finish
    return launch


# what a kernel's fusion_fault flag holds -> the error ATen raises
FAULTS = {
    1: lambda name: ZeroDivisionError(f"integer division by zero in kernel {name}"),
    2: lambda name: IndexError(f"index out of range in kernel {name}: an index tensor holds a value "
                               "outside the size of the dim it indexes"),
}


def _raising_on_faults(fn, take_flag, name: str):
    def checked(*args):
        fn(*args)
        fault = take_flag()
        if fault:
            raise FAULTS[fault](name)
    return checked


def launch_code(kernel, arg_names) -> str:
    return f"{kernel.name}({', '.join(n + '.data_ptr()' for n in arg_names)})"
