"""The Triton target: render a kernel module, build (compile, tune) it, and
launch it with one call per kernel: `name.run(*tensors)`."""
from __future__ import annotations

import ast

from ..runtime import triton_build
from . import triton

render = triton.render
# Triton assumes nothing about pointer aliasing (C++ kernels declare __restrict__),
# so a pointwise kernel may write over an input it reads at the same index
ALIASED_POINTERS_OK = True


def meta_of(source: str) -> dict:
    """The META dict a rendered module carries (launch configs, argument specs)."""
    for line in source.splitlines():
        if line.startswith("META = "):
            return ast.literal_eval(line[len("META = "):])
    raise ValueError("not a rendered Triton kernel module: no META line")


def build(name: str, source: str, kernel):
    return triton_build.build(name, source, meta_of(source))


def launch_code(kernel, arg_names) -> str:
    return f"{kernel.name}.run({', '.join(arg_names)})"
