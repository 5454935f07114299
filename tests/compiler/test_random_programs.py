"""Random programs, compiled on every target and compared with eager: seeded
chains of pointwise ops, reductions that broadcast back, softmaxes, selects,
transposed, flipped, rolled and gathered reads and int32 arithmetic, computed in
float32 from float32 or bfloat16 inputs. Each fuses differently (several outputs,
intermediates read again by later reductions, rows reduced along any dim), so
together they reach scheduler and codegen paths no hand-written case names.
Values stay bounded (every op maps [-2, 2] into itself) and selects and integer
ops read raw inputs only, so a seed that fails is a bug, not rounding; the
failure prints the program. FUSION_RANDOM_PROGRAMS=N runs N programs (default 24)."""
from __future__ import annotations

import math
import os
import random

import pytest
import torch

pytestmark = pytest.mark.usefixtures("fresh_dynamo")

UNARY = {
    "tanh": torch.tanh, "sin": torch.sin, "sigmoid": torch.sigmoid, "relu": torch.relu,
    "sqrt|x|": lambda x: x.abs().sqrt(), "exp(-|x|)": lambda x: torch.exp(-x.abs()),
    "x*x/2": lambda x: x * x * 0.5, "clamp": lambda x: x.clamp(-0.5, 0.5), "-x": torch.neg,
}
BINARY = {
    "(a+b)/2": lambda a, b: (a + b) * 0.5, "a*b/2": lambda a, b: a * b * 0.5, "(a-b)/2": lambda a, b: (a - b) * 0.5,
    "maximum": torch.maximum, "minimum": torch.minimum, "a/(1+|b|)": lambda a, b: a / (1 + b.abs()),
}
# x, dim -> a value broadcastable against x (keepdim), or of x's shape
REDUCE = {
    "mean": lambda x, d: x.mean(d, keepdim=True), "amax": lambda x, d: x.amax(d, keepdim=True),
    "amin": lambda x, d: x.amin(d, keepdim=True), "std": lambda x, d: x.std(d, keepdim=True, correction=0),
    "softmax": lambda x, d: x.softmax(d), "x-mean": lambda x, d: x - x.mean(d, keepdim=True),
    "logsumexp-log(n)": lambda x, d: torch.logsumexp(x, d, keepdim=True) - math.log(x.shape[d]),
    "sum/n": lambda x, d: x.sum(d, keepdim=True) / x.shape[d],
}
SHAPES = [(3, 37, 37), (5, 19, 19), (2, 3, 9001), (64, 2, 129)]
# a fixed set in CI; FUSION_RANDOM_PROGRAMS=500 searches further
PROGRAMS = int(os.environ.get("FUSION_RANDOM_PROGRAMS", 24))


def make_program(seed: int):
    """(fn, inputs, description): fn(*inputs) returns three of the values it computes."""
    rng = random.Random(seed)
    shape = SHAPES[seed % len(SHAPES)]
    gen = torch.Generator().manual_seed(seed)
    # every other program loads bfloat16 and stores it: converted at the edges only,
    # where eager rounds as we do (inside, eager would round after every op)
    dtype = torch.bfloat16 if seed % 2 else torch.float32
    inputs = [(torch.rand(shape, generator=gen) * 4 - 2).to(dtype) for _ in range(3)]
    if shape[1] == shape[2]:  # one input read through transposed strides
        inputs[2] = inputs[2].transpose(1, 2)
    steps = []  # (text, fn over the values so far)
    for _ in range(rng.randint(5, 10)):
        kind = rng.choice(["unary", "binary", "binary", "reduce", "reduce", "select", "transpose", "gather", "roll",
                           "integer"])
        n = 3 + len(steps)  # values so far: the inputs, then each step's
        i, j = rng.randrange(n), rng.randrange(n)
        if kind == "unary":
            name = rng.choice(sorted(UNARY))
            steps.append((f"{name}(v{i})", lambda v, f=UNARY[name], i=i: f(v[i])))
        elif kind == "binary":
            name = rng.choice(sorted(BINARY))
            steps.append((f"{name}(v{i}, v{j})", lambda v, f=BINARY[name], i=i, j=j: f(v[i], v[j])))
        elif kind == "reduce":
            name, d = rng.choice(sorted(REDUCE)), rng.randrange(3)
            # a reduced value (a dim of 1) broadcasts: reduce the full-shape value it is added to
            steps.append((f"{name}(v{i} + v{j}, dim={d})",
                          lambda v, f=REDUCE[name], i=i, j=j, d=d: f(torch.broadcast_to(v[i] + v[j], shape) * 0.5, d)))
        elif kind == "select":  # on a raw input: a computed condition could flip on rounding
            c = rng.randrange(3)
            steps.append((f"where(v{c} > 0, v{i}, v{j})", lambda v, c=c, i=i, j=j: torch.where(v[c] > 0, v[i], v[j])))
        elif kind == "gather":  # rows in a random order: an index read from memory
            d = rng.randrange(3)
            perm = torch.randperm(shape[d], generator=gen)

            def gather(v, i=i, d=d, perm=perm):
                return torch.broadcast_to(v[i], shape).index_select(d, perm.to(v[i].device))
            steps.append((f"v{i}.index_select({d}, perm)", gather))
        elif kind == "roll":  # two slices concatenated
            d, k = rng.randrange(3), rng.randrange(1, 4)
            steps.append((f"roll(v{i}, {k}, dim={d})",
                          lambda v, i=i, d=d, k=k: torch.roll(torch.broadcast_to(v[i], shape), k, d)))
        elif kind == "integer":  # int32 arithmetic on a raw input (exact), back to float
            c = rng.randrange(3)
            steps.append((f"(floor(v{c} * 8) % 5) / 4", lambda v, c=c: ((v[c] * 8).floor().int() % 5).float() * 0.25))
        elif shape[1] == shape[2]:
            steps.append((f"v{i}.transpose(1, 2)", lambda v, i=i: v[i].transpose(1, 2)))
        else:
            steps.append((f"v{i}.flip(1)", lambda v, i=i: v[i].flip(1)))
    last = len(steps) + 2
    outs = sorted({last, last - 1, rng.randrange(3, last + 1)})

    def fn(*xs):
        v = [x.float() for x in xs]
        for _, f in steps:
            v.append(f(v))
        return tuple(v[k].to(dtype) for k in outs)

    text = "; ".join(f"v{3 + k} = {t}" for k, (t, _) in enumerate(steps))
    return fn, inputs, f"{list(shape)} {dtype}: {text}; returns {', '.join(f'v{k}' for k in outs)}"


@pytest.mark.parametrize("seed", range(PROGRAMS))
def test_random_program(check_on_every_target, seed):
    fn, inputs, text = make_program(seed)
    try:
        cap = check_on_every_target(fn, *inputs)
    except AssertionError as e:
        raise AssertionError(f"program {seed}: {text}\n{e}") from None
    assert not cap.fallbacks, (text, [f"{f.op}: {f.reason}" for f in cap.fallbacks])
    assert cap.kernels, text
