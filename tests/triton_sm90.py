"""Compile rendered Triton kernels for an H100 (sm_90) with Triton's CUDA
backend, which needs no GPU: CI without one still runs Triton's real compiler
over the kernels it checks in the interpreter (which runs them as Python, and
lets through what the compiler rejects)."""
from __future__ import annotations

import os

from compiler.codegen.triton_backend import meta_of


def compile_for_h100(source: str, name: str, **config):
    """The rendered kernel compiled for an H100 (sm_90) by Triton's CUDA backend,
    which needs no GPU: `config` gives num_warps and the block sizes (default:
    the kernel's first configuration)."""
    from compiler.runtime.compile_workers import compile_kernel
    from compiler.runtime.triton_build import compile_options, load_module

    meta = meta_of(source)
    config = config or meta["configs"][0]
    fn = getattr(load_module(name, source, interpret=False)[0], name)
    dtypes = [a["dtype"] for a in meta["args"] + meta["workspace"]]
    blocks = {k: v for k, v in config.items() if k.endswith("BLOCK")}
    return compile_kernel(fn, dtypes, blocks, compile_options(meta, config), ("cuda", 90, 32))


def local_memory_accesses(compiled) -> int:
    """Loads and stores of local memory (spilled registers) in a kernel compiled
    by compile_for_h100, from its SASS."""
    import subprocess
    import tempfile

    from triton import knobs

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        sass = subprocess.run([knobs.nvidia.cuobjdump.path, "-sass", f.name], capture_output=True, text=True, check=True).stdout
    return sum(op in line for line in sass.splitlines() for op in (" STL", " LDL"))


def cannot_compile_for_h100() -> str | None:
    """Why kernels cannot be compiled for sm_90 here, or None."""
    try:
        from triton import knobs
    except ImportError:
        return "no triton"

    if os.environ.get("TRITON_INTERPRET") == "1":
        return "TRITON_INTERPRET=1 makes Triton's own helpers interpreted: they cannot be compiled"
    try:
        knobs.nvidia.ptxas.path  # the CUDA assembler, bundled with Triton's wheels
    except Exception as e:
        return f"no ptxas to compile for sm_90 here: {e}"
    return None


def require_compiler_for_h100() -> None:
    """Skip the test where kernels cannot be compiled for sm_90."""
    import pytest

    reason = cannot_compile_for_h100()
    if reason:
        pytest.skip(reason)


def compile_interpreted_for_h100(kernels) -> None:
    """Compile each Triton kernel for sm_90, with blocks of at most 64 (the CPU's
    large ones take seconds each to compile); nothing where Triton cannot."""
    if cannot_compile_for_h100():
        return
    for k in kernels:
        if k.target == "triton":
            blocks = {b: min(v, 64) for b, v in meta_of(k.source)["configs"][0].items() if b.endswith("BLOCK")}
            compile_for_h100(k.source, k.name, num_warps=4, **blocks)
