"""The seed workloads, shared by the CPU and GPU benchmarks, and small helpers.
Each workload builder takes a device and returns (fn, args): fn is a function or
an eval-mode module, args are random inputs (never zeros)."""
from __future__ import annotations

import math
import statistics

import torch
import torch.nn as nn
import torch.nn.functional as F


# the workloads are the suites' (one definition for suites, tests and benchmarks)
from suites.models import (  # noqa: E402
    MixedModel,
    PointwiseModel,
    ceil_floor_softmax,
    relu_sigmoid_tanh,
    rms_norm,
    sin_chain,
    toy_example,
)
from suites.models import gelu_tanh as tanh_gelu  # noqa: E402


def softmax(x):
    return x.softmax(-1)


def causal_softmax(scores, mask):
    """Attention's scaled, causally masked softmax (half the row is exp(-inf))."""
    return (scores * 0.125).masked_fill(mask, float("-inf")).softmax(-1)


def train_step(loss_of):
    """A training step on input x: its gradient zeroed, loss_of(x, *rest)
    backpropagated; returns the loss and x's gradient (both checked)."""
    def step(x, *rest):
        x.grad = None
        loss = loss_of(x, *rest)
        loss.backward()
        return loss.detach(), x.grad

    return step


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
    if name == "causal_softmax":
        return causal_softmax, (rand(*shape), torch.ones(shape[-2:], dtype=torch.bool, device=device).triu(1))
    if name in ("cross_entropy", "cross_entropy_train"):
        target = torch.randint(0, shape[-1], shape[:-1], generator=g).to(device)
        if name == "cross_entropy":
            return F.cross_entropy, (rand(*shape), target)
        return train_step(F.cross_entropy), (rand(*shape).requires_grad_(), target)
    if name == "layer_norm_train":
        ln = nn.LayerNorm(shape[-1]).to(device, dtype)
        return train_step(lambda x: ln(x).float().pow(2).mean()), (rand(*shape).requires_grad_(),)
    if name == "toy_example":
        return toy_example, (rand(*shape), -rand(*shape).abs() - 0.1)  # b.sum() < 0: the branch runs
    raise KeyError(name)


def median(xs):
    return statistics.median(xs)


def geomean(xs):
    xs = [x for x in xs if x and x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")
