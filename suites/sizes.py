"""Sizes and byte budgets of the suites.

The suites run small, odd sizes on the CPU (fast CI, edge cases) and large ones on
CUDA (where speed is gated). Markers are evaluated at import, so the device is
fixed before the test modules load: suites/conftest.py sets it from --fusion-device.

A byte budget is what a call must move at the least (each input read once, each
output written once, plus what the algorithm cannot avoid, stated at the call
site) with modest slack for small buffers such as per-row statistics.
"""
from __future__ import annotations

import math

import torch

# "cpu" or "cuda"; suites/conftest.py sets it in pytest_configure
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
SLACK = 0.05

F32, BF16 = 4, 2
ITEMSIZE = {torch.float32: F32, torch.bfloat16: BF16}


def pick(cpu, cuda):
    """The size for the device the suites run on."""
    return cuda if DEVICE == "cuda" else cpu


def numel(shape) -> int:
    return math.prod(shape) if isinstance(shape, tuple) else shape


def budget(*, read: int, write: int, slack: float = SLACK) -> int:
    """Bytes a call may move: read + written, plus slack. For max_memory_traffic."""
    return math.ceil((read + write) * (1 + slack))
