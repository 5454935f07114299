"""A small libdevice for the compile workers to link.

Triton links libdevice into each kernel that calls one of its functions (tl.sin,
libdevice.tanh, pow, ...), and parses the whole library to do it: 480 KB of
bitcode, 33-58 ms of such a kernel's compile for sm_90 (Triton 3.6 and 3.9, on
this project's 2-core CI machine). A compile worker links a library of the
float32 functions kernels call instead, built once from libdevice itself (their
code as Triton would link it, so the kernel compiles to the same PTX and cubin),
kept in the cache and parsed in about 10 ms. A kernel that calls any other
function (float64's) links the whole library. H200 host, cold compile of the
graph, median of 3 fresh processes each: sin chain 10M 0.237 -> 0.181 s,
tanh-GELU 0.158 -> 0.123, relu + sigmoid * tanh 0.190 -> 0.153.

A worker (runtime/compile_workers.py) loads this file by its path and imports
Triton only, as the worker does."""
from __future__ import annotations

import hashlib
import os
import re
import sys
import tempfile

# the float32 functions of libdevice that Triton's math (tl.sin, tl.cos, tl.erf) and
# our codegen's (triton_ops.unary and binary) call, by signature
UNARY = ("sinf", "cosf", "tanf", "asinf", "acosf", "atanf", "sinhf", "coshf", "tanhf", "asinhf", "acoshf", "atanhf",
         "expf", "exp2f", "exp10f", "expm1f", "logf", "log2f", "log10f", "log1pf", "erff", "erfcf", "erfinvf",
         "lgammaf", "tgammaf", "truncf", "nearbyintf", "rintf", "sqrtf", "rsqrtf", "cbrtf")
BINARY = ("powf", "fmodf", "atan2f", "hypotf", "copysignf", "nextafterf", "fmul_rn", "fdiv_rn")
TO_INT = ("signbitf",)


def _declarations() -> str:
    """An MLIR module declaring the functions, for libdevice to be linked into."""
    lines = [f"llvm.func @__nv_{f}(f32) -> f32" for f in UNARY]
    lines += [f"llvm.func @__nv_{f}(f32, f32) -> f32" for f in BINARY]
    lines += [f"llvm.func @__nv_{f}(f32) -> i32" for f in TO_INT]
    return "module {\n" + "".join(f"  {line}\n" for line in lines) + "}\n"


def _build(full: str) -> str:
    """The functions' code linked out of the library at `full`, as LLVM IR text in
    which they can be linked again: Triton's link leaves what it linked internal."""
    from triton._C.libtriton import ir, llvm

    context = ir.context()
    ir.load_dialects(context)
    with tempfile.TemporaryDirectory(prefix="fusion-libdevice-") as d:
        path = os.path.join(d, "declarations.mlir")
        with open(path, "w") as f:
            f.write(_declarations())
        module = llvm.to_module(ir.parse_mlir_module(path, context), llvm.context())
    _LINK(module, [full])
    return re.sub(r"^define internal ", "define ", str(module), flags=re.M)


def _defined(text: str) -> frozenset:
    return frozenset(re.findall(r"^define [^@\n]*@(__nv_\w+)\(", text, re.M))


class SlimLink:
    """Triton's llvm.link_extern_libs, linking the small library where it has all
    that a kernel calls. Each library it stands in for is built once into
    `directory` (named by the library's content and this file's list), or read
    from there; one that cannot be built or read is linked whole from then on."""

    def __init__(self, directory: str):
        self.directory = directory
        self.libs: dict = {}  # whole library's path -> (small one's path, functions it defines) or None
        self.linked_small = 0  # kernels linked with the small library (tests read it)

    def __call__(self, module, paths):
        try:
            needed = {f.name for f in module.get_functions() if f.is_declaration() and f.name.startswith("__nv_")}
        except Exception:  # a Triton without these bindings: the whole library
            needed = set()
        whole = len(paths) == 1 and os.path.basename(paths[0]).startswith("libdevice")  # CUDA's, alone
        small = self._small(paths[0]) if whole and needed else None
        if small is not None and needed <= small[1]:
            try:
                _LINK(module, [small[0]])
                self.linked_small += 1
                return
            except Exception as e:  # a file broken since it was written: the whole library
                self.libs[paths[0]] = None
                print(f"pytest-fusion compile worker: {small[0]}: {e}; linking libdevice whole", file=sys.stderr)
        _LINK(module, paths)

    def _small(self, full: str):
        if full not in self.libs:
            try:
                self.libs[full] = self._load_or_build(full)
            except Exception as e:
                self.libs[full] = None
                print(f"pytest-fusion compile worker: no small libdevice ({type(e).__name__}: {e})", file=sys.stderr)
        return self.libs[full]

    def _load_or_build(self, full: str):
        import triton

        with open(full, "rb") as f:
            key = hashlib.sha256(f.read() + _declarations().encode() + triton.__version__.encode()).hexdigest()[:20]
        path = os.path.join(self.directory, f"libdevice-f32-{key}.ll")
        text = None
        if os.path.exists(path):
            with open(path) as f:
                text = f.read()
        if not text or not _defined(text):  # missing, or cut short
            text = _build(full)
            os.makedirs(self.directory, exist_ok=True)
            tmp = f"{path}.{os.getpid()}.tmp"
            with open(tmp, "w") as f:
                f.write(text)
            os.replace(tmp, path)  # whole or not at all, for other workers reading it
        return path, _defined(text)


_LINK = None  # Triton's own link


def install(directory: str) -> SlimLink:
    """Make this process's Triton link kernels with the small library."""
    global _LINK
    from triton._C.libtriton import llvm

    if _LINK is None:
        _LINK = llvm.link_extern_libs
    link = SlimLink(directory)
    llvm.link_extern_libs = link
    return link


def uninstall() -> None:
    from triton._C.libtriton import llvm

    if _LINK is not None:
        llvm.link_extern_libs = _LINK
