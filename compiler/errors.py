"""Errors the compiler raises to its users."""
from __future__ import annotations

from pathlib import Path


class FusionCompilerError(RuntimeError):
    pass


class KernelCompileError(FusionCompilerError):
    """Generated code did not build: names the kernel and where its source is."""

    def __init__(self, kernel: str, log: str, source_path: Path | None):
        self.kernel = kernel
        self.log = log
        self.source_path = source_path
        where = f"\n  source: {source_path}" if source_path else ""
        super().__init__(f"kernel {kernel} failed to compile{where}\n{log}")
