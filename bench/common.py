"""The seed workloads, shared by the CPU and GPU benchmarks, and small helpers.
Each workload builder takes a device and returns (fn, args): fn is a function or
an eval-mode module, args are random inputs (never zeros)."""
from __future__ import annotations

import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


def sin_chain(x):
    return ((x + 1) * 2).sin()


def tanh_gelu(x):
    # written out as in the hand-written CUDA/Triton kernels of the seeds
    return 0.5 * x * (1.0 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


def relu_sigmoid_tanh(x):
    return x.relu() + x.sigmoid() * x.tanh()


def softmax(x):
    return x.softmax(-1)


def rms_norm(x, w):
    return F.rms_norm(x, (x.shape[-1],), w)


def ceil_floor_softmax(a, b):
    w = ((a.ceil() + b.floor()).sum(-1).softmax(-1) * 10) ** 3
    return w


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:  # data-dependent: a graph break
        b = b * -1
    return x * b


class PointwiseModel(nn.Module):
    def __init__(self, dim=1024):
        super().__init__()
        self.scale1 = nn.Parameter(torch.randn(dim))
        self.bias1 = nn.Parameter(torch.randn(dim))
        self.scale2 = nn.Parameter(torch.randn(dim))
        self.bias2 = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = x * self.scale1 + self.bias1
        x = torch.relu(x)
        x = x * self.scale2 + self.bias2
        x = torch.sigmoid(x)
        x = x * 2.0 + 1.0
        return torch.tanh(x)


class MixedModel(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.linear1 = nn.Linear(dim, dim)
        self.linear2 = nn.Linear(dim, dim)
        self.scale = nn.Parameter(torch.randn(dim))
        self.bias = nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = self.linear1(x)
        x = x * self.scale + self.bias
        x = torch.relu(x)
        x = x * 0.5 + 0.5
        x = F.gelu(x)
        x = self.linear2(x)
        return torch.sigmoid(x)


def make(name: str, shape: tuple, device="cpu", dtype=torch.float32):
    """(fn, args) of the workload `name` at `shape` (the main input's shape)."""
    g = torch.Generator().manual_seed(0)

    def rand(*s):
        return torch.randn(*s, generator=g).to(device=device, dtype=dtype)

    if name in ("sin_chain", "tanh_gelu", "relu_sigmoid_tanh", "softmax"):
        return globals()[name], (rand(*shape),)
    if name == "pointwise_model":
        return PointwiseModel(shape[-1]).eval().to(device, dtype), (rand(*shape),)
    if name == "mixed_model":
        return MixedModel(shape[-1]).eval().to(device, dtype), (rand(*shape),)
    if name == "layer_norm":
        return nn.LayerNorm(shape[-1]).eval().to(device, dtype), (rand(*shape),)
    if name == "rms_norm":
        return rms_norm, (rand(*shape), rand(shape[-1]))
    if name == "ceil_floor_softmax":
        return ceil_floor_softmax, (rand(*shape), rand(*shape))
    if name == "toy_example":
        return toy_example, (rand(*shape), -rand(*shape).abs() - 0.1)  # b.sum() < 0: the branch runs
    raise KeyError(name)


def median(xs):
    return statistics.median(xs)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
