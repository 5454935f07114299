"""Sweep torch's OpInfo samples through the fusion backend and compare with eager.

    python scripts/opinfo_sweep.py --device cuda --dtype bfloat16 [--backward] [--jobs 15]

Each op's first samples are compiled with backend="fusion" (forward, or with
--backward the forward and the gradients of a random-weighted sum of its outputs)
and compared with eager. Prints a line for each sample that differs (saying
whether TorchInductor matches eager there: ind=eager, ind=ours, ind=other) or
that our backend fails to compile, then the totals. The samples are split over
--jobs processes. torch's OpInfo database needs `expecttest` (pip install expecttest)."""
from __future__ import annotations

import argparse
import ast
import collections
import signal
import subprocess
import sys
import warnings

# ops left out: linear algebra and FFTs (ATen's, not ours), random or data-dependent results
SKIP = ("sparse", "linalg", "fft", "nn.functional.conv", "cholesky", "svd", "qr", "eig", "lu", "ormqr", "geqrf", "pinv",
        "inverse", "det", "solve", "lstsq", "matrix_exp", "quantile", "jiterator", "_refs", "normal", "bernoulli", "rand",
        "multinomial", "dropout", "uniform", "empty", "cauchy", "exponential", "geometric", "log_normal", "item",
        "tolist", "to_sparse", "histc", "histogram", "bincount", "unique", "nonzero", "masked_select", "argwhere",
        "allclose", "equal", "sort", "topk", "kthvalue", "median", "mode", "msort", "_attention", "cdist", "pdist",
        "max_unpool", "fractional_max_pool", "ctc_loss", "nll_loss2d")
# (rtol, atol) by dtype; integers and bools compare exactly
FORWARD_TOL = {"float32": (1e-4, 1e-5), "float64": (1e-7, 1e-7), "float16": (2e-3, 1e-5), "bfloat16": (1.6e-2, 1e-5)}
BACKWARD_TOL = {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7), "float16": (4e-3, 1e-3), "bfloat16": (2e-2, 1e-2)}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="float32")
    p.add_argument("--backward", action="store_true", help="compare gradients too")
    p.add_argument("--samples", type=int, default=4, help="samples per op")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--only", default="", help="comma-separated parts of op names to sweep (default: all)")
    p.add_argument("--part", type=int, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.part is not None:
        return sweep(args, args.part)
    procs = [subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--part", str(i)], stdout=subprocess.PIPE, text=True)
             for i in range(args.jobs)]
    lines, totals, crashed = [], collections.Counter(), []
    for i, proc in enumerate(procs):
        out, _ = proc.communicate()
        if proc.returncode:  # its samples are missing from the totals: say so
            crashed.append(f"part {i} exited with {proc.returncode}")
        for line in out.splitlines():
            if line.startswith("TOTALS "):
                totals.update(ast.literal_eval(line[len("TOTALS "):]))
            elif line.split(" ", 1)[0] in ("DIFFERS", "FAILS", "TIMEOUT"):
                lines.append(line)
    if lines:
        print("\n".join(sorted(lines)))
    print(f"{args.device} {args.dtype}{' backward' if args.backward else ''}: {dict(totals)}")
    if crashed:
        sys.exit("opinfo_sweep: " + "; ".join(crashed))


def sweep(args, part: int) -> None:
    warnings.filterwarnings("ignore")
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    from compiler.backend import fusion_backend

    torch._dynamo.config.cache_size_limit = 64
    dtype, dev = getattr(torch, args.dtype), args.device
    rtol, atol = (BACKWARD_TOL if args.backward else FORWARD_TOL).get(args.dtype, (0, 0))
    tol = dict(rtol=rtol, atol=atol)
    failures: list = []

    def backend(gm, example_inputs):
        try:
            return fusion_backend(gm, example_inputs)
        except Exception as e:  # Dynamo would run the call eagerly and hide it
            if type(e).__name__ != "TensorifyScalarRestartAnalysis":  # Dynamo's own restart
                failures.append(e)
            raise

    def differs(a, b):
        try:
            torch.testing.assert_close(a, b, equal_nan=True, check_dtype=True, check_stride=False, **tol)
        except Exception as e:
            return " ".join(str(e).split("\n")[:4])[:300]
        return None

    def run(fn, inputs):
        out = fn(*inputs)
        if not args.backward:
            return out
        leaves = [a for a in inputs if isinstance(a, torch.Tensor) and a.requires_grad]
        outs = [o for o in (out if isinstance(out, (tuple, list)) else (out,)) if isinstance(o, torch.Tensor) and o.requires_grad]
        g = torch.Generator(device=dev).manual_seed(1)
        loss = sum((o * torch.randn(o.shape, dtype=o.dtype, device=dev, generator=g)).sum() for o in outs)
        grads = torch.autograd.grad(loss, leaves, allow_unused=True)
        return out, [x for x in grads if x is not None]

    def timeout(signum, frame):
        raise TimeoutError

    signal.signal(signal.SIGALRM, timeout)
    totals = collections.Counter()
    for i, op in enumerate(op_db):
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        supported = op.supported_backward_dtypes(dev) if args.backward else op.supported_dtypes(dev)
        wanted = not args.only or any(w in name for w in args.only.split(","))
        if i % args.jobs != part or not wanted or any(s in name for s in SKIP) or dtype not in supported:
            continue
        if args.backward and not op.supports_autograd:
            continue
        try:
            torch.manual_seed(0)
            samples = list(op.sample_inputs(dev, dtype, requires_grad=args.backward))[:args.samples]
        except Exception:
            continue
        for k, s in enumerate(samples):
            inputs = (s.input, *s.args)
            fn = lambda *a, op=op, kw=s.kwargs: op(*a, **kw)  # noqa: E731
            try:
                expected = run(fn, inputs)
            except Exception:
                continue  # eager refuses the sample
            torch._dynamo.reset()
            failures.clear()
            totals["samples"] += 1
            signal.alarm(120)
            try:
                got = run(torch.compile(fn, backend=backend), inputs)
                signal.alarm(0)
            except TimeoutError:
                print(f"TIMEOUT {name}[{k}]", flush=True)
                continue
            except Exception as e:
                signal.alarm(0)
                failures.append(e)
            if failures:
                totals["fail"] += 1
                e = failures[0]
                print(f"FAILS {name}[{k}] {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}", flush=True)
                continue
            msg = differs(got, expected)
            if msg is None:
                totals["match"] += 1
                continue
            totals["differ"] += 1
            print(f"DIFFERS {name}[{k}] {inductor_verdict(run, fn, inputs, got, expected, differs)} "
                  f"shapes {[tuple(a.shape) for a in inputs if isinstance(a, torch.Tensor)]} :: {msg}", flush=True)
    print(f"TOTALS {dict(totals)}", flush=True)


def inductor_verdict(run, fn, inputs, got, expected, differs) -> str:
    """Whether TorchInductor matches eager where ours differs, or matches ours."""
    import torch

    try:
        torch._dynamo.reset()
        signal.alarm(120)
        theirs = run(torch.compile(fn, backend="inductor"), inputs)
        signal.alarm(0)
    except BaseException as e:
        signal.alarm(0)
        return f"ind-fails({type(e).__name__})"
    if differs(theirs, expected) is None:
        return "ind=eager"
    return "ind=ours" if differs(got, theirs) is None else "ind=other"


if __name__ == "__main__":
    main()
