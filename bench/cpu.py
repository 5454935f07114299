"""CPU benchmark: eager vs ours (backend="fusion") vs TorchInductor (torch.compile default).

    python -m bench.cpu [--rounds 15] [--only softmax,layer_norm] [--quick]

Run time: median over interleaved rounds (each round times eager, ours and
Inductor back to back, in a rotating order), after warm-up, compile excluded.
Cold compile: first call after torch._dynamo.reset() with empty on-disk and
in-memory caches for both compilers (FUSION_CACHE_DIR / TORCHINDUCTOR_CACHE_DIR
pointed at fresh temporary folders); one throwaway compile of each backend first,
so import time is not charged to the first workload."""
from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
import time

import torch

import compiler
from compiler import config

from .common import geomean, make, median

# (name, main input shape, group); group "pointwise"/"norm" carry the speed target
WORKLOADS = [
    ("sin_chain", (1_000_000,), "pointwise"),
    ("tanh_gelu", (1_000_000,), "pointwise"),
    ("relu_sigmoid_tanh", (1_000_000,), "pointwise"),
    ("pointwise_model", (256, 1024), "pointwise"),
    ("pointwise_model", (2048, 1024), "pointwise"),
    ("softmax", (2048, 1024), "norm"),
    ("layer_norm", (2048, 1024), "norm"),
    ("rms_norm", (2048, 1024), "norm"),
    ("mixed_model", (256, 512), "mixed"),
    ("ceil_floor_softmax", (1024, 1024), "mixed"),
    ("toy_example", (1_000_000,), "mixed"),
]
QUICK = {"sin_chain": (10_000,), "tanh_gelu": (10_000,), "relu_sigmoid_tanh": (10_000,), "pointwise_model": (64, 1024),
         "softmax": (64, 1024), "layer_norm": (64, 1024), "rms_norm": (64, 1024), "mixed_model": (64, 512),
         "ceil_floor_softmax": (64, 1024), "toy_example": (10_000,)}
SAMPLE_S = 0.02  # aim for samples of about this long (several calls each)


@contextlib.contextmanager
def fresh_caches():
    """Empty compile caches for both compilers, on disk and in memory."""
    from torch._inductor.runtime.cache_dir_utils import temporary_cache_dir

    with tempfile.TemporaryDirectory(prefix="bench-fusion-") as ours, tempfile.TemporaryDirectory(
        prefix="bench-inductor-"
    ) as theirs, config.patch(cache_dir=ours), temporary_cache_dir(theirs):
        torch._dynamo.reset()
        yield


def first_call_s(fn, args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def time_calls(fn, args, n: int) -> float:
    t = time.perf_counter()
    for _ in range(n):
        fn(*args)
    return (time.perf_counter() - t) / n


def measure(fns: dict, args, rounds: int) -> dict:
    """Median seconds per call of each fn, interleaved."""
    for f in fns.values():  # warm-up
        for _ in range(3):
            f(*args)
    per_call = min(time_calls(f, args, 3) for f in fns.values())
    n = max(1, int(SAMPLE_S / max(per_call, 1e-7)))
    names = list(fns)
    samples = {k: [] for k in names}
    for r in range(rounds):
        for k in names[r % len(names):] + names[: r % len(names)]:
            samples[k].append(time_calls(fns[k], args, n))
    return {k: median(v) for k, v in samples.items()}


def check(out, ref):
    torch.testing.assert_close(out, ref, rtol=2e-3, atol=2e-3)


def run_one(name, shape, rounds):
    fn, args = make(name, shape)
    with torch.no_grad():
        ref = fn(*args)
        with fresh_caches(), compiler.capture() as cap:
            ours = torch.compile(fn, backend="fusion")
            c_ours = first_call_s(ours, args)
            inductor = torch.compile(fn)
            c_ind = first_call_s(inductor, args)
        check(ours(*args), ref)
        check(inductor(*args), ref)
        t = measure({"eager": fn, "ours": ours, "inductor": inductor}, args, rounds)
    return {"t": t, "compile": {"ours": c_ours, "inductor": c_ind}, "kernels": len(cap.kernels)}


def warm_up_compilers():
    """Import and initialize both compilers once, outside the timed cold compiles."""
    fn, args = make("sin_chain", (64,))
    with torch.no_grad(), fresh_caches():
        torch.compile(fn, backend="fusion")(*args)
        torch.compile(fn)(*args)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--only", default="", help="comma-separated workload names")
    p.add_argument("--quick", action="store_true", help="tiny sizes, a smoke run")
    a = p.parse_args(argv)
    only = {s for s in a.only.split(",") if s}
    work = [(n, QUICK[n] if a.quick else s, g) for n, s, g in WORKLOADS if not only or n in only]
    if a.quick:
        work = list({n: (n, s, g) for n, s, g in work}.values())
    print(f"# torch {torch.__version__}, {os.cpu_count()} CPUs, {torch.get_num_threads()} threads, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}; median of {a.rounds} interleaved rounds")
    warm_up_compilers()
    hdr = (f"{'workload':<20}{'shape':<13}{'eager ms':>9}{'ours ms':>9}{'ind ms':>9}{'eager/ours':>11}{'ind/ours':>9}"
           f"{'k':>3}{'ours cold s':>12}{'ind cold s':>11}{'ind/ours':>9}")
    print(hdr)
    print("-" * len(hdr))
    rows = []
    for name, shape, group in work:
        r = run_one(name, shape, a.rounds)
        t, c = r["t"], r["compile"]
        rows.append((name, shape, group, r))
        print(f"{name:<20}{'x'.join(map(str, shape)):<13}{t['eager'] * 1e3:>9.3f}{t['ours'] * 1e3:>9.3f}"
              f"{t['inductor'] * 1e3:>9.3f}{t['eager'] / t['ours']:>11.2f}{t['inductor'] / t['ours']:>9.2f}"
              f"{r['kernels']:>3}{c['ours']:>12.2f}{c['inductor']:>11.2f}{c['inductor'] / c['ours']:>9.2f}", flush=True)
    print("-" * len(hdr))
    speed = [r["t"]["inductor"] / r["t"]["ours"] for _, _, _, r in rows]
    comp = [r["compile"]["inductor"] / r["compile"]["ours"] for _, _, _, r in rows]
    print(f"geomean  eager/ours {geomean([r['t']['eager'] / r['t']['ours'] for *_, r in rows]):.2f}  "
          f"inductor/ours {geomean(speed):.2f}  cold compile inductor/ours {geomean(comp):.2f}")
    slow = [f"{n} {'x'.join(map(str, s))} ({r['t']['inductor'] / r['t']['ours']:.2f})"
            for n, s, g, r in rows if g in ("pointwise", "norm") and r["t"]["inductor"] < r["t"]["ours"]]
    cold = [f"{n} ({r['compile']['inductor'] / r['compile']['ours']:.1f}x)" for n, s, g, r in rows
            if r["compile"]["inductor"] < 3 * r["compile"]["ours"]]
    print("target run time  (pointwise/norm, ours no slower than Inductor):", "met" if not slow else "NOT met: " + ", ".join(slow))
    print("target cold compile (>= 3x faster than Inductor):", "met" if not cold else "NOT met: " + ", ".join(cold))


if __name__ == "__main__":
    main()
