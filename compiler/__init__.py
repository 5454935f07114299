"""pytest-fusion's compiler: an Inductor-like PyTorch compiler of our own.

    import torch, compiler
    fn = torch.compile(f, backend="fusion")
    with compiler.capture() as cap:
        fn(x)
    cap.kernels  # what was generated, with fused ATen ops, bytes and source
"""
from .backend import fusion_backend, register
from .config import config
from .errors import FusionCompilerError, KernelCompileError
from .stats import CallRecord, Capture, GraphRecord, KernelRecord, capture, runs

register()

__all__ = [
    "fusion_backend", "config", "capture", "runs", "Capture", "GraphRecord", "KernelRecord", "CallRecord",
    "FusionCompilerError", "KernelCompileError",
]
