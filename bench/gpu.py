"""GPU benchmark: eager vs ours (backend="fusion") vs TorchInductor, one process, one run.

    PYTHONPATH=. python bench/gpu.py [--out results.md] [--only softmax,gelu] [--quick]

For each workload and size: median time per call of each (CUDA events around
each call, warm-up first, compile excluded, the three interleaved round by round).
A call that moves >= 8 MB is timed on the device: the L2 cache is flushed and the
GPU kept busy while the host launches it. A smaller one starts on an idle GPU, so
its time is the whole per-call latency. Also: the ratios, kernels and launches
per call (torch.profiler), ours as a fraction of the memory floor (bytes the call
must move / measured device-to-device copy bandwidth; "floor copy" is the same
fraction for a plain device copy of the same bytes, timed like the call: what
launch latency and ramp-up leave of the floor at that size; "floor steady" is the
fraction for back-to-back calls over rotated copies of the inputs, the steady
state in which the copy bandwidth itself is measured), host time per call in a
loop of back-to-back calls (and, for small calls, ours replayed as a CUDA graph),
and cold compile time (first call, empty caches; the backends take turns
compiling first) of ours and Inductor: the median of --compile-rounds first calls,
each round after the first in a fresh process. Part of a first call is Dynamo's own
work (tracing the bytecode, building and profiling guards), the same whichever
backend it hands the graph to: a first call with Dynamo's "eager" backend, which
runs the graph as it is, less a plain eager call, times that part. "Backend
compile" is a backend's first call less it: the graph's compile (AOTAutograd with
the backend's decompositions, lowering, codegen, kernel builds, first-call tuning)
and run. A table is printed; markdown and JSON go
to --out (default $OUT/bench.md when $OUT is set)."""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time
import types


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_out = os.path.join(os.environ["OUT"], "bench.md") if os.environ.get("OUT") else "bench_results.md"
    p.add_argument("--out", default=default_out, help="markdown path; JSON is written beside it")
    p.add_argument("--only", default="", help="comma-separated workload name prefixes")
    p.add_argument("--set", default="seeds", choices=("seeds", "more"),
                   help="seeds: the issue's workloads (the committed table); more: common transformer patterns beyond them")
    p.add_argument("--quick", action="store_true", help="fewer timing rounds")
    p.add_argument("--smoke", action="store_true", help="CPU, tiny sizes: checks the script, not speed")
    p.add_argument("--warm-cache", action="store_true", help="keep compile caches (cold compile is then not cold)")
    p.add_argument("--compile-rounds", type=int, default=3,
                   help="cold compile time: the median of this many first calls, each in a fresh process")
    p.add_argument("--compile-only", metavar="JSON", help=argparse.SUPPRESS)  # one more such round, into JSON
    p.add_argument("--round", type=int, default=0, help=argparse.SUPPRESS)
    return p.parse_args(argv)


ARGS = parse_args() if __name__ == "__main__" else None
if ARGS is not None and not ARGS.warm_cache:
    # empty caches, set before torch/triton are imported, so compile times are cold
    _tmp = tempfile.mkdtemp(prefix="fusion-bench-")
    for var in ("TRITON_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "FUSION_CACHE_DIR"):
        os.environ[var] = os.path.join(_tmp, var.lower())

import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import compiler  # noqa: E402

FLUSH_MIN_BYTES = 8 << 20
# about 2 ms at 2 GHz: more than any call's host-side work, even right after the host
# waited long (eager's softmax(0) takes 78 ms): its next launches are slow. H200,
# softmax(0) [65536, 256] per call with 0.2 ms of this, ours: 62 us alone, 87-213 right
# after eager, 167-252 after a 78 ms host sleep (Inductor: 88, 184-198, 223-358);
# with 2 ms, ours 62.9 after eager and 62.2 after the sleep (Inductor 89.0, 87.8)
SLEEP_CYCLES = 4_000_000


# -- workloads ------------------------------------------------------------------------


class PointwiseModel(nn.Module):
    def __init__(self, dim=1024):
        super().__init__()
        self.scale1, self.bias1 = nn.Parameter(torch.randn(dim)), nn.Parameter(torch.randn(dim))
        self.scale2, self.bias2 = nn.Parameter(torch.randn(dim)), nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = torch.relu(x * self.scale1 + self.bias1)
        x = torch.sigmoid(x * self.scale2 + self.bias2)
        return torch.tanh(x * 2.0 + 1.0)


class MixedModel(nn.Module):
    def __init__(self, dim=512):
        super().__init__()
        self.linear1, self.linear2 = nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.scale, self.bias = nn.Parameter(torch.randn(dim)), nn.Parameter(torch.randn(dim))

    def forward(self, x):
        x = torch.relu(self.linear1(x) * self.scale + self.bias) * 0.5 + 0.5
        return torch.sigmoid(self.linear2(F.gelu(x)))


class GPT2Block(nn.Module):
    """A GPT-2 transformer layer: LayerNorm, causal attention (SDPA), tanh-GELU MLP."""

    def __init__(self, dim=1024, heads=16):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.proj = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.fc, self.out = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for t in self.qkv(self.ln1(x)).split(C, dim=2))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def rms_norm(x, w):
    """LLaMA's RMSNorm, computed in float32."""
    h = x.float()
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype) * w


def layer_norm_2d(x, w, b):
    """ConvNeXt's LayerNorm over the channels of [N, C, H, W]."""
    u = x.mean(1, keepdim=True)
    s = (x - u).pow(2).mean(1, keepdim=True)
    return w[:, None, None] * ((x - u) / torch.sqrt(s + 1e-6)) + b[:, None, None]


def rope(x, cos, sin):
    """Rotary position embedding, rotate-half form."""
    half = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin


class LlamaBlock(nn.Module):
    """A LLaMA transformer layer: RMSNorm, rotary causal attention (SDPA), SwiGLU MLP."""

    def __init__(self, dim=2048, heads=16, hidden=5632):
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = nn.Parameter(torch.ones(dim)), nn.Parameter(torch.ones(dim))
        self.wq, self.wk, self.wv, self.wo = (nn.Linear(dim, dim, bias=False) for _ in range(4))
        self.w1, self.w3 = nn.Linear(dim, hidden, bias=False), nn.Linear(dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, dim, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        h = rms_norm(x, self.norm1)
        q, k, v = (w(h).view(B, T, self.heads, C // self.heads).transpose(1, 2) for w in (self.wq, self.wk, self.wv))
        y = F.scaled_dot_product_attention(rope(q, cos, sin), rope(k, cos, sin), v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(B, T, C))
        h = rms_norm(x, self.norm2)
        return x + self.w2(F.silu(self.w1(h)) * self.w3(h))


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:
        b = b * -1
        if a.sum() < 1:
            a = a * -2
    return x * b


def ceilfloor(a, b):
    return ((a.ceil() + b.floor()).sum(dim=-1).softmax(dim=-1) * 10) ** 3


class Workload:
    """`random`: it draws random numbers, which no two backends draw alike (no error is taken)."""

    def __init__(self, name, make, memory_bound=True, train=False, random=False):
        self.name, self.make, self.memory_bound, self.train, self.random = name, make, memory_bound, train, random


def shrink(smoke: bool):
    """Sizes as given, or for --smoke a 64th of them (at least 1)."""
    return lambda n: max(1, n // 64) if smoke else n


def workloads(device, smoke: bool) -> list[Workload]:
    s = shrink(smoke)

    def rnd(*shape, dtype=torch.float32):
        return torch.randn(*shape, device=device, dtype=dtype)

    def model(cls, dim, rows, train=False):
        m = cls(dim).to(device)
        m.train(train)
        return m, (rnd(s(rows), dim),)

    out = [
        Workload("sin_chain 10M", lambda: (lambda x: ((x + 1) * 2).sin(), (rnd(s(10_000_000)),))),
        Workload("gelu_tanh 10M", lambda: (lambda x: F.gelu(x, approximate="tanh"), (rnd(s(10_000_000)),))),
        Workload("relu_sigmoid_tanh 10M", lambda: (lambda x: x.relu() + x.sigmoid() * x.tanh(), (rnd(s(10_000_000)),))),
    ]
    for rows in (256, 1024, 16384):
        out.append(Workload(f"PointwiseModel [{rows},1024]", lambda rows=rows: model(PointwiseModel, 1024, rows)))
    for rows in (256, 16384):
        out.append(Workload(f"MixedModel [{rows},512]", lambda rows=rows: model(MixedModel, 512, rows), memory_bound=False))
    for dt, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        R, C = s(8192), 4096
        ln = lambda dt=dt: nn.LayerNorm(C).to(device=device, dtype=dt)  # noqa: E731
        out += [
            Workload(f"softmax [8192,4096] {tag}", lambda dt=dt: (lambda x: x.softmax(-1), (rnd(R, C, dtype=dt),))),
            Workload(f"layer_norm [8192,4096] {tag}", lambda dt=dt, ln=ln: (ln(), (rnd(R, C, dtype=dt),))),
            Workload(f"rms_norm [8192,4096] {tag}", lambda dt=dt: (
                lambda x, w: F.rms_norm(x, (C,), w, 1e-6), (rnd(R, C, dtype=dt), rnd(C, dtype=dt)))),
            Workload(f"bias_gelu [8192,4096] {tag}", lambda dt=dt: (
                lambda x, b: F.gelu(x + b), (rnd(R, C, dtype=dt), rnd(C, dtype=dt)))),
        ]
    # beyond the list: vocabulary-sized rows and a long layer_norm (rows read
    # twice, looped), and GroupNorm (split statistics)
    for dt, tag in ((torch.float32, "fp32"), (torch.bfloat16, "bf16")):
        out.append(Workload(f"softmax [2048,50257] {tag}", lambda dt=dt: (
            lambda x: x.softmax(-1), (rnd(s(2048), 50257, dtype=dt),))))
    out.append(Workload("layer_norm [4096,12289] bf16", lambda: (
        nn.LayerNorm(12289).to(device=device, dtype=torch.bfloat16), (rnd(s(4096), 12289, dtype=torch.bfloat16),))))
    for groups in (8, 32):  # 256 groups of 100352 (split statistics), 1024 of 25088 (one kernel)
        out.append(Workload(f"group_norm {groups}g [32,256,56,56] fp32", lambda g=groups: (
            nn.GroupNorm(g, 256).to(device).eval(), (rnd(s(32), 256, 56, 56),))))
    # reductions over a strided dim (rows split across programs in blocks of columns):
    # a bias gradient's column sum and a softmax over dim 0
    out.append(Workload("column_sum [65536,256] fp32", lambda: (lambda x: x.sum(0), (rnd(s(65536), 256),))))
    out.append(Workload("softmax(0) [65536,256] fp32", lambda: (lambda x: x.softmax(0), (rnd(s(65536), 256),))))
    out.append(Workload("ceilfloor_softmax [4096,4096]", lambda: (ceilfloor, (rnd(s(4096), 4096), rnd(s(4096), 4096)))))
    out.append(Workload("toy_example [10]", lambda: (toy_example, (rnd(10), torch.ones(10, device=device)))))

    def mlp():
        m = nn.Sequential(nn.Linear(1024, 4096), nn.GELU(), nn.Linear(4096, 1024)).to(device)

        def step(x, y):
            for p in m.parameters():
                p.grad = None
            loss = F.mse_loss(m(x), y)
            loss.backward()
            return loss

        return step, (rnd(s(4096), 1024), rnd(s(4096), 1024))

    out.append(Workload("mlp_train_step [4096,1024->4096->1024]", mlp, memory_bound=False, train=True))
    return out


def more_workloads(device, smoke: bool) -> list[Workload]:
    """Patterns of transformer training and inference beyond the seeds, where a
    user would notice us falling behind Inductor. Steps with a backward report no
    floor (the gradients they write are not among the call's outputs)."""
    s = shrink(smoke)
    # the transformer blocks' widths and heads for --smoke, an eighth (heads as wide):
    # at full width, bf16 matmuls on a CPU took 11 s a LLaMA step, 12 minutes a smoke
    narrow = (lambda n: n // 8) if smoke else (lambda n: n)

    def rnd(*shape, dtype=torch.bfloat16, grad=False):
        return torch.randn(*shape, device=device, dtype=dtype, requires_grad=grad)

    def train(loss_of, *args, params=()):
        """A step that zeroes the leaves' gradients (and `params`'), backpropagates
        loss_of(*args) and returns it."""
        leaves = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad] + list(params)

        def step(*a):
            for x in leaves:
                x.grad = None
            loss = loss_of(*a)
            loss.backward()
            return loss

        return step, args

    def ids(n, high):
        return torch.randint(0, high, (n,), device=device)

    def moe_router(logits):
        weights, experts = logits.softmax(-1).topk(2)
        return weights / weights.sum(-1, keepdim=True), experts

    def adam_like(p, g, m, v):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
        return p - 1e-3 * m / (v.sqrt() + 1e-8), m, v

    causal = torch.ones(1024, 1024, device=device, dtype=torch.bool).triu(1)
    R, C, V = s(8192), 4096, 32000
    ln = lambda: nn.LayerNorm(C).to(device=device, dtype=torch.bfloat16)  # noqa: E731
    emb = lambda: nn.Embedding(V, C).to(device=device, dtype=torch.bfloat16)  # noqa: E731
    return [
        Workload("cross_entropy [4096,32000] bf16", lambda: (
            F.cross_entropy, (rnd(s(4096), V), ids(s(4096), V)))),
        Workload("cross_entropy fwd+bwd [4096,32000] bf16", lambda: train(
            F.cross_entropy, rnd(s(4096), V, grad=True), ids(s(4096), V)), memory_bound=False, train=True),
        Workload("cross_entropy fwd+bwd [4096,50257] bf16", lambda: train(
            F.cross_entropy, rnd(s(4096), 50257, grad=True), ids(s(4096), 50257)), memory_bound=False, train=True),
        Workload("swiglu [8192,11008] bf16", lambda: (
            lambda a, b: F.silu(a) * b, (rnd(R, 11008), rnd(R, 11008)))),
        Workload("rope [8,32,2048,128] bf16", lambda: (
            rope, (rnd(8, 32, s(2048), 128), rnd(s(2048), 128), rnd(s(2048), 128)))),
        Workload("causal_softmax [8,16,1024,1024] bf16", lambda: (
            lambda a: (a * 0.125).masked_fill(causal, float("-inf")).softmax(-1), (rnd(s(8), 16, 1024, 1024),))),
        Workload("llama_rms_norm [8192,4096] bf16", lambda: (rms_norm, (rnd(R, C), rnd(C)))),
        Workload("layer_norm fwd+bwd [8192,4096] bf16", lambda: (lambda m: train(
            lambda x: m(x).float().pow(2).mean(), rnd(R, C, grad=True)))(ln()), memory_bound=False, train=True),
        Workload("softmax fwd+bwd [8192,4096] fp32", lambda: train(
            lambda x: (x.softmax(-1) * x).sum(), rnd(R, C, dtype=torch.float32, grad=True)), memory_bound=False, train=True),
        Workload("dropout_residual [8192,4096] bf16", lambda: (  # a transformer's x + dropout(attn + bias)
            lambda x, y, b: x + F.dropout(y + b, 0.1, training=True), (rnd(R, C), rnd(R, C), rnd(C))), random=True),
        Workload("dropout_residual_layer_norm [8192,4096] bf16", lambda: (lambda m: (  # GPT-2's ln(x + dropout(h))
            lambda x, h: m(x + F.dropout(h, 0.1, training=True)), (rnd(R, C), rnd(R, C))))(ln()), random=True),
        Workload("permute_copy [8,2048,32,128] bf16", lambda: (
            lambda x: x.permute(0, 2, 1, 3).contiguous(), (rnd(8, s(2048), 32, 128),))),
        Workload("x.t() * 2 [1024,65537] bf16", lambda: (  # the output keeps x's strides: both walks transposed
            lambda x: x.t() * 2, (rnd(s(1024), 65537),))),
        Workload("bias_relu channels_last [32,256,56,56] bf16", lambda: (  # a CNN's activation, NHWC
            lambda x, b: (x + b.view(1, -1, 1, 1)).relu(), (rnd(s(32), 256, 56, 56).to(memory_format=torch.channels_last), rnd(256)))),
        Workload("softmax(1) channels_last [32,256,56,56] bf16", lambda: (  # over a middle dim, output contiguous
            lambda x: x.softmax(1), (rnd(s(32), 256, 56, 56).to(memory_format=torch.channels_last),))),
        Workload("layer_norm_2d channels_last [32,128,56,56] bf16", lambda: (  # ConvNeXt's LayerNorm over channels
            layer_norm_2d, (rnd(s(32), 128, 56, 56).to(memory_format=torch.channels_last), rnd(128), rnd(128)))),
        Workload("batch_norm train [32,256,56,56] fp32", lambda: (
            nn.BatchNorm2d(256).to(device).train(), (rnd(s(32), 256, 56, 56, dtype=torch.float32),))),
        Workload("max_pool2d 3x3 s2 [32,64,112,112] bf16", lambda: (
            lambda x: F.max_pool2d(x, 3, 2, 1), (rnd(s(32), 64, 112, 112),))),
        Workload("max_pool2d 3x3 s1 [32,256,28,28] bf16", lambda: (
            lambda x: F.max_pool2d(x, 3, 1, 1), (rnd(s(32), 256, 28, 28),))),
        Workload("avg_pool2d 2x2 [32,256,56,56] bf16", lambda: (
            lambda x: F.avg_pool2d(x, 2), (rnd(s(32), 256, 56, 56),))),
        Workload("avg_pool2d 3x3 s1 [32,256,28,28] bf16", lambda: (  # Inception's pooling branch
            lambda x: F.avg_pool2d(x, 3, 1, 1), (rnd(s(32), 256, 28, 28),))),
        Workload("pad(value=2) * 3 [8192,4091] bf16", lambda: (  # rows off 16 bytes
            lambda x: F.pad(x, (3, 5, 1, 0), value=2.0) * 3, (rnd(R, 4091),))),
        Workload("grid_sample bilinear [16,64,128,128] fp32", lambda: (
            lambda x, g: F.grid_sample(x, g, align_corners=False),
            (rnd(s(16), 64, 128, 128, dtype=torch.float32), torch.rand(s(16), 128, 128, 2, device=device) * 2.2 - 1.1))),
        Workload("index_select(1) [4096,8192]->4096 fp32", lambda: (
            lambda x, i: x.index_select(1, i),
            (rnd(s(4096), 8192, dtype=torch.float32), torch.randint(0, 8192, (4096,), device=device)))),
        Workload("sum_all 100M fp32", lambda: (lambda x: x.sum(), (rnd(s(100_000_000), dtype=torch.float32),))),
        Workload("argmax [2048,50257] fp32", lambda: (
            lambda x: x.argmax(-1), (rnd(s(2048), 50257, dtype=torch.float32),))),
        Workload("topk(1) [2048,50257] fp32", lambda: (  # greedy decoding's pick; fp32: bf16 logits tie
            lambda x: x.topk(1), (rnd(s(2048), 50257, dtype=torch.float32),))),
        Workload("cumsum(-1) [4096,4096] fp32", lambda: (
            lambda x: x.cumsum(-1), (rnd(s(4096), 4096, dtype=torch.float32),))),
        Workload("cummax(-1) [4096,4096] fp32", lambda: (
            lambda x: torch.cummax(x, -1), (rnd(s(4096), 4096, dtype=torch.float32),))),
        Workload("logcumsumexp(-1) [4096,4096] fp32", lambda: (
            lambda x: torch.logcumsumexp(x, -1), (rnd(s(4096), 4096, dtype=torch.float32),))),
        Workload("mask positions [64,8192]", lambda: (
            lambda m: (m.cumsum(-1) - 1) * m, (rnd(s(64), 8192) > 0,)), memory_bound=False),
        Workload("adam_like 4x10M fp32", lambda: (adam_like, tuple(
            rnd(s(10_000_000), dtype=torch.float32).abs() for _ in range(4)))),
        Workload("mean(1) [64,4096,1024] bf16", lambda: (lambda x: x.mean(1), (rnd(s(64), 4096, 1024),))),
        Workload("embedding_layer_norm [8192]x4096 bf16", lambda: (lambda e, n: (
            lambda i: n(e(i)), (ids(R, V),)))(emb(), ln()), memory_bound=False),
        Workload("moe router top2 [16384,64] fp32", lambda: (moe_router, (rnd(s(16384), 64, dtype=torch.float32),)),
                 memory_bound=False),  # fp32: bf16 weights tie, and ties may pick other experts
        Workload("sort(-1) [16384,256] fp32", lambda: (
            lambda x: x.sort(-1), (rnd(s(16384), 256, dtype=torch.float32),)), memory_bound=False),
        Workload("embedding backward [8192]x768 -> 50257 fp32", lambda: (
            lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 50257, -1, False),
            (rnd(s(8192), 768, dtype=torch.float32), ids(s(8192), 50257)))),
        *(Workload(f"scatter_reduce {r} (PyG) [262144]x64 -> 16384 fp32", lambda r=r: (
            lambda v, i: torch.zeros(s(16384), 64, device=device).scatter_reduce(
                0, i[:, None].expand(-1, 64), v, r, include_self=False),
            (rnd(s(262144), 64, dtype=torch.float32), ids(s(262144), s(16384)))), memory_bound=False)
          for r in ("amax", "mean")),
        Workload("gpt2_block fwd+bwd [8,1024,1024] bf16", lambda: (lambda m: train(
            lambda x: m(x).float().pow(2).mean(), rnd(s(8), s(1024), narrow(1024)), params=m.parameters()))(
            GPT2Block(narrow(1024), narrow(16)).to(device, torch.bfloat16)), memory_bound=False, train=True),
        Workload("llama_block fwd+bwd [4,2048,2048] bf16", lambda: (lambda m: train(
            lambda x, cos, sin: m(x, cos, sin).float().pow(2).mean(), rnd(s(4), s(2048), narrow(2048)),
            rnd(s(2048), 128), rnd(s(2048), 128), params=m.parameters()))(
            LlamaBlock(narrow(2048), narrow(16), narrow(5632)).to(device, torch.bfloat16)), memory_bound=False, train=True),
    ]


WORKLOAD_SETS = {"seeds": workloads, "more": more_workloads}


# -- measuring ---------------------------------------------------------------------------


def fresh(fn):
    """A wrapper with its own code object, so Dynamo keeps one cache entry per
    backend and no backend pays for another's guards."""
    def call(*args):
        return fn(*args)

    code = call.__code__.replace(co_name=f"call_{id(call):x}")
    return types.FunctionType(code, call.__globals__, code.co_name, None, call.__closure__)


class Timer:
    def __init__(self, device):
        self.cuda = device.type == "cuda"
        self.flush_buf = torch.empty(256 << 20, dtype=torch.int8, device=device) if self.cuda else None

    def once(self, fn, args, flush: bool) -> float:
        """Milliseconds for one call. With `flush`, the L2 cache is emptied and
        the GPU kept busy while the host launches the call: device time. Without,
        the GPU is idle when the call starts: the whole per-call latency."""
        if not self.cuda:
            t = time.perf_counter()
            fn(*args)
            return (time.perf_counter() - t) * 1e3
        if flush:
            self.flush_buf.zero_()
            torch.cuda._sleep(SLEEP_CYCLES)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*args)
        end.record()
        end.synchronize()
        return start.elapsed_time(end)

    def sync(self):
        if self.cuda:
            torch.cuda.synchronize()

    def steady(self, fn, arg_sets: list, host_us: float, calls: int = 24) -> float:
        """Milliseconds per call of back-to-back calls in the steady state the copy
        bandwidth is measured in: the calls rotate over copies of the inputs that
        together outgrow L2 (each call reads its inputs from memory), and each
        call's writes are written back while later calls run (no flush leaves
        another buffer's dirty lines for it to write back). The host queues the
        calls behind a sleep, so its launch cost stays hidden."""
        self.sync()
        torch.cuda._sleep(int(2e3 * (calls * host_us * 1.5 + 100)))  # cycles at <= 2 GHz
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(calls):
            fn(*arg_sets[i % len(arg_sets)])
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / calls


def copy_bandwidth(device) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read and written."""
    if device.type != "cuda":
        return float("nan")
    n = 1 << 28
    a, b = torch.empty(n, device=device), torch.empty(n, device=device)
    a.normal_()
    times = []
    for _ in range(12):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        b.copy_(a)
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    return 2 * a.nbytes / (statistics.median(times[2:]) / 1e3)


def same_size_copy_ms(nbytes: int, device, timer: "Timer", flush: bool) -> float:
    """Median time per call of a device copy that moves `nbytes` (reads half,
    writes half), timed like the workloads: what the floor costs at this size,
    launch latency and ramp-up included."""
    src = torch.empty(nbytes // 2, dtype=torch.int8, device=device)
    dst = torch.empty_like(src)
    copy = dst.copy_
    for _ in range(3):
        copy(src)
    return statistics.median(timer.once(copy, (src,), flush) for _ in range(30))


def rotated_copies(args, nbytes: int, device) -> list:
    """Argument sets (the given one and copies of its tensors) that together move
    at least three times the L2 cache, for Timer.steady."""
    sets = max(2, math.ceil(3 * torch.cuda.get_device_properties(device).L2_cache_size / nbytes))
    clone = lambda a: a.clone() if isinstance(a, torch.Tensor) else a  # noqa: E731
    return [args] + [tuple(map(clone, args)) for _ in range(sets - 1)]


def floor_bytes(args, out) -> int:
    """Bytes a call must move: every input read once, every output written once."""
    def tensors(x):
        if isinstance(x, torch.Tensor):
            yield x
        elif isinstance(x, (list, tuple)):
            for y in x:
                yield from tensors(y)

    return sum(t.numel() * t.element_size() for t in tensors(list(args))) + sum(
        t.numel() * t.element_size() for t in tensors(out))


def model_param_bytes(fn) -> int:
    m = getattr(fn, "parameters", None)
    return sum(p.numel() * p.element_size() for p in m()) if m else 0


def profile_launches(fn, args, device, timer: Timer, calls=3):
    """(launches per call, distinct kernels, {kernel: device us per call}) from
    torch.profiler, the L2 cache flushed before each call (the flush's own
    kernel, a fill of int8, is left out)."""
    if device.type != "cuda":
        return None, None, {}
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            timer.flush_buf.zero_()
            fn(*args)
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA
              and not e.name.startswith(("Memcpy", "Memset")) and "FillFunctor<signed char>" not in e.name]
    us: dict = {}
    for e in events:
        us[e.name] = us.get(e.name, 0.0) + e.time_range.elapsed_us() / calls
    return len(events) / calls, len(us), {k: round(v, 2) for k, v in us.items()}


def loop_us(fn, args, timer: Timer, est_ms: float) -> float:
    """Wall time per call of back-to-back calls: the host cost when the GPU keeps up."""
    n = int(min(200, max(20, 50 / max(est_ms, 1e-3))))
    timer.sync()
    t = time.perf_counter()
    for _ in range(n):
        fn(*args)
    timer.sync()
    return (time.perf_counter() - t) / n * 1e6


def first_calls(fn, args, timer: Timer, smoke: bool, inductor_first: bool):
    """Each backend's first call, timed (cold compile: the caches are empty, the
    backends take turns compiling first): (row fields, {name: compiled fn}, ours' output)."""
    row, backends, out = {}, {}, None
    torch._dynamo.reset()
    # libraries build per-shape plans on first use (cuDNN attention, cuBLAS): a run-time
    # cost, not a compile's, that whichever backend went first paid (LLaMA block fwd+bwd,
    # H200: ours 3.42 s first, 1.63 s second)
    fn(*args)
    timer.sync()
    # a call's run time, in Dynamo's eager first call and not in its share: the least of
    # three, as a busy host only adds to it (one call, the share came out below 0)
    eager_call_s = math.inf
    for _ in range(3):
        t = time.perf_counter()
        fn(*args)
        timer.sync()
        eager_call_s = min(eager_call_s, time.perf_counter() - t)
    order = [("ours", "fusion"), ("inductor", "inductor")]
    order = order[::-1] if inductor_first else order  # neither always pays first-use costs
    # Dynamo's share goes last, its caches warm: its time is then the least, each backend's
    # remainder the most
    for name, backend in order + [("dynamo", "eager")]:
        if smoke and name == "inductor":
            continue
        compiled = torch.compile(fresh(fn), backend=backend)
        with compiler.capture() if name == "ours" else contextlib.nullcontext() as cap:
            t = time.perf_counter()
            result = compiled(*args)
            timer.sync()
            row[f"compile_s_{name}"] = time.perf_counter() - t - (eager_call_s if name == "dynamo" else 0.0)
        if cap is not None:
            out = result
            row["our_kernels"] = [k.name for k in cap.kernels]
            row["our_launches"] = [k.launch for k in cap.kernels]  # configurations, candidates timed, compile s
            row["our_externs"] = len(cap.externs) + len(cap.fallbacks)
            row["graphs"] = len(cap.graphs)
            row["graph_breaks"] = cap.graph_breaks
            row["compile_s_ours_graphs"] = sum(g.compile_time_s for g in cap.graphs)  # ours, without Dynamo/AOT
        if name != "dynamo":
            backends[name] = compiled
    return row, backends, out


def measure(w: Workload, device, timer: Timer, bw: float, quick: bool, smoke: bool, inductor_first: bool) -> dict:
    torch.manual_seed(0)
    fn, args = w.make()
    grad_ctx = torch.enable_grad if w.train else torch.no_grad
    row = {"name": w.name}
    backends = {"eager": fn}
    with grad_ctx():
        compiled, compiled_fns, out = first_calls(fn, args, timer, smoke, inductor_first)
        row.update(compiled)
        backends.update(compiled_fns)
        small = floor_bytes(args, out) + model_param_bytes(fn) < FLUSH_MIN_BYTES
        if small and device.type == "cuda":  # the launch-bound cases: also ours replayed as a CUDA graph
            with compiler.config.patch(cuda_graphs=True):
                backends["ours_cudagraph"] = torch.compile(fresh(fn), backend="fusion")
                backends["ours_cudagraph"](*args)
        ref = fn(*args)
        outs = {k: f(*args) for k, f in backends.items()}
        if not w.random:
            row["max_abs_err_ours"] = _max_err(outs["ours"], ref)
            if "inductor" in outs:
                row["max_abs_err_inductor"] = _max_err(outs["inductor"], ref)
        nbytes = floor_bytes(args, ref) + model_param_bytes(fn)
        row["floor_bytes"] = nbytes
        flush = nbytes >= FLUSH_MIN_BYTES
        backends = {k: backends[k] for k in ("eager", "ours", "inductor", "ours_cudagraph") if k in backends}
        for f in backends.values():  # warm-up
            for _ in range(3):
                f(*args)
        timer.sync()
        est = {k: timer.once(f, args, flush) for k, f in backends.items()}
        budget_ms = 150 if quick else 400
        rounds = int(min(200, max(10, budget_ms / max(sum(est.values()), 1e-3))))
        if smoke:
            rounds = 3
        samples = {k: [] for k in backends}
        for _ in range(rounds):  # interleaved, so clock drift hits all alike
            for k, f in backends.items():
                samples[k].append(timer.once(f, args, flush))
        for k, v in samples.items():
            row[f"ms_{k}"] = statistics.median(v)
            launches, kernels, us = profile_launches(backends[k], args, device, timer)
            row[f"launches_{k}"], row[f"kernels_{k}"] = launches, kernels
            row[f"kernel_us_{k}"] = us
            row[f"loop_us_{k}"] = loop_us(backends[k], args, timer, row[f"ms_{k}"])
    row["rounds"] = rounds
    row["flushed"] = flush
    row["x_eager"] = row["ms_eager"] / row["ms_ours"]
    if "ms_inductor" in row:
        row["x_inductor"] = row["ms_inductor"] / row["ms_ours"]
    if w.memory_bound and bw == bw:
        floor_ms = nbytes / bw * 1e3
        row["floor_ms"] = floor_ms
        row["ms_copy_same"] = same_size_copy_ms(nbytes, device, timer, flush)
        row["floor_frac_copy_same"] = floor_ms / row["ms_copy_same"]
        if flush:  # large calls: also the steady state of back-to-back calls
            arg_sets = rotated_copies(args, nbytes, device)
            src = torch.empty(nbytes // 2, dtype=torch.int8, device=device)
            copies = rotated_copies((torch.empty_like(src), src), nbytes, device)
            steady = {"copy": (lambda dst, src: dst.copy_(src), copies, 5.0)}
            steady.update({k: (backends[k], arg_sets, row[f"loop_us_{k}"]) for k in ("ours", "inductor") if k in backends})
            samples = {k: [] for k in steady}
            with grad_ctx():
                for _ in range(3 if quick or smoke else 7):
                    for k, (f, sets, host_us) in steady.items():
                        samples[k].append(timer.steady(f, sets, host_us))
            for k, v in samples.items():
                row[f"floor_frac_steady_{k}"] = floor_ms / statistics.median(v)
            del arg_sets, copies
        for k in ("ours", "inductor"):
            if f"ms_{k}" in row:
                row[f"floor_frac_{k}"] = floor_ms / row[f"ms_{k}"]
                kernel_ms = sum(row[f"kernel_us_{k}"].values()) / 1e3
                if kernel_ms:  # the kernels alone, without the launches' latency
                    row[f"floor_frac_kernels_{k}"] = floor_ms / kernel_ms
    return row


def _max_err(a, b) -> float:
    if isinstance(a, (tuple, list)):
        return max((_max_err(x, y) for x, y in zip(a, b)), default=0.0)
    if not isinstance(a, torch.Tensor):
        return 0.0
    return (a.float() - b.float()).abs().max().item() if a.numel() else 0.0


# -- reporting ----------------------------------------------------------------------------


COLUMNS = [
    ("workload", lambda r: r["name"]),
    ("eager ms", lambda r: f"{r['ms_eager']:.4f}"),
    ("ours ms", lambda r: f"{r['ms_ours']:.4f}"),
    ("inductor ms", lambda r: _fmt(r.get("ms_inductor"), ".4f")),
    ("eager/ours", lambda r: f"{r['x_eager']:.2f}"),
    ("inductor/ours", lambda r: _fmt(r.get("x_inductor"), ".2f")),
    ("floor ours", lambda r: _fmt(r.get("floor_frac_ours"), ".0%")),
    ("floor ind.", lambda r: _fmt(r.get("floor_frac_inductor"), ".0%")),
    ("floor copy", lambda r: _fmt(r.get("floor_frac_copy_same"), ".0%")),
    ("floor steady o/i/copy", lambda r: "/".join(_fmt(r.get(f"floor_frac_steady_{k}"), ".0%") for k in ("ours", "inductor", "copy"))),
    ("floor kernels o/i", lambda r: "/".join(_fmt(r.get(f"floor_frac_kernels_{k}"), ".0%") for k in ("ours", "inductor"))),
    ("kernels e/o/i", lambda r: "/".join(_fmt(r.get(f"kernels_{k}"), "d") for k in ("eager", "ours", "inductor"))),
    ("launches e/o/i", lambda r: "/".join(_fmt(r.get(f"launches_{k}"), "g") for k in ("eager", "ours", "inductor"))),
    ("compile s o/i", lambda r: f"{r['compile_s_ours']:.2f}/{_fmt(r.get('compile_s_inductor'), '.2f')}"),
    ("backend compile s o/i", lambda r: "/".join(_fmt(backend_compile_s(r, k), ".2f") for k in ("ours", "inductor"))),
    ("loop us e/o/i/cg", lambda r: "/".join(_fmt(r.get(f"loop_us_{k}"), ".1f") for k in ("eager", "ours", "inductor", "ours_cudagraph"))),
]


def _fmt(v, spec):
    if v is None or (isinstance(v, float) and v != v):
        return "-"
    return format(int(v) if spec == "d" else v, spec)


LARGE_BYTES = 64 << 20  # "large size" for the memory-floor targets


def backend_compile_s(r: dict, backend: str) -> float | None:
    """A backend's cold first call less Dynamo's share (see the module doc)."""
    if r.get(f"compile_s_{backend}") is None or r.get("compile_s_dynamo") is None:
        return None
    return r[f"compile_s_{backend}"] - r["compile_s_dynamo"]


def summary(rows) -> dict:
    def geomean(xs):
        return math.exp(sum(map(math.log, xs)) / len(xs)) if xs else None

    large = [r for r in rows if "floor_frac_ours" in r and r["floor_bytes"] >= LARGE_BYTES]
    backend_compiles = [(backend_compile_s(r, "ours"), backend_compile_s(r, "inductor")) for r in rows]
    backend_compiles = [(o, i) for o, i in backend_compiles if o is not None and i is not None]
    return {
        "geomean_inductor_over_ours": geomean([r["x_inductor"] for r in rows if "x_inductor" in r]),
        "geomean_eager_over_ours": geomean([r["x_eager"] for r in rows]),
        "geomean_compile_ours_over_inductor": geomean(
            [r["compile_s_ours"] / r["compile_s_inductor"] for r in rows if r.get("compile_s_inductor")]),
        "compile_rounds": max((len(r.get("compile_s_ours_rounds", [0])) for r in rows), default=0),
        "cases_ours_over_half_of_inductor_compile": sum(
            r["compile_s_ours"] > 0.5 * r["compile_s_inductor"] for r in rows if r.get("compile_s_inductor")),
        "geomean_backend_compile_ours_over_inductor": geomean(
            [o / i for o, i in backend_compiles if o > 0 and i > 0]),
        "cases_ours_over_half_of_inductor_backend_compile": sum(o > 0.5 * i for o, i in backend_compiles),
        "large_memory_bound_cases": len(large),
        "of_them_ours_>=90%_floor_per_call": sum(r["floor_frac_ours"] >= 0.9 for r in large),
        "of_them_ours_>=90%_of_a_same_size_copy": sum(r["ms_copy_same"] / r["ms_ours"] >= 0.9 for r in large),
        "of_them_ours_>=90%_floor_steady": sum(r.get("floor_frac_steady_ours", 0) >= 0.9 for r in large),
        "of_them_ours_>=90%_floor_kernels": sum(r.get("floor_frac_kernels_ours", 0) >= 0.9 for r in large),
        "of_them_ours_no_slower_than_inductor": sum(r.get("x_inductor", 0) >= 1.0 for r in large),
    }


def markdown(rows, env: dict, summ: dict) -> str:
    head = "| " + " | ".join(c for c, _ in COLUMNS) + " |"
    sep = "|" + "---|" * len(COLUMNS)
    lines = [f"# GPU benchmark: eager / ours (fusion) / TorchInductor", "",
             *(f"- {k}: {v}" for k, v in env.items()), "", head, sep]
    lines += ["| " + " | ".join(f(r) for _, f in COLUMNS) + " |" for r in rows]
    lines += ["", *(f"- {k}: {_fmt(v, 'd' if isinstance(v, int) else '.3f')}" for k, v in summ.items())]
    return "\n".join(lines) + "\n"


def environment(device, bw) -> dict:
    import platform

    env = {"command": " ".join([sys.executable] + sys.argv), "python": platform.python_version(),
           "torch": torch.__version__, "device": str(device), "fast_math": compiler.config.fast_math}
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    if device.type == "cuda":
        env["device_name"] = torch.cuda.get_device_name(device)
        env["copy_bandwidth_GBps"] = round(bw / 1e9, 1)
    return env


def warm_up(device, backends):
    """One-time process costs (imports, the compile worker processes of Inductor and ours, Triton's
    driver and libdevice, our launcher) stay out of the cold compile times."""
    torch.manual_seed(1)
    m = nn.Sequential(nn.Linear(48, 64), nn.GELU(), nn.LayerNorm(64)).to(device)
    for backend in backends:
        for dt in (torch.float32, torch.bfloat16):
            x = torch.randn(8, 48, device=device, dtype=dt)
            torch.compile(fresh(lambda x: (x.cos() * 3).softmax(-1) + F.gelu(x, approximate="tanh")), backend=backend)(x)
        step = torch.compile(fresh(lambda x: m(x).sum().backward()), backend=backend)
        step(torch.randn(8, 48, device=device))
        torch._dynamo.reset()
    time.sleep(3)  # compile worker processes started in the background settle before timing


def main(args):
    device = torch.device("cpu" if args.smoke or not torch.cuda.is_available() else "cuda")
    if device.type != "cuda" and not args.smoke:
        sys.exit("no CUDA device: run with --smoke to check the script on CPU")
    timer = Timer(device)
    if args.compile_only:
        return compile_round(args, device, timer)
    bw = copy_bandwidth(device)
    env = environment(device, bw)
    print(" ".join(f"{k}={v}" for k, v in env.items()), flush=True)
    warm_up(device, ("fusion",) if args.smoke else ("fusion", "inductor"))
    rows, md = [], ""
    for i, w in enumerate(selected(WORKLOAD_SETS[args.set](device, args.smoke), args.only)):
        try:
            row = measure(w, device, timer, bw, args.quick, args.smoke, inductor_first=i % 2 == 1)
        except Exception as e:  # one broken workload must not hide the others
            import traceback

            traceback.print_exc()
            row = {"name": w.name, "error": f"{type(e).__name__}: {e}"}
            print(f"{w.name}: FAILED {row['error'][:300]}", flush=True)
            rows.append(row)
            write(args.out, rows, env)
            continue
        rows.append(row)
        print(" | ".join(f(row) for _, f in COLUMNS), flush=True)
        md = write(args.out, rows, env)  # after every workload: a run cut short keeps what it measured
    if args.compile_rounds > 1:
        more_compile_rounds(args, rows)
        md = write(args.out, rows, env)
    print()
    print(md)


def selected(ws: list, only: str) -> list:
    prefixes = [o.strip() for o in only.split(",") if o.strip()]
    return [w for w in ws if not prefixes or any(w.name.startswith(p) for p in prefixes)]


COMPILED_BY = ("ours", "inductor", "dynamo")  # first calls timed, Dynamo's share included


def compile_round(args, device, timer: Timer) -> None:
    """One more round of cold first calls (this process's caches are empty):
    {workload: {backend: seconds}} into args.compile_only."""
    warm_up(device, ("fusion",) if args.smoke else ("fusion", "inductor"))
    times = {}
    for i, w in enumerate(selected(WORKLOAD_SETS[args.set](device, args.smoke), args.only)):
        torch.manual_seed(0)
        fn, a = w.make()
        with (torch.enable_grad if w.train else torch.no_grad)():
            row, _, _ = first_calls(fn, a, timer, args.smoke, inductor_first=(i + args.round) % 2 == 1)
        times[w.name] = {k: row.get(f"compile_s_{k}") for k in COMPILED_BY}
        del fn, a, row
        if device.type == "cuda":
            torch.cuda.empty_cache()
    with open(args.compile_only, "w") as f:
        json.dump(times, f)


def more_compile_rounds(args, rows: list) -> None:
    """Rounds 2.. of cold compile, each in a fresh process (its own empty caches,
    the backends' turns to go first swapped each round); a row's compile times
    become the median of its rounds."""
    import subprocess

    rounds = {r["name"]: {k: [r[f"compile_s_{k}"]] for k in COMPILED_BY if r.get(f"compile_s_{k}")}
              for r in rows if "error" not in r}
    for k in range(1, args.compile_rounds):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            cmd = [sys.executable, os.path.abspath(__file__), "--compile-only", f.name, "--round", str(k),
                   "--only", args.only, "--set", args.set]
            cmd += ["--smoke"] * args.smoke + ["--warm-cache"] * args.warm_cache
            if subprocess.run(cmd).returncode != 0:
                print(f"compile round {k + 1} failed: cold compile times are the median of fewer rounds", flush=True)
                continue
            for name, times in json.load(f).items():
                for backend, secs in times.items():
                    if secs is not None and backend in rounds.get(name, {}):
                        rounds[name][backend].append(secs)
    for r in rows:
        for backend, secs in rounds.get(r["name"], {}).items():
            r[f"compile_s_{backend}_rounds"] = secs
            r[f"compile_s_{backend}"] = statistics.median(secs)


def write(out: str, rows: list, env: dict) -> str:
    ok = [r for r in rows if "error" not in r]
    summ = summary(ok)
    md = markdown(ok, env, summ)
    failed = [r for r in rows if "error" in r]
    if failed:
        md += "\nFailed:\n" + "".join(f"- {r['name']}: {r['error'][:500]}\n" for r in failed)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        f.write(md)
    with open(os.path.splitext(out)[0] + ".json", "w") as f:
        json.dump({"environment": env, "rows": rows, "summary": summ}, f, indent=1, default=str)
    return md


if __name__ == "__main__":
    main(ARGS)
