"""The C++ codegen's performance paths give eager's results: reductions over an
outer axis walk r once for a block of x lanes, float sums over a row accumulate in
lanes of r, long float sums add in chunks (as accurate as eager's cascade sum),
a costly row value (softmax's exp) is kept in a row buffer for the later
loops, float exp is an inlined polynomial within an ulp, float sin and cos
are too (within 1.7 ulp, with libm's beyond their range), a division by a row value multiplies by its reciprocal where that is exact enough, equal reductions are made once, a loop indexed by r0 // d runs as two loops (a sum's too, rather than in lanes; a total's
threads share chunks of the outer one), the NaN flag of max/min lives in an int (so
the loop vectorizes), float16 moves as bits with software conversions that round as
ATen does (a half read back as float is rounded in float; a loop storing halves vectorizes),
float -> bf16 picks NaN by a mask (its loops vectorize),
a bool becomes a float by a select, dropout's random word is picked by selects and
cat's and pad's loads are masked rather than clamped (so their loops vectorize), a roll is a cat
of two slices, argmax walks a row in lanes (max(dim) keeps its value), a kernel compiled while torch runs one thread has no parallel region, bool max and
min accumulate in ints (g++ 13 miscompiled bool ones), a
select on a bool tensor vectorizes, and math-heavy kernels ask for 512-bit vectors."""
from __future__ import annotations

import contextlib
import re

import pytest
import torch
import torch.nn.functional as F

import compiler
from compiler.codegen import cpp

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


def _sources(cap: compiler.Capture) -> str:
    return "\n".join(k.source for k in cap.kernels)


@pytest.mark.parametrize("shape, dim", [((300, 70), 0), ((37, 65, 19), 1), ((2, 130, 2, 70), 1), ((100, 3, 70), (0, 1))])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_outer_axis_reductions_are_blocked_over_x(check_compiled, shape, dim, dtype):
    torch.manual_seed(0)
    x = torch.randn(shape).to(dtype)
    x.view(-1)[5] = float("nan")  # max/min propagate it, per lane

    def fn(x):
        return x.sum(dim), x.amax(dim), (x > 0.5).any(dim), x.var(dim), torch.logsumexp(x.float(), dim)

    # a float32 sum of 300 values that nearly cancel can miss atol 1e-5 by summation order alone
    long_sum = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else None
    cap = check_compiled(fn, x, tol=long_sum)
    assert "xi < xn" in _sources(cap), "no kernel walked r for a block of x lanes"


@pytest.mark.parametrize("dim", [0, 1])
def test_softmax_and_argmax_over_either_axis(check_compiled, dim):
    x = torch.randn(129, 70)
    check_compiled(lambda x: (x.softmax(dim) * x.sigmoid(), x.argmax(dim), x.argmin(dim)), x)


@pytest.mark.parametrize("cols", [64, 777, 1024])  # one block of lanes, a partial last block, whole blocks
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_row_sums_accumulate_in_lanes(check_compiled, cols, dtype):
    x = (torch.randn(37, cols) * 3 + 1).to(dtype)
    x[3, 5] = float("nan")
    x[4, cols - 1] = float("inf")
    x[5, :2] = torch.tensor([float("inf"), -float("inf")])
    w = torch.randn(cols).to(dtype)
    ln = torch.nn.functional.layer_norm

    def fn(x, w):
        return x.sum(-1), x.var(-1), ln(x, (cols,), w), x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True))

    cap = check_compiled(fn, x, w)
    assert "_lanes[ri] = " in _sources(cap)


LONG_SUMS = {  # (fn, shape): each of the loop forms a float sum takes
    "whole tensor": (lambda x: (x * x).sum(), (64, 50257)),
    "rows in lanes": (lambda x: (x * x).sum(-1), (4, 1000003)),
    "rows of vector math": (lambda x: x.sigmoid().sum(-1), (4, 1000003)),
    "columns": (lambda x: x.abs().sum(0), (100003, 64)),
    "rows as two loops": (lambda x: (x * torch.arange(1.0, 65.0).view(1, 64, 1)).abs().sum((1, 2)), (4, 64, 4096)),
    "logcumsumexp, in float64 as eager": (lambda x: torch.logcumsumexp(x, -1), (6, 9001)),
}


@pytest.mark.parametrize("case", sorted(LONG_SUMS))
def test_long_float_sums_are_as_accurate_as_eager(fresh_dynamo, case):
    """A float sum of a million values adds them in chunks (see cpp._sum_chunk):
    on one accumulator a thread, (x * x).sum() over [64, 50257] was off by 5e-5
    of its value, eager (a cascade sum) by 5e-8."""
    fn, shape = LONG_SUMS[case]
    torch.manual_seed(0)
    x = torch.randn(shape)
    exact = fn(x.double())
    got = torch.compile(fn, backend="fusion")(x)

    def error(y):
        return float(((y.double() - exact).abs() / exact.abs()).max())

    # the floor: a vectorized sigmoid's own rounding errors do not cancel over a
    # million values (2.3e-7 on an AMD EPYC without AVX-512); one accumulator is 100x that
    assert error(got) <= max(4 * error(fn(x)), 5e-7), (error(got), error(fn(x)))


def test_a_sum_of_vector_math_calls_keeps_one_accumulator(check_compiled):
    x = torch.randn(9, 300)
    cap = check_compiled(lambda x: x.exp().sum(-1), x)  # each call would spill the lanes
    assert "_lanes[ri]" not in _sources(cap)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_kernel_whose_accesses_are_all_transposed_loops_in_memory_order(check_compiled, dtype):
    """x.t() * 2 and a channels-last relu keep their input's strides: the loop nest
    walks them in memory order, where the logical order walked both the load and
    the store with a stride (x.t() * 2, bf16 [1024, 8191], two threads: 29 ms, eager 1.1)."""
    x, c = torch.randn(37, 1001).to(dtype), torch.randn(37, 1).to(dtype)
    image = torch.randn(3, 20, 7, 9).to(dtype).to(memory_format=torch.channels_last)
    cases = (
        (lambda x: x.t() * 2, (x,), "[1001*x0 + x1]"),
        (lambda x, c: (x * c).t().exp(), (x, c), "[1001*x0 + x1]"),
        (lambda x, b: (x + b.view(1, -1, 1, 1)).relu(), (image, torch.randn(20).to(dtype)), "[1260*x0 + 20*x1 + x2]"),
    )
    for fn, args, walk in cases:
        src = _sources(check_compiled(fn, *args))
        assert f"in_ptr0{walk}" in src and f"out_ptr0{walk}" in src, src


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_reduction_loops_over_its_reduced_dims_in_memory_order(check_compiled, dtype):
    """A sum over every dim but the batch of a channels-last image walks each sample
    as it lies in memory, where the logical order (channel outermost) read it with
    a stride (two threads, fp32 [8, 256, 28, 28]: 1.9 -> 0.2 ms, eager 0.1-0.3). A
    group norm's groups walk their channels innermost, 4 or more of them in an
    inner loop of their own, contiguous (32 groups of that image: 6.1-8.4 -> 2.7
    ms; eager 1.0-1.2, Inductor 1.4-1.5)."""
    image = torch.randn(3, 6, 9, 17).to(dtype).to(memory_format=torch.channels_last)
    assert "in_ptr0[r0 + 918*x0]" in _sources(check_compiled(lambda x: x.sum((1, 2, 3)), image))
    for channels, walk in ((12, "12*((r0) / 3) + ((r0) % 3)"), (16, "in_ptr0[r0i + 16*r0o")):
        image = torch.randn(2, channels, 5, 7).to(dtype).to(memory_format=torch.channels_last)
        w, b = torch.randn(channels).to(dtype), torch.randn(channels).to(dtype)
        src = _sources(check_compiled(lambda x, w, b: F.group_norm(x, 4, w, b), image, w, b))
        assert walk in src, src


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_transpose_loops_over_blocks_inner_along_most_contiguous_accesses(check_compiled, dtype):
    """x + y.t() walks blocks of CPP_TILE x CPP_TILE (sizes that leave partial
    blocks here), so the transposed read finds its lines in L1 again; the inner loop
    runs along x0 for x + y.t() (out and x contiguous there), along y0 for x.t() + y
    (whose output keeps x.t()'s strides). Two threads, [2049, 2047]: x.t() + y fp32
    41 -> 3-7 ms, bf16 34 -> 3-4 (eager 9-15). The outermost loop steps over blocks
    of the other dim, so that a thread's blocks follow one another along the
    contiguous accesses (two threads, [2048, 2048], against Inductor: x.t() + y
    bf16 3.3x -> 2.4x, (x.t() * 2).contiguous() fp32 1.42x -> 1.07-1.21x)."""
    x, y = torch.randn(70, 45).to(dtype), torch.randn(45, 70).to(dtype)
    inner = {}
    for name, fn in (("x + y.t()", lambda x, y: x + y.t()), ("y.t() + x", lambda x, y: y.t() + x)):
        src = _sources(check_compiled(fn, x, y))
        loops = re.findall(r"for \(int64_t (x\d) = x\db; [^\n]*\n *\{", src)  # not a staged block's copy
        assert f"x0b += {cpp.CPP_TILE}" in src and f"x1b += {cpp.CPP_TILE}" in src and len(loops) == 2, src
        inner[name] = loops[-1]
        assert re.findall(r"for \(int64_t (x\d)b = 0; ", src) == loops, src  # blocks: outer, then inner
    assert inner == {"x + y.t()": "x1", "y.t() + x": "x0"}, inner


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_transpose_tie_goes_to_its_stores(check_compiled, dtype):
    """(x + b).t().contiguous(): the bias row b moves along one dim only and has no
    vote; x and the output tie, and the inner loop runs along the output, whose
    stores would otherwise scatter, while x's block is copied by transposes
    (two threads, fp32 [2048, 2048]: 3.5-4.4x Inductor -> 0.90-0.97x)."""
    x, b = torch.randn(70, 45).to(dtype), torch.randn(45).to(dtype)
    src = _sources(check_compiled(lambda x, b: (x + b).t().contiguous(), x, b))
    loops = re.findall(r"for \(int64_t (x\d) = x\db; [^\n]*\n *\{", src)
    assert loops[-1] == "x1" and "out_ptr0[70*x0 + x1]" in src and "fusion_transpose8(" in src, src


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_a_transposed_read_is_copied_in_blocks_of_8x8_transposes(check_compiled, dtype):
    """x.t() + y (output strided as x.t()) reads y across its rows: each whole
    block of y is copied by 8 x 8 transposes (fusion_transpose8) into a buffer that
    the inner loop reads contiguously, a partial block (70 x 45 leaves some on both
    edges) element by element. float64 has no such helper: it reads in place."""
    for rows, cols in ((64, 96), (70, 45)):
        x, y = torch.randn(rows, cols).to(dtype), torch.randn(cols, rows).to(dtype)
        src = _sources(check_compiled(lambda x, y: x.t() + y, x, y))
        assert ("fusion_transpose8(" in src) == (dtype != torch.float64), src
    # an offset and a row stride that is not the row's length: a slice of y
    src = _sources(check_compiled(lambda x, y: x.t() * 2 + y[3:, 5:69], torch.randn(64, 47).to(dtype),
                                  torch.randn(50, 80).to(dtype)))
    assert ("fusion_transpose8(" in src) == (dtype != torch.float64), src


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_a_blocked_reductions_transposed_stores_leave_a_tile_at_a_time(check_compiled, dtype):
    """softmax(x.t()) and layer_norm(x.t()) reduce down x's columns in blocks of
    lanes and store each result row contiguously along r: a tile of STORE_TILE
    steps is staged and written out by 8 x 8 transposes (fusion_transpose8) where
    whole, element by element on the edges (rows and lanes that leave partial
    tiles here: 203 x 77; 9 lanes, not a multiple of 8). float64 has no such helper."""
    for x in (torch.randn(203, 77).to(dtype), torch.randn(64, 9).to(dtype)):
        for fn in (lambda x: x.t().softmax(-1), lambda x: F.layer_norm(x.t(), (x.shape[0],)) * 2):
            src = _sources(check_compiled(fn, x))
            assert ("stored0[(r0 - r0t) * " in src) == (dtype != torch.float64), src
            assert ("fusion_transpose8(" in src) == (dtype != torch.float64 and x.shape[1] >= 64), src
    # a store contiguous along the lanes stays in place (x - x.mean(0), blocked too)
    src = _sources(check_compiled(lambda x: x - x.mean(0), torch.randn(203, 77).to(dtype)))
    assert "stored0" not in src, src


@contextlib.contextmanager
def _threads(n: int):
    """torch runs n threads inside (kernels compiled there are built for them)."""
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("threads", [1, 2])
def test_one_thread_kernels_have_no_parallel_region(check_compiled, threads):
    x = torch.randn(300, 1000)
    with _threads(threads):
        cap = check_compiled(lambda x: (x.sin() * 2, x.softmax(-1)), x)
    assert ("omp parallel" in _sources(cap)) == (threads > 1)


@pytest.mark.parametrize("threads", [1, 2])
def test_bool_max_and_min_accumulate_in_an_int(check_compiled, threads):
    """g++ 13 (-O3, a Sapphire Rapids host) built a loop whose `omp simd` reduction
    took the max and min of bool accumulators into a kernel that segfaulted; g++ 12
    built the same source fine. Bool accumulators are ints, as any/all's are."""
    torch.manual_seed(0)
    x = torch.rand(3, 11001) > 0.5
    with _threads(threads):
        cap = check_compiled(lambda x: (x.amax(1), x.amin(1), x.amax(), x.amin(), x.max(), x.min()), x)
    src = _sources(cap)
    assert "reduction(max:" in src and "reduction(min:" in src, src
    assert not re.search(r"\bbool acc_", src), src


def test_costly_row_values_are_kept_for_the_later_loops(check_compiled):
    x = torch.randn(65, 999)
    x[3, 10] = float("inf")
    x[4] = float("-inf")
    cap = check_compiled(lambda x: x.softmax(-1), x)
    (kernel,) = cap.kernels
    body = kernel.source.split('extern "C" void')[-1]  # the prelude declares expf too
    assert body.count("expf(") == 1, "exp computed in two loops"
    assert "row0[r0] = " in body


def test_float_exp_is_inlined_and_within_an_ulp():
    """Over its whole range: overflow to inf, subnormal results, underflow to 0,
    NaN and the infinities, against exp in float64 rounded to float."""
    x = torch.cat([torch.linspace(-110, 92, 200_003), torch.randn(10_000) * 5,
                   torch.tensor([float("nan"), float("inf"), float("-inf"), 88.72, 88.73, -87.3, -103.9, -104.0, 0.0, -0.0])])
    with compiler.capture() as cap:
        got = torch.compile(lambda x: (x.exp(), torch.sigmoid(x)), backend="fusion")(x)
    body = _sources(cap).split('extern "C" void')[-1]
    assert "fusion_expf(" in body and " expf(" not in body
    exact = x.double().exp()
    ulp = _ulps(got[0], x, torch.exp)
    finite = exact.isfinite() & (exact < torch.finfo(torch.float32).max)
    assert ulp[finite].max() <= 1.0, x[finite][ulp[finite].argmax()]
    torch.testing.assert_close(got[0], x.exp(), equal_nan=True)
    torch.testing.assert_close(got[1], torch.sigmoid(x), equal_nan=True)


@pytest.mark.parametrize("shape, groups", [((2, 12, 5, 7), 4), ((3, 16, 9, 9), 2)])
def test_a_loop_indexed_by_r_over_d_runs_as_two_loops(check_compiled, shape, groups):
    """GroupNorm's normalize loop reads a weight at r0 // (H*W): the loop over r is
    two loops, the outer over channels, so the index is constant along the
    vectorized inner one (a division per element ran 3x slower than eager)."""
    torch.manual_seed(0)
    norm = torch.nn.GroupNorm(groups, shape[1]).eval()
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
        cap = check_compiled(norm, torch.randn(shape) * 2 + 1, tol=dict(rtol=1e-4, atol=1e-4))
    body = _sources(cap).split('extern "C" void')[-1]
    hw = shape[2] * shape[3]
    assert f"for (int64_t r0i = 0; r0i < {hw}; r0i++)" in body and f"/ {hw})" not in body


@pytest.mark.parametrize("case", ["mse of a flip", "channel-weighted sum"])
def test_a_sum_indexed_by_r_over_d_runs_as_two_loops_rather_than_lanes(check_compiled, case):
    """A float sum whose loads index by r0 // d, d not a multiple of the sum's lanes
    (a loss against a flipped target, d = 300; a sum over channels of 7 x 7, d = 49):
    two loops rather than lanes, which divided r0 by d at every element, a 64-bit
    division that kept the loop scalar."""
    torch.manual_seed(0)
    if case == "mse of a flip":
        fn, args, d = (lambda x: F.mse_loss(x, x.flip(0))), (torch.randn(64, 300),), 300
    else:
        fn, args, d = (lambda x, w: (x * w.view(1, 128, 1, 1)).sum((1, 2, 3))), (torch.randn(4, 128, 7, 7), torch.randn(128)), 49
    (kernel,) = check_compiled(fn, *args, tol=dict(rtol=1e-4, atol=1e-4)).kernels
    body = kernel.source.split('extern "C" void')[-1]
    assert f"for (int64_t r0i = 0; r0i < {d}; r0i++)" in body and f"/ {d})" not in body, body


@pytest.mark.parametrize("case", ["mse of a flip", "channel-weighted total", "l1 against a roll"])
def test_a_total_indexed_by_r_over_d_splits_its_threads_over_r0o(check_compiled, case):
    """A float sum over a whole tensor, split across threads, whose loads index by
    r0 // d ((r0 // d) % m for a channel's weight; a roll's row is computed from
    r0 // d): the threads share chunks of r0o and the inner loop over r0i reads
    contiguously, rather than a division per element (5-11x Inductor's time)."""
    torch.manual_seed(0)
    if case == "mse of a flip":
        fn, args, d = (lambda x: F.mse_loss(x, x.flip(0))), (torch.randn(256, 1000),), 1000
    elif case == "channel-weighted total":
        fn, args, d = (lambda x, w: (x * w.view(1, 128, 1, 1)).sum()), (torch.randn(16, 128, 7, 7), torch.randn(128)), 49
    else:
        fn, args, d = (lambda x: F.l1_loss(x, x.roll(1, 0))), (torch.randn(64, 4096),), 4096
    with _threads(2):
        (kernel,) = check_compiled(fn, *args, tol=dict(rtol=1e-4, atol=1e-4)).kernels
    body = kernel.source.split('extern "C" void')[-1]
    assert "#pragma omp parallel for reduction(+:" in body and "r0o = r0c" in body, body
    assert f"for (int64_t r0i = 0; r0i < {d}; r0i++)" in body and f"/ {d})" not in body, body


def _ulps(got, x, op):
    """Errors in units of the float spacing at the exact result (2^-24 in [0.5, 1))."""
    exact = op(x.double())
    _, e = torch.frexp(exact)
    return (got.double() - exact).abs() / torch.ldexp(torch.ones_like(exact), (e - 24).clamp(min=-149))


def test_float_sin_cos_are_inlined_within_1_7_ulp_and_fall_back_beyond_their_range():
    """In range (|x| <= 65536, multiples of pi/2 included, where the reduction
    cancels): the inlined polynomial, within 1.7 ulp. An argument beyond it (or
    NaN, inf) runs the kernel again with libm's sinf/cosf: eager's results there."""
    torch.manual_seed(0)
    near = (torch.arange(-40_000, 40_000, 7, dtype=torch.float64) * (torch.pi / 2)).float()
    x = torch.cat([torch.linspace(-65536, 65536, 100_003), torch.randn(10_000) * 4, near])
    fn = torch.compile(lambda x: (x.sin(), x.cos() * 2), backend="fusion")
    with compiler.capture() as cap:
        got = fn(x)
    body = _sources(cap).split('extern "C" void')[-1]
    assert "fusion_sinf(" in body and "fusion_cosf(" in body and " sinf(" in body  # the fallback loop
    assert _ulps(got[0], x, torch.sin).max() <= 1.7
    assert _ulps(got[1] / 2, x, torch.cos).max() <= 1.7
    for bad in (float("nan"), float("inf"), 1e6, -3e38):
        y = x.clone()
        y[12345] = bad
        out = fn(y)
        torch.testing.assert_close(out[0], y.sin(), equal_nan=True, rtol=0, atol=2.5e-7)
        torch.testing.assert_close(out[1], y.cos() * 2, equal_nan=True, rtol=0, atol=5e-7)


def test_float_sin_in_place_keeps_libm(check_compiled):
    """A kernel that writes over its input cannot run twice: no fast path there."""
    x = torch.randn(1000) * 3
    with compiler.capture() as cap:
        torch.compile(lambda x: x.sin_(), backend="fusion")(x.clone())
    body = _sources(cap).split('extern "C" void')[-1]
    assert " sinf(" in body and "fusion_sinf(" not in body
    check_compiled(lambda x: x.clone().sin_() + 1, x)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_division_by_a_row_value_multiplies_by_its_reciprocal_where_that_is_exact_enough(check_compiled, dtype):
    x = torch.randn(40, 300, dtype=dtype).abs() + 0.1
    tiny, huge = torch.finfo(dtype).tiny, torch.finfo(dtype).max
    x[1] *= tiny / 1000  # a subnormal row sum: its reciprocal overflows
    x[2] *= huge / 1000  # a row sum near the largest float: its reciprocal is subnormal
    x[3] = 0  # 0 / 0
    x[4, 7] = float("inf")
    x[5, 9] = float("nan")
    x[6] *= -tiny * 2  # negative, a row sum whose reciprocal is normal again
    cap = check_compiled(lambda x: (x / x.sum(-1, keepdim=True), x.softmax(-1), x / x.amax(-1, keepdim=True)), x)
    body = _sources(cap).split('extern "C" void')[-1]
    assert "fusion_recip_ok(" in body
    y = torch.randn(40, 300, dtype=dtype)
    assert re.search(r"\(tmp\d+ / 300\.0", _sources(check_compiled(lambda y: y - y.mean(-1, keepdim=True), y)))


def test_long_rows_compute_again_rather_than_keep(check_compiled):
    x = torch.randn(2, cpp.ROW_BUFFER_MAX_BYTES // 4 + 1)
    cap = check_compiled(lambda x: x.softmax(-1), x)
    assert "row0" not in _sources(cap)


def test_equal_reductions_are_made_once(check_compiled):
    x = torch.randn(33, 777)
    cap = check_compiled(lambda x: (x.sum(-1), x.sum(-1) * 2, x.mean(-1)), x)  # three sums in the graph
    (kernel,) = cap.kernels
    summed = set(re.findall(r"(acc_\w+?)(?:_lanes\[ri\])? = \1(?:_lanes\[ri\])? \+ ", kernel.source))
    assert len(summed) == 1, kernel.source


def test_max_reduction_loop_has_no_bool_accumulator(check_compiled):
    x = torch.randn(16, 300)
    x[2, 7] = float("nan")
    cap = check_compiled(lambda x: (x.amax(-1), (x > 1).any(-1), (x > -3).all(-1)), x)
    assert "bool acc_" not in _sources(cap)


def test_every_half_converts_exactly(check_compiled):
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16)
    halves = bits.view(torch.float16)
    out = torch.compile(lambda h: h.float() * 1.0, backend="fusion", dynamic=False)(halves)
    finite = ~halves.isnan()
    assert torch.equal(out[finite], halves.float()[finite])
    assert out[~finite].isnan().all()


def test_float_to_half_rounds_as_aten(check_compiled):
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(-(2**31), 2**31 - 1, (200_000,), generator=g, dtype=torch.int64).to(torch.int32)
    edges = torch.tensor([0.0, -0.0, 65504.0, 65519.99, 65520.0, 6e-8, 2.98e-8, 2.99e-8, 1e-4, float("inf"), -float("inf")])
    x = torch.cat([raw.view(torch.float32), edges, torch.randn(1000) * 1e-5])
    x = x[~x.isnan()]
    out = torch.compile(lambda x: (x * 1.0).half(), backend="fusion", dynamic=False)(x)
    assert torch.equal(out.view(torch.int16), x.half().view(torch.int16))


def test_a_half_read_back_as_float_rounds_as_aten():
    """A half intermediate that only feeds float math (eager rounds after each half
    op) is rounded in float (fusion_round_h), not converted to its bits and back: the
    same value for every float, at the halves' midpoints (ties to even) and a float
    ulp either side of them, through the subnormals and the overflow to inf."""
    halves = torch.arange(0, 0x7C01, dtype=torch.int32).to(torch.int16).view(torch.float16).float()  # 0 .. inf
    mids = (halves[:-1] + halves[1:]) / 2  # exact in float
    near = torch.cat([mids, torch.nextafter(mids, torch.tensor(float("inf"))), torch.nextafter(mids, torch.tensor(0.0))])
    g = torch.Generator().manual_seed(0)
    raw = torch.randint(-(2**31), 2**31 - 1, (100_000,), generator=g, dtype=torch.int64).to(torch.int32).view(torch.float32)
    edges = torch.tensor([0.0, 65504.0, 65519.996, 65520.0, 1e-45, 1e-40, 3e38, float("inf"), float("nan")])
    x = torch.cat([near, -near, halves, raw, edges, -edges])
    with compiler.capture() as cap:
        got = torch.compile(lambda x: (x * 1.0).half().float() * 1.0, backend="fusion", dynamic=False)(x)
    assert "= fusion_round_h(" in _sources(cap)  # a use, not the helper itself
    want = x.half().float()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int32), want[~nan].view(torch.int32))  # -0.0 too


def test_a_loop_storing_halves_vectorizes(check_compiled, tmp_path):
    """The float -> half conversion picks among its cases in 32 bits: where it assigned
    its 16-bit result in branches, g++ 12 left the loop that stores a bias + GELU's
    halves scalar (20-30x the time of Inductor's over [4096, 4096])."""
    torch.manual_seed(0)
    x, b = torch.randn(37, 300).half(), torch.randn(300).half()
    (kernel,) = check_compiled(lambda x, b: F.gelu(x + b), x, b).kernels
    assert _store_loop_vectorized(kernel.source, tmp_path), kernel.source


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16])
def test_a_bool_cast_to_float_vectorizes(check_compiled, tmp_path, dtype):
    """A bool becomes a float by a select: g++ 12 vectorizes no static_cast of a bool
    to a float, and (x > 0).float() * x over [4096, 4096] ran 1.5x Inductor's time."""
    torch.manual_seed(0)
    x = torch.randn(37, 300).to(dtype)
    x[3, 5] = float("nan")
    (kernel,) = check_compiled(lambda x: ((x > 0).to(dtype) * x, x.isnan().to(dtype)), x).kernels
    assert _store_loop_vectorized(kernel.source, tmp_path), kernel.source


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("op", ["cat", "pad"])
def test_a_clamped_load_vectorizes_as_a_masked_one(check_compiled, tmp_path, op, dtype):
    """cat and constant_pad_nd read at a clamped index (their value is discarded where
    the clamp acts, see index.unclamp): the C++ load reads at the index itself where it
    is in bounds, which g++ vectorizes as a masked load (a clamped one kept the loop
    scalar: cat over [4096, 2048] ran 2.3x Inductor's time, pad 1.3-1.8x), masked by
    the bounds its loop does not already keep."""
    torch.manual_seed(0)
    x = torch.randn(37, 301).to(dtype)
    fn = (lambda x: torch.cat([x, x * 2], -1)) if op == "cat" else (lambda x: F.pad(x, (1, 2, 3, 0), value=0.5))
    (kernel,) = check_compiled(fn, x).kernels
    body = kernel.source.split('extern "C"')[-1]
    assert "fusion_min<int64_t>" not in body  # no clamp left in the kernel
    # nor a bound its loop keeps: the cat's x1 < 602, the pad's x0 < 40
    assert "(x1 < 602)" not in body and "(x0 < 40)" not in body, body
    assert _store_loop_vectorized(kernel.source, tmp_path), kernel.source


def test_a_dropout_loop_vectorizes(tmp_path):
    """fusion_philox picks the offset's word of its block by selects: indexed out of an
    array, it kept dropout's loop scalar (F.dropout over [4096, 4096] bf16 ran 1.7x
    Inductor's time)."""
    torch._dynamo.reset()
    x = torch.randn(37, 300)
    with compiler.capture() as cap:
        out = torch.compile(lambda x: F.dropout(x, 0.25, training=True), backend="fusion")(x)
    kept = out != 0
    assert 0.65 < kept.float().mean() < 0.85
    torch.testing.assert_close(out[kept], x[kept] / 0.75)
    (kernel,) = cap.kernels
    assert "fusion_philox(" in kernel.source
    # Philox's 32 x 32 -> 64-bit products on packed lanes (g++ reports the vectorized
    # loop at the first line of the inlined Philox, not inside the kernel's loop)
    assert re.search(r"\bvpmuludq\s+%[yz]mm", _assembly(kernel.source, tmp_path)), kernel.source


def _store_loop_vectorized(source: str, tmp_path) -> bool:
    """Whether g++ vectorizes the loop around the kernel's first store."""
    lines = source.splitlines()
    store = next(n for n, line in enumerate(lines, 1) if "out_ptr0[" in line)
    loop = max(n for n, line in enumerate(lines[:store], 1) if line.lstrip().startswith("for ("))
    return bool(_vectorized_lines(source, tmp_path) & set(range(loop, store + 1)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_16_bit_constants_are_stored_as_their_bits(check_compiled, dtype):
    x = torch.randn(8, 5).to(dtype)
    check_compiled(lambda x: (torch.full_like(x, 2.5), torch.where(x > 0, x, -1.25)), x)


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_division_by_zero_raises_instead_of_killing_the_process(dtype):
    torch._dynamo.reset()
    f = torch.compile(lambda a, b: (a // b) + (a % b) + torch.fmod(a, b), backend="fusion")
    a = torch.randint(-50, 50, (1003,), dtype=dtype)
    b = torch.randint(1, 9, (1003,), dtype=dtype)
    expected = (a // b) + (a % b) + torch.fmod(a, b)
    assert torch.equal(f(a, b), expected)
    b[517] = 0
    with pytest.raises(ZeroDivisionError, match="integer division by zero in kernel"):
        f(a, b)
    b[517] = 3
    assert torch.equal(f(a, b), (a // b) + (a % b) + torch.fmod(a, b))  # the flag was cleared


@pytest.mark.filterwarnings("ignore:.*degrees of freedom")  # std of one element, in eager
def test_products_are_rounded_before_they_cancel(check_compiled):
    """g++ would contract a*b - mean into a fused multiply-add, which keeps a*b
    unrounded: over one element the deviation became a rounding error and std
    over it inf, where eager's is nan (0/0). We build with -ffp-contract=off."""
    torch.manual_seed(3)
    a, b = torch.randn(7, 1, 33), torch.randn(7, 1, 33)
    cap = check_compiled(lambda a, b: ((a * b).std(1), (a * b).var(1, correction=0)), a, b)
    assert cap.kernels


def _gxx(source: str, tmp_path, *options: str):
    """g++ run on `source` with the kernels' own flags and `options`, building
    tmp_path/kernel.s (its messages are in the result's stderr)."""
    import subprocess

    from compiler.runtime import cpp_build

    src = tmp_path / "kernel.cpp"
    src.write_text(source)
    flags = [f for f in cpp_build.FLAGS if f not in ("-shared", "-fPIC")]
    return subprocess.run(["g++", *flags, *options, "-S", str(src), "-o", str(tmp_path / "kernel.s")],
                          check=True, capture_output=True, text=True)


def _assembly(source: str, tmp_path) -> str:
    """`source` compiled by g++ with the kernels' own flags, as assembly."""
    _gxx(source, tmp_path)
    return (tmp_path / "kernel.s").read_text()


def test_float_to_bfloat16_picks_nan_by_a_mask_and_its_loops_vectorize(tmp_path):
    """float -> bf16 rounds to nearest even and gives 0x7fc0 for NaN by a mask: with an
    early return for NaN, a loop of three conversions (bf16 * 10 -> int -> bf16 * 0.5)
    stayed scalar ("control flow in loop"). Bits are eager's: infinities, halfway cases
    both ways, values that round up to infinity, NaN for NaN, and 0.0 for an int made
    from a float in (-1, 0) (g++ folded (float)(int)f into trunc(f), which gives -0.0)."""
    torch._dynamo.reset()
    x = (torch.randn(37, 301) * 300).bfloat16()  # finite: NaN -> int is undefined

    def fn(x, f):
        return (x * 10).int().to(x.dtype) * 0.5, f.bfloat16()

    # float32s around bf16's halfway points, the largest finite ones, NaNs with payloads
    f = torch.tensor([1.0 + 2**-8, 1.0 + 3 * 2**-8, -(1.0 + 2**-8), 3.3895314e38, 3.4028235e38, float("nan")] * 7)
    f = torch.cat([f, torch.tensor([0x7FC00001, 0xFFFFFFFF, 0x7F800001], dtype=torch.int64).to(torch.int32).view(torch.float32)])
    with compiler.capture() as cap:
        got = torch.compile(fn, backend="fusion")(x, f)
    want = fn(x, f)
    for g, w in zip(got, want):  # NaN's bits vary in eager (0x7fc0 one at a time, 0xffff in vectors)
        assert torch.equal(g.isnan(), w.isnan()), (g, w)
        assert torch.equal(g[~w.isnan()].view(torch.int16), w[~w.isnan()].view(torch.int16)), (g, w)
    for kernel in cap.kernels:
        assert _store_loop_vectorized(kernel.source, tmp_path), kernel.source


@pytest.mark.parametrize("shifts, dims", [(3, -1), (-5, 0), ((1, -2), (0, 2)), (301, 2), (0, 1)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64])
def test_a_roll_is_a_cat_of_two_slices_and_vectorizes(check_compiled, shifts, dims, dtype, tmp_path):
    """roll reads two slices a dim (a cat's masked loads) rather than gathering at
    (i - shift) % size, a 64-bit remainder per element that kept the loop scalar."""
    torch.manual_seed(0)
    x = (torch.randn(6, 7, 301) * 100).to(dtype)
    cap = check_compiled(lambda x: x.roll(shifts, dims) * 2, x)
    (kernel,) = cap.kernels
    body = kernel.source.split('extern "C" void')[-1]
    assert "fusion_rem" not in body and "%" not in body, body
    if isinstance(dims, int):  # two dims: g++ 12 finds no vector type for the masked loads of four slices
        assert _store_loop_vectorized(kernel.source, tmp_path), kernel.source


def test_a_select_on_a_bool_tensor_vectorizes(check_compiled, tmp_path):
    """Bool tensors reach the kernels as bytes (uint8_t*): through a bool*, g++ left
    the loops of a masked softmax scalar (6x the time of the softmax alone)."""
    torch.manual_seed(0)
    x, mask = torch.randn(3, 64, 64), torch.rand(64, 64) > 0.5
    cap = check_compiled(lambda x, m: x.masked_fill(m, float("-inf")).softmax(-1), x, mask)
    src = _sources(cap)
    assert "const uint8_t* __restrict__" in src and "bool*" not in src
    assert re.search(r"\bv?maxps\b", _assembly(src, tmp_path)), "the row max is not computed on packed floats"


def test_math_heavy_kernels_ask_for_512_bit_vectors(check_compiled):
    """Kernels with libm-like math or 16-bit floats prefer 512-bit vectors (where the
    CPU has them); light ones keep g++'s 256."""
    x = torch.randn(37, 65)
    pragma = 'target("prefer-vector-width=512")'
    assert pragma in _sources(check_compiled(lambda x: x.sin() * 2, x))
    assert pragma in _sources(check_compiled(lambda x: x.to(torch.bfloat16) * 2, x))
    assert pragma not in _sources(check_compiled(lambda x: x * 2 + 1, x))


def test_row_values_are_computed_before_the_loop_over_the_row():
    """What a reduction's loop needs and that does not change along the row (the
    row's target class, the loss's scalar gradient) is computed once before it.
    Inside it, g++ made cross entropy's backward one-hot select a branch and left
    the loop scalar: 300 ms for [512, 32000] bf16 on one thread, eager 51."""
    torch.manual_seed(6)
    logits = torch.randn(37, 1001, dtype=torch.bfloat16, requires_grad=True)
    target = torch.randint(0, 1001, (37,))

    def step(x, t):
        x.grad = None
        loss = torch.nn.functional.cross_entropy(x, t)
        loss.backward()
        return loss, x.grad

    with compiler.capture() as cap:
        loss, grad = torch.compile(step, backend="fusion")(logits, target)
    ref_loss, ref_grad = step(logits, target)
    torch.testing.assert_close(loss, ref_loss, rtol=2e-2, atol=1e-4)
    torch.testing.assert_close(grad, ref_grad, rtol=2e-2, atol=1e-4)
    (backward,) = [g for g in cap.graphs if g.kind == "backward"]
    src = _sources(backward)
    inside = _loop_bodies(src, "for (int64_t r0")
    assert re.search(r"in_ptr\d+\[x0\]", src) and inside, src
    assert not re.search(r"in_ptr\d+\[(x0|0)\]", inside), inside  # the row's values are read before


def _loop_bodies(src: str, head: str) -> str:
    """The lines of every loop whose line starts with `head` (by indentation)."""
    lines, out = src.splitlines(), []
    for k, line in enumerate(lines):
        if line.lstrip().startswith(head):
            depth = len(line) - len(line.lstrip())
            for body in lines[k + 2:]:  # past the loop's "{"
                if len(body) - len(body.lstrip()) <= depth:
                    break
                out.append(body)
    return "\n".join(out)


def _vectorized_lines(source: str, tmp_path) -> set:
    """Lines of `source` whose loops g++ vectorized, built with the kernels' own flags."""
    done = _gxx(source, tmp_path, "-fopt-info-vec-optimized")
    return {int(m.group(1)) for m in re.finditer(r"kernel\.cpp:(\d+):\d+: optimized: loop vectorized", done.stderr)}


def test_layer_norm_backward_column_sums_vectorize(tmp_path):
    """LayerNorm's weight and bias gradients sum columns in blocks of x lanes, and
    the input gradient is stored in the same walk: g++ vectorizes that walk (its
    loop-invariant motion, left on, made it reject the lanes' accumulator arrays),
    and each row's values are computed once per row, before its lanes."""
    torch.manual_seed(7)
    ln = torch.nn.LayerNorm(296).to(torch.bfloat16)
    x = torch.randn(37, 296, dtype=torch.bfloat16, requires_grad=True)

    def step(x):
        x.grad = None
        loss = ln(x).float().pow(2).mean()
        loss.backward()
        return loss, x.grad, ln.weight.grad, ln.bias.grad

    with compiler.capture() as cap:
        got = torch.compile(step, backend="fusion")(x)
    want = step(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=2e-2, atol=1e-3)
    walk = "for (int64_t r0 ="  # down the rows, in blocks of x lanes
    blocked = [k for k in cap.kernels if "out_ptr" in _loop_bodies(k.source, walk) and "xi < xn" in k.source]
    assert blocked, [k.name for k in cap.kernels]
    for k in blocked:
        first = next(n for n, line in enumerate(k.source.splitlines(), 1) if line.lstrip().startswith(walk))
        last = first + 1 + len(_loop_bodies(k.source, walk).splitlines())
        # g++ reports a line inside the loop it vectorized
        assert _vectorized_lines(k.source, tmp_path) & set(range(first, last + 1)), k.source
        # a row's values (its mean and rstd) are read once per row, not per lane
        assert not re.search(r"in_ptr\d+\[r0\]", _loop_bodies(k.source, "for (int64_t xi")), k.source


def test_a_row_value_of_a_split_loop_is_computed_once_per_row():
    """A sum over whole rows of a value scaled per row (here by an input's rsqrt)
    walks r as rows r0o of r0i elements: the row's scale is computed once per r0o,
    not per element (a LayerNorm's mean-square loss, bf16 [2048, 1024], one thread:
    11.2 -> 0.8 ms, before its rows' parts joined the LayerNorm's kernel)."""
    torch.manual_seed(8)
    x, s = torch.randn(37, 128), torch.rand(37) + 0.5
    fn = lambda x, s: (x * s[:, None].rsqrt()).pow(2).mean()  # noqa: E731
    with compiler.capture() as cap:
        got = torch.compile(fn, backend="fusion")(x, s)
    torch.testing.assert_close(got, fn(x, s), rtol=1e-4, atol=1e-5)
    (total,) = [k for k in cap.kernels if k.numel == 1]
    assert "for (int64_t r0o" in total.source, total.source
    assert "sqrt" not in _loop_bodies(total.source, "for (int64_t r0b"), total.source


@pytest.mark.parametrize("op", ["max", "min"])
@pytest.mark.parametrize("dim", [-1, 0])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int32])
def test_a_max_with_its_indices_walks_lanes_and_keeps_the_argmax_value(op, dim, dtype, tmp_path):
    """max(dim) and argmax (min, argmin) along a row walk it in lanes of r, each with its
    best value and the first index of it, combined after the loop (fusion_arg_lanes): g++
    vectorizes that walk, where an update of value and index in a branch kept the loop
    scalar (x.max(-1) over [4096, 4096] fp32 ran 1.4x Inductor's time). The max is the
    value the argmax keeps, not a second walk with its NaN flag. Values and indices are
    eager's bit for bit: the first NaN of a row, ties to the first index, -0.0 and 0.0 as
    eager orders them, a row of infinities; along dim 0 (blocked over x, no r lanes) too."""
    torch.manual_seed(0)
    x = (torch.randn(37, 301) * 100).to(dtype)
    if dtype.is_floating_point:
        x[3, 7] = x[3, 200] = x[3, 263] = float("nan")  # in two lanes and the partial block
        x[5] = float("-inf") if op == "max" else float("inf")
        x[6, :] = 0.0
        x[6, ::3] = -0.0
        x[:, 9] = float("nan")  # a NaN in every row along dim 0
        x[10, 290] = float("nan")  # in the partial block of lanes only
    for at in (100, 36, 250, 164):  # a tie, in lanes 36 and 58 and the partial block
        x[8, at] = x[8].max() if op == "max" else x[8].min()

    def fn(x):
        return getattr(x, op)(dim)

    with compiler.capture() as cap:
        values, indices = torch.compile(fn, backend="fusion")(x)
    ref = fn(x)
    bits = torch.int16 if dtype == torch.bfloat16 else dtype
    torch.testing.assert_close(values, ref.values, rtol=0, atol=0, equal_nan=True)
    assert torch.equal(values.view(bits)[values == 0], ref.values.view(bits)[ref.values == 0])  # -0.0 and 0.0
    assert torch.equal(indices, ref.indices)
    (kernel,) = cap.kernels
    body = kernel.source.split('extern "C"')[-1]
    assert "_nan" not in body.replace("quiet_NaN", ""), body  # no NaN flag of a separate max
    if dim == -1:
        lines = kernel.source.splitlines()
        take = next(n for n, line in enumerate(lines, 1) if "const bool take" in line)
        loop = max(n for n, line in enumerate(lines[:take], 1) if line.lstrip().startswith("for ("))
        assert "fusion_arg_lanes<" in body and _vectorized_lines(kernel.source, tmp_path) & set(range(loop, take + 1)), body
