"""The workloads the suites gate: the seed examples and the patterns of real models.

Plain PyTorch, no pytest: the benchmark and the docs can import them too.
"""
from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


# --- pointwise chains -------------------------------------------------------

def sin_chain(x):
    return ((x + 1) * 2).sin()


def gelu_tanh(x):
    # written out as the hand-written CUDA kernel computes it
    return 0.5 * x * (1 + torch.tanh(0.79788456 * (x + 0.044715 * x * x * x)))


def relu_sigmoid_tanh(x):
    return x.relu() + x.sigmoid() * x.tanh()


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


# --- matmuls with pointwise around them --------------------------------------

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


class MLPBlock(nn.Module):
    """Pre-norm transformer MLP: x + fc2(gelu(fc1(layer_norm(x))))."""

    def __init__(self, dim=256, hidden=1024):
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.norm(x))))


def attention(q, k, v):
    """softmax(Q K^T / sqrt(d)) V over [batch, heads, seq, head_dim]."""
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return scores.softmax(dim=-1) @ v


class MLP(nn.Module):
    """The small MLP of the training step."""

    def __init__(self, dim=128, hidden=256, classes=10):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, classes)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


# --- the seeds' graph-break and reduction examples ---------------------------

def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:  # data-dependent branch: Dynamo breaks the graph here
        b = b * -1
    return x * b


def ceil_floor_softmax(a, b):
    x = a.ceil() + b.floor()
    y = x.sum(dim=-1)
    z = y.softmax(dim=-1)
    return (z * 10) ** 3


def rms_norm(x, weight):
    return F.rms_norm(x, (x.shape[-1],), weight)
