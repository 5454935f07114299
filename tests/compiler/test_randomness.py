"""Random numbers (lowerings.randomness): dropout, sampling and the random ops
fuse into our kernels on every target. Their numbers are not eager's (another
generator), so the tests check what must hold of them: the share dropped, the
values kept, the distributions, a seed repeating a run, calls differing, the
backward using the forward's mask, and the C++ and Triton targets agreeing.
Each test seeds torch's generators, so its draws, and its outcome, are fixed."""
from __future__ import annotations

import contextlib
import math

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.codegen.triton_backend import meta_of
from compiler.config import config
from triton_sm90 import compile_interpreted_for_h100

pytestmark = pytest.mark.usefixtures("fresh_dynamo", "seeded")

DTYPES = [torch.float32, torch.bfloat16, torch.float16]
# a count within this many standard deviations of its mean: 1 in 10^5 fails by chance
SIGMAS = 4.5


@pytest.fixture
def seeded():
    torch.manual_seed(0)


@pytest.fixture
def device(target):
    """The device a target's kernels run on, with the target chosen."""
    if target == "triton":
        pytest.importorskip("triton")
    with config.patch(cpu_target="triton") if target == "triton" else contextlib.nullcontext():
        yield torch.device("cuda" if target == "cuda" else "cpu")


@pytest.fixture
def capture(target):
    """compiler.capture(), whose Triton kernels rendered for the interpreter are also
    compiled for an H100 (sm_90) where Triton can (tests/triton_sm90.py)."""
    @contextlib.contextmanager
    def capturing():
        with compiler.capture() as cap:
            yield cap
        if target == "triton":
            compile_interpreted_for_h100(cap.kernels)
    return capturing


def compiled(fn):
    return torch.compile(fn, backend="fusion", dynamic=False)


def near(count: float, n: int, p: float) -> bool:
    """Whether `count` successes of `n` tries at chance p is a likely draw."""
    return abs(count - n * p) <= SIGMAS * math.sqrt(n * p * (1 - p))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dropout_is_one_kernel_dropping_p_of_the_values(device, capture, dtype):
    """tanh, dropout and a scale in one kernel, on rows off every block size; the
    seed the one ATen call. Kept values are eager's for that mask (to tanh's ulp)."""
    torch.manual_seed(0)
    x = torch.randn(333, 1001, device=device).to(dtype)
    p = 0.3
    with capture() as cap:
        y = compiled(lambda x: F.dropout(torch.tanh(x), p, training=True) * 3)(x)
    assert [k.kind for k in cap.kernels] == ["pointwise"], cap.kernels
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    assert [e.op for e in cap.externs] == ["aten.randint.low"]
    kept = y != 0
    assert near(kept.sum().item(), x.numel(), 1 - p), kept.float().mean()
    eager = (kept * torch.tanh(x) * (1 / (1 - p))) * 3  # native_dropout's decomposition, on the same mask
    torch.testing.assert_close(y, eager)


def test_dropout_of_16_bit_values_keeps_1_minus_p(device, capture):
    """The mask is drawn in float32 for every dtype, as eager's kernels draw it:
    a bfloat16 draw in [0, 1) > 0.1 holds 0.1 +- 2^-8 (here 230/256 kept, 1.7e-3
    off 0.9, some 8 sigma over 2^21 values)."""
    x = torch.ones(2048, 1024, device=device, dtype=torch.bfloat16)
    with capture() as cap:
        y = compiled(lambda x: F.dropout(x, 0.1, training=True))(x)
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    assert near((y != 0).sum().item(), x.numel(), 0.9), (y != 0).double().mean()


def test_integers_and_in_place_draws(device, capture):
    """randint (and _like) over its range, uniform_ over [low, high), normal_ at its
    mean and deviation, exponential_ at 1 / lambda and never 0: all ours."""
    n = 1 << 18
    x = torch.zeros(n, device=device)

    def draws(x):
        return (torch.randint(-3, 4, (n,), device=x.device), torch.randint_like(x, 5), (x * 1).uniform_(-2, 3),
                (x * 1).normal_(1, 2), (x * 1).exponential_(4.0))

    with capture() as cap:
        ints, like, u, z, e = compiled(draws)(x)
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    assert ints.dtype == torch.int64 and like.dtype == torch.float32
    assert torch.equal(torch.bincount(ints + 3, minlength=7) > 0, torch.ones(7, dtype=torch.bool, device=device))
    assert ints.min() == -3 and ints.max() == 3 and near((ints == 3).sum().item(), n, 1 / 7)
    assert set(like.unique().tolist()) == {0.0, 1.0, 2.0, 3.0, 4.0}
    assert -2 <= u.min() and u.max() < 3 and abs(u.double().mean() - 0.5) < SIGMAS * 5 / math.sqrt(12 * n)
    assert abs(z.double().mean() - 1) < SIGMAS * 2 / math.sqrt(n) and abs(z.double().std() - 2) < 0.02
    assert e.min() > 0 and torch.isfinite(e).all() and abs(e.double().mean() - 0.25) < SIGMAS * 0.25 / math.sqrt(n)


def test_normal_of_tensors_bernoulli_of_tensors_and_other_distributions(device, capture):
    """normal with a tensor mean and/or std (broadcast) or of numbers in a size,
    bernoulli_ with a tensor of chances, log_normal_, cauchy_ and geometric_: all
    ours, each at its law."""
    rows = 1 << 14
    cols = torch.arange(8, device=device, dtype=torch.float32)
    mean, std = cols.expand(rows, 8), (cols + 1).expand(rows, 8)
    chance = torch.tensor([0.0, 0.1, 0.5, 0.9, 1.0, 0.3, 0.7, 0.2], device=device)
    x = torch.zeros(rows, 8, device=device)

    def draws(x, mean, std, chance):
        return (torch.normal(mean, std), torch.normal(mean, 2.0), torch.normal(0.5, std),
                torch.normal(-1.0, 3.0, size=x.shape, device=x.device),
                torch.empty_like(x).bernoulli_(chance), torch.empty_like(x).log_normal_(1, 0.5),
                torch.empty_like(x).cauchy_(2, 3), torch.empty_like(x).geometric_(0.25))

    with capture() as cap:
        both, of_mean, of_std, of_numbers, hits, logn, cau, geo = compiled(draws)(x, mean, std, chance)
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    n = x.numel()
    for z in ((both - mean) / std, (of_mean - mean) / 2, (of_std - 0.5) / std, (of_numbers + 1) / 3,
              (logn.log() - 1) / 0.5):
        z = z.double()
        assert abs(z.mean()) < SIGMAS / math.sqrt(n) and abs(z.std() - 1) < 0.02, (z.mean(), z.std())
    assert set(hits.unique().tolist()) <= {0.0, 1.0}
    assert all(near(k, rows, p) if 0 < p < 1 else k == rows * p for k, p in zip(hits.sum(0).tolist(), chance.tolist()))
    assert near(((cau - 2).abs() < 3).sum().item(), n, 0.5)  # the quartiles: median -+ sigma
    assert geo.min() == 1 and torch.equal(geo, geo.round()) and near((geo == 1).sum().item(), n, 0.25)
    assert abs(geo.double().mean() - 4) < SIGMAS * math.sqrt(12 / n)


@pytest.mark.parametrize("draw, error", [(lambda x: x.bernoulli_(1.5), "bernoulli_ expects p"),
                                          (lambda x: x.uniform_(2, 1), "uniform_ expects to return"),
                                          (lambda x: x.geometric_(1.0), "geometric_ expects p"),
                                          (lambda x: x.exponential_(0.0), "exponential_ expects lambda")],
                         ids=["bernoulli", "uniform", "geometric", "exponential"])
def test_arguments_aten_refuses_raise_its_error(device, draw, error):
    """A number ATen refuses is refused as eager refuses it (left to ATen, or in
    tracing), not drawn from."""
    with pytest.raises(RuntimeError, match=error):
        compiled(lambda x: draw(x.clone()))(torch.zeros(5, device=device))


def test_float64_numbers_have_53_bits(device, capture):
    """float64 random numbers are ours, each uniform value of two 32-bit numbers:
    multiples of 2^-53, not of float32's 2^-24; rand in [0, 1), randn and normal
    at their moments, exponential_ > 0 and finite."""
    n = 1 << 16
    x = torch.zeros(n, device=device, dtype=torch.float64)
    with capture() as cap:
        u, z, m, e = compiled(lambda x: (torch.rand_like(x), torch.randn_like(x), torch.normal(x + 1, 2.0),
                                         torch.empty_like(x).exponential_(2.0)))(x)
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    assert {t.dtype for t in (u, z, m, e)} == {torch.float64}
    assert 0 <= u.min() and u.max() < 1 and ((u * 2**24) % 1 != 0).double().mean() > 0.99
    assert torch.equal(u, torch.floor(u * 2**53) / 2**53)
    for w in (z, (m - 1) / 2):
        assert abs(w.mean()) < SIGMAS / math.sqrt(n) and abs(w.std() - 1) < 0.02, (w.mean(), w.std())
    assert e.min() > 0 and torch.isfinite(e).all() and abs(e.mean() - 0.5) < SIGMAS * 0.5 / math.sqrt(n)


def test_rrelu_in_training_draws_its_slopes(device, capture):
    """RReLU is ours: in training each value at or below 0 takes a slope uniform in
    [lower, upper), the others pass, and the backward multiplies by the same
    slopes; out of training it is a leaky relu of the mean slope."""
    x = torch.randn(4096, 33, device=device, requires_grad=True)
    with capture() as cap:
        y = compiled(lambda x: F.rrelu(x, 0.1, 0.3, training=True))(x)
        y.sum().backward()
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    negative = x.detach() <= 0
    slopes = y.detach()[negative] / x.detach()[negative]
    assert torch.equal(y.detach()[~negative], x.detach()[~negative])
    assert 0.1 <= slopes.min() and slopes.max() < 0.3 + 1e-6
    assert abs(slopes.double().mean() - 0.2) < SIGMAS * 0.2 / math.sqrt(12 * slopes.numel())
    torch.testing.assert_close(x.grad[negative], slopes)
    assert torch.equal(x.grad[~negative], torch.ones_like(x.grad[~negative]))
    with capture() as cap:  # out of training: a leaky relu of the mean slope
        y = compiled(lambda x: F.rrelu(x, 0.1, 0.3, training=False))(x.detach())
    assert not cap.fallbacks and torch.allclose(y, F.leaky_relu(x.detach(), 0.2)), cap.fallbacks


def test_sampling_by_the_gumbel_max_trick(device, capture):
    """argmax(probs / exponential_): gpt-fast's sample without a sync is one
    reduction kernel; picks follow the probabilities, never one of probability 0."""
    probs = torch.tensor([0.1, 0.0, 0.2, 0.7], device=device).repeat(50000, 1)
    with capture() as cap:
        picks = compiled(lambda p: torch.argmax(p / torch.empty_like(p).exponential_(1), dim=-1))(probs)
    assert [k.kind for k in cap.kernels] == ["reduction"] and not cap.fallbacks, (cap.kernels, cap.fallbacks)
    counts = torch.bincount(picks, minlength=4).tolist()
    assert counts[1] == 0 and all(near(c, 50000, p) for c, p in zip(counts, [0.1, 0.0, 0.2, 0.7]) if p), counts


def test_multinomial_is_a_reduction_that_checks_its_rows(device, capture):
    """torch.multinomial(p, 1) (nanoGPT's sample) is the exponential race, the argmax
    of p / e, in one reduction kernel beside its checks: picks follow the weights
    (1, 0, 2, 7, not normalized), never one of weight 0, and a 1-D p gives one pick;
    float64 weights are checked in float64.
    A negative, NaN or infinite weight, or a row of zeros, raises, as in eager (on
    the CPU: on a GPU it is a device-side assert, which ends the process's CUDA
    context)."""
    sample = compiled(lambda w: torch.multinomial(w, 1))
    weights = torch.tensor([1.0, 0.0, 2.0, 7.0], device=device).repeat(50000, 1)
    with capture() as cap:
        picks = sample(weights)
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    assert [k.kind for k in cap.kernels] == ["reduction"] * 2, cap.kernels  # over each row, then over the rows
    assert picks.shape == (50000, 1) and picks.dtype == torch.int64
    counts = torch.bincount(picks.flatten(), minlength=4).tolist()
    assert counts[1] == 0 and all(near(c, 50000, p) for c, p in zip(counts, [0.1, 0.0, 0.2, 0.7]) if p), counts
    assert sample(weights[0]).shape == (1,)
    huge = torch.tensor([[1e300, 0.0, 2e300]], device=device, dtype=torch.float64)  # finite in float64 only
    assert sample(huge).item() in (0, 2)
    if device.type == "cuda":
        return
    for row, value in [(3, -0.1), (5, float("nan")), (7, float("inf")), (9, 0.0)]:
        bad = weights.clone()
        bad[row, 2] = value
        if value == 0:  # a row of zeros
            bad[row] = 0
        with pytest.raises(RuntimeError, match="probability tensor contains"):
            sample(bad)


def test_a_seed_repeats_a_call_and_calls_differ(device):
    f = compiled(lambda x: F.dropout(x, 0.5, training=True) + torch.rand_like(x))
    x = torch.randn(4097, device=device)
    torch.manual_seed(7)
    first = f(x)
    torch.manual_seed(7)
    assert torch.equal(f(x), first)
    assert not torch.equal(f(x), first)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_uniform_normal_and_bernoulli_numbers(device, capture, dtype):
    """rand: in [0, 1) (none rounds up to 1), even over 16 bins (chi-square), and
    below 0.01 a hundredth of the time: 16-bit values are drawn at their own
    resolution (multiples of 2^-8 would give bfloat16 3/256); randn: mean 0,
    deviation 1; bernoulli: p."""
    n = 1 << 18
    x = torch.zeros(n, device=device, dtype=dtype)
    with capture() as cap:
        u, z, b = compiled(lambda x: (torch.rand_like(x), torch.randn_like(x), torch.bernoulli(x + 0.25)))(x)
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    assert u.dtype == z.dtype == b.dtype == dtype
    u = u.double()
    assert 0 <= u.min() and u.max() < 1 and near((u < 0.01).sum().item(), n, 0.01)
    counts = torch.bincount((u * 16).long(), minlength=16).double()
    assert ((counts - n / 16) ** 2 / (n / 16)).sum() < 44.3  # chi-square, 15 degrees: P(over) 1e-4
    z = z.double()
    assert abs(z.mean()) < SIGMAS / math.sqrt(n) and abs(z.std() - 1) < 0.01, (z.mean(), z.std())
    assert near(b.double().sum().item(), n, 0.25) and set(b.unique().tolist()) <= {0.0, 1.0}


# masks drawn in the forward: y = x * (what the mask lets through), the mask read off y
MASKED = {
    "dropout": lambda x: F.dropout(torch.tanh(x), 0.3, training=True),
    "dropout in place": lambda x: torch.tanh(F.dropout(x * 2, 0.3, training=True, inplace=True)),
    "bernoulli": lambda x: torch.tanh(x) * torch.bernoulli(torch.full_like(x, 0.6)),
    "rand": lambda x: torch.tanh(x) * (torch.rand(x.shape, device=x.device) > 0.4),
}


@pytest.mark.parametrize("form", MASKED)
def test_the_backward_uses_the_forward_mask(device, capture, form):
    """AOTAutograd saves the mask (random ops are not recomputed): the gradient
    flows exactly where the forward kept values."""
    x = torch.randn(37, 513, device=device, requires_grad=True)
    w = torch.randn(37, 513, device=device)
    with capture() as cap:
        y = compiled(MASKED[form])(x)
        (y * w).sum().backward()
    assert {g.kind for g in cap.graphs} == {"forward", "backward"}
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]
    kept, xd = y.detach() != 0, x.detach()
    expected = {"dropout": w * kept * (1 / 0.7) * (1 - torch.tanh(xd) ** 2),
                "dropout in place": w * (1 - y.detach() ** 2) * kept * (1 / 0.7) * 2,
                "bernoulli": w * kept * (1 - torch.tanh(xd) ** 2),
                "rand": w * kept * (1 - torch.tanh(xd) ** 2)}[form]
    torch.testing.assert_close(x.grad, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape", [(5, 132), (3, 8196), (3, 9001), (2, 1 << 20)], ids=str)
def test_a_reduction_draws_the_numbers_its_pointwise_neighbour_stores(device, shape):
    """A reduction over random integers draws them in its own kernel (by rows held
    whole, looped over, split across programs on a GPU, or each by itself on rows
    of 9001): its sums equal those of the numbers a pointwise kernel stores, and
    these are the numbers a graph drawing them alone gives (31 random bits each,
    so a block drawn twice or a word out of place shows)."""
    if shape[1] > 10000 and device.type != "cuda":
        pytest.skip("rows split across programs: a GPU's plan (the interpreter takes 18 s)")
    x = torch.zeros(shape, dtype=torch.int64, device=device)
    out = {}
    for form, fn in [("sum", lambda x: (lambda w: (w, w.sum(-1)))(torch.randint_like(x, 2**31))),
                     ("alone", lambda x: torch.randint_like(x, 2**31))]:
        torch._dynamo.reset()
        torch.manual_seed(0)
        out[form] = compiled(fn)(x)
    (w, sums), alone = out["sum"], out["alone"]
    assert torch.equal(w, alone)
    assert torch.equal(sums, w.sum(-1))
    assert torch.unique(w).numel() > 0.99 * w.numel()


def _row_draws(x):
    u, z = torch.rand_like(x), torch.randn_like(x)
    return u, z, (u * x).sum(-1) + z.amax(-1)


@pytest.mark.parametrize("form", ["block", "rows", "looped rows", "tile"])
def test_cpp_and_triton_draw_the_same_numbers(form):
    """One generator on both CPU targets (number n is word n % 4 of Philox4x32-10's
    counter n // 4): a kernel's numbers do not depend on the codegen that rendered
    it (normal values to the ulps of each one's log and cos). A 1-D Triton block, or
    a reduction's rows (held whole or looped over), draw 4 numbers a Philox call
    (_philox_words, for values of one or two numbers; the interpreter's 1-D blocks
    hold 2^16 elements, so here 2, the second partial); a 2-D tile (here for a
    transpose) draws each by itself (_philox)."""
    pytest.importorskip("triton")
    fn, args = {"block": (lambda x: (torch.rand_like(x), torch.randn_like(x)), (torch.zeros(2**16 + 1001),)),
                "rows": (_row_draws, (torch.randn(67, 132),)),
                "looped rows": (_row_draws, (torch.randn(5, 8196),)),
                "tile": (lambda a, b: (torch.rand_like(a) + b.t(), torch.randn_like(a)),
                         (torch.zeros(67, 130), torch.zeros(130, 67)))}[form]
    out = {}
    for target in ("cpp", "triton"):
        torch._dynamo.reset()
        with config.patch(cpu_target=target), compiler.capture() as cap:
            torch.manual_seed(3)
            out[target] = compiled(fn)(*args)
    kinds = {k.kind for k in cap.kernels}
    assert kinds == ({"pointwise", "reduction"} if "rows" in form else {"pointwise"}), kinds
    assert ("for roffset" in cap.kernels[0].source) == (form == "looped rows")
    helper = "_philox(" if form == "tile" else "_philox_words("
    assert all(helper in k.source for k in cap.kernels), [k.source for k in cap.kernels]
    (u, *normal), (v, *other) = out["cpp"], out["triton"]
    assert torch.equal(u, v)
    torch.testing.assert_close(normal, other, rtol=1e-5, atol=1e-5)


def test_the_seed_leaves_the_blocks_as_they_are():
    """Block sizes follow the bytes of the elements a kernel streams, and the seed
    (one int64) is not streamed: a LayerNorm after dropout holds its rows of 4096
    float32 in registers, as it does without (a loop over them reads each 3 times)."""
    pytest.importorskip("triton")
    with config.patch(cpu_target="triton"), compiler.capture() as cap:
        compiled(lambda x, h: F.layer_norm(x + F.dropout(h, 0.1), (4096,)))(torch.randn(3, 4096), torch.randn(3, 4096))
    [kernel] = [k for k in cap.kernels if k.kind == "reduction"]
    assert meta_of(kernel.source)["persistent"], kernel.source
