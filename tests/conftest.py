"""Helpers shared by the project's tests: compile with the fusion backend and
compare with eager PyTorch on the same random data."""
from __future__ import annotations

import pytest
import torch

import compiler
from compiler.config import config
from triton_sm90 import compile_interpreted_for_h100

# pytester for the plugin's tests: only a top-level conftest may require plugins
pytest_plugins = ["pytester"]

# per-dtype tolerances; integer and bool results must be exact
TOLERANCE = {
    torch.float64: dict(rtol=1e-7, atol=1e-7),
    torch.float32: dict(rtol=1e-4, atol=1e-5),
    torch.float16: dict(rtol=2e-3, atol=2e-3),
    torch.bfloat16: dict(rtol=1.6e-2, atol=1e-2),
}


@pytest.fixture
def fresh_dynamo():
    """Each test compiles from scratch (no graphs or guards left from another test)."""
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def clone_input(a, device=None):
    """A copy (on `device`, default a's) with the same strides and storage offset
    (a slice stays non-contiguous)."""
    if not isinstance(a, torch.Tensor):
        return a
    base = a._base if a._base is not None else a
    return base.to(device or a.device, copy=True).as_strided(a.shape, a.stride(), a.storage_offset())


def mismatches(outs, refs, names, tol=None) -> list[str]:
    """One line per output that differs from eager's (dtype, shape or values)."""
    bad = []
    for name, o, r in zip(names, outs, refs):
        if isinstance(r, (tuple, list)):  # max(dim), var_mean: compare each part
            bad += mismatches(o, r, [f"{name}[{k}]" for k in range(len(r))], tol)
            continue
        if not isinstance(r, torch.Tensor):
            if o != r:
                bad.append(f"{name}: {o!r} != {r!r}")
            continue
        t = tol or TOLERANCE.get(r.dtype, dict(rtol=0, atol=0))
        try:
            torch.testing.assert_close(o, r, equal_nan=True, **t)
        except AssertionError as e:
            bad.append(f"{name}: " + " ".join(str(e).split())[:300])
    return bad


def flat(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def compile_and_compare(fn, *args, names=None, tol=None) -> compiler.Capture:
    """Run fn compiled (backend "fusion", static shapes) and eagerly on copies of
    args; assert that outputs and mutated inputs agree. Returns the capture."""
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="fusion", dynamic=False)
    mine, theirs = [clone_input(a) for a in args], [clone_input(a) for a in args]
    with compiler.capture() as cap:
        out = flat(compiled(*mine))
    ref = flat(fn(*theirs))
    assert len(out) == len(ref)
    names = list(names) if names is not None else [f"output {k}" for k in range(len(ref))]
    assert len(names) == len(ref), f"{len(names)} names for {len(ref)} outputs: the rest would go unchecked"
    bad = mismatches(out, ref, names, tol)
    bad += mismatches(mine, theirs, [f"input {k} after the call" for k in range(len(args))], tol)
    assert not bad, f"{len(bad)} of {len(ref)} outputs differ from eager:\n" + "\n".join(bad)
    return cap


@pytest.fixture
def check_compiled(fresh_dynamo):
    """`check_compiled(fn, *args, names=..., tol=...)` -> Capture: see compile_and_compare."""
    return compile_and_compare


# where the op-coverage tests run: C++ on the CPU; Triton on the CPU, in Triton's
# interpreter (and compiled for an H100 without running, where Triton can); Triton on a GPU
TARGETS = ["cpp", "triton", pytest.param("cuda", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="no CUDA device: Triton compiled for a GPU needs one"))]


@pytest.fixture(params=TARGETS)
def target(request) -> str:
    return request.param


@pytest.fixture
def check_on_every_target(target, fresh_dynamo):
    """check_compiled, once per target (inputs are copied to the GPU for "cuda",
    with their strides)."""
    if target == "cpp":
        yield compile_and_compare
    elif target == "cuda":
        yield lambda fn, *args, **kw: compile_and_compare(fn, *[clone_input(a, "cuda") for a in args], **kw)
    else:
        pytest.importorskip("triton")

        def interpreted(fn, *args, **kw):
            cap = compile_and_compare(fn, *args, **kw)
            compile_interpreted_for_h100(cap.kernels)
            return cap

        with config.patch(cpu_target="triton"):
            yield interpreted
