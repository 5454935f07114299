"""The Triton backend against eager PyTorch on random data.

Without a GPU, FUSION_TARGET=triton (config.cpu_target) renders Triton for CPU
tensors and runs it under Triton's interpreter, so CI checks the Triton codegen
on small inputs. With a GPU the same cases run compiled, at odd sizes too."""
from __future__ import annotations

import math
import os
import re
import time

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from compiler.codegen.triton_backend import meta_of
from compiler.config import config
from triton_sm90 import compile_for_h100, compile_interpreted_for_h100, local_memory_accesses, require_compiler_for_h100

triton = pytest.importorskip("triton")

HAS_CUDA = torch.cuda.is_available()
DEVICES = [
    "cpu",
    pytest.param("cuda", marks=pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the compiled GPU path needs one")),
]


@pytest.fixture(autouse=True)
def _triton_target(tmp_path_factory):
    cache = tmp_path_factory.getbasetemp() / "fusion-cache"
    torch._dynamo.reset()
    with config.patch(cpu_target="triton", cache_dir=str(cache)):
        yield
    torch._dynamo.reset()


def _tol(dtype):
    return {
        torch.float32: dict(rtol=1e-4, atol=1e-5),
        torch.float16: dict(rtol=1e-2, atol=1e-2),
        torch.bfloat16: dict(rtol=2e-2, atol=2e-2),
    }.get(dtype, dict(rtol=0, atol=0))


def check(fn, *args, grad=False, equal_nan=False, tol=None):
    """Compile fn with the fusion backend, compare with eager, return the
    kernels it generated (all of them Triton). `tol`: for long sums, whose
    rounding depends on the order of the additions."""
    compiled = torch.compile(fn, backend="fusion")
    with compiler.capture() as cap:
        if grad:
            out = compiled(*args)
        else:
            with torch.no_grad():
                out = compiled(*args)
    with torch.no_grad() if not grad else torch.enable_grad():
        ref = fn(*[a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args])
    outs = out if isinstance(out, (tuple, list)) else (out,)
    refs = ref if isinstance(ref, (tuple, list)) else (ref,)
    for o, r in zip(outs, refs):
        assert o.dtype == r.dtype and o.shape == r.shape, (o.dtype, r.dtype, o.shape, r.shape)
        torch.testing.assert_close(o, r, equal_nan=equal_nan, **(tol or _tol(r.dtype)))
    assert cap.kernels, "nothing was compiled to Triton"
    assert all(k.target == "triton" and k.name.startswith("triton_") for k in cap.kernels)
    if not any(a.is_cuda for a in args if isinstance(a, torch.Tensor)):
        compile_interpreted_for_h100(cap.kernels)
    return cap


def rand(*shape, device, dtype=torch.float32):
    return torch.randn(*shape, device=device, dtype=dtype)


# -- pointwise ---------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_sin_chain_odd_size(device):
    cap = check(lambda x: ((x + 1) * 2).sin(), rand(1001, device=device))
    assert [k.kind for k in cap.kernels] == ["pointwise"]
    assert "x0" in cap.kernels[0].source  # contiguous: the flat index, vectorizable


@pytest.mark.parametrize("device", DEVICES)
def test_gelu_tanh_and_relu_sigmoid_tanh(device):
    x = rand(3001, device=device)
    check(lambda x: F.gelu(x, approximate="tanh"), x)
    check(lambda x: x.relu() + x.sigmoid() * x.tanh(), x)


@pytest.mark.parametrize("device", DEVICES)
def test_broadcasts_and_transposed_read(device):
    x, b, c = rand(37, 65, device=device), rand(65, device=device), rand(37, 1, device=device)
    src = check(lambda x, b, c: (x + b) * c - x.exp(), x, b, c).kernels[0].source
    # a pointwise kernel's streaming load gives L2 no hint (evict_last measured 3% slower
    # per call on an H200); its broadcast ones ask it to keep their lines
    loads = [line for line in src.splitlines() if "tl.load(" in line]
    assert len(loads) == 3 and ["eviction_policy" in line for line in loads] == [False, True, True], loads
    y = rand(65, 37, device=device)
    cap = check(lambda x, y: x + y.t() * 2, x, y)
    assert "YBLOCK" in cap.kernels[0].source  # a 2-D tile: both reads coalesced


@pytest.mark.parametrize("device", DEVICES)
def test_batched_transposes_walk_2d_tiles(device):
    """A transpose under batch dims (x.transpose(-1, -2) + y, a channels-last image
    made contiguous) splits a tile's y0 into the batch and the transposed dim,
    y0 // P and y0 % P (P = 32: 35 * y0 + x0 over 1120 is y0 // 32 where x0 < 35):
    2-D tiles read and write it coalesced, where 1-D blocks read it with a stride
    (H200, x.transpose(-1, -2) + y [64, 1000, 1001], tiles refused -> taken: bf16
    417.0 -> 107.0 us, fp32 486.3 -> 188.9; Inductor 109.7 and 192.8)."""
    x, y = rand(5, 37, 32, device=device), rand(5, 32, 37, device=device)
    image = rand(3, 32, 5, 7, device=device).to(memory_format=torch.channels_last)
    for fn, args, tile in ((lambda x, y: x.transpose(-1, -2) + y, (x, y), 37), (lambda x: x.contiguous() * 2, (image,), 35)):
        src = check(fn, *args).kernels[0].source
        assert meta_of(src)["tile"] == tile, src
        assert "(y0 // 32)" in src and "(y0 % 32)" in src, src


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_kernel_whose_accesses_are_all_transposed_walks_memory_in_order(device, dtype):
    """x.t() * 2 and a channels-last relu keep their input's strides (as eager's
    TensorIterator does): the load and the store are transposed alike, so the 1-D
    blocks walk the flat index in memory order (contiguous, vectorizable), not in
    the logical order, where both had a stride (x.t() * 2), nor in 2-D tiles, whose
    reads along odd rows cannot be vectors (H200, bf16 [1024, 65537]: 134.7 us as
    tiles, eager 67.9). A broadcast along the other dims keeps that order."""
    x, c = rand(37, 1001, device=device, dtype=dtype), rand(37, 1, device=device, dtype=dtype)
    image = rand(3, 20, 7, 9, device=device, dtype=dtype).to(memory_format=torch.channels_last)
    bias = rand(20, device=device, dtype=dtype)
    cases = (
        (lambda x: x.t() * 2, (x,), ((37, 1), (1001, 37))),
        (lambda x, c: (x * c).t().exp(), (x, c), ((37, 1), (1001, 37))),
        (lambda x, b: (x + b.view(1, -1, 1, 1)).relu(), (image, bias), ((3, 1260), (63, 1), (20, 63))),
    )
    for fn, args, order in cases:
        src = check(fn, *args).kernels[0].source
        assert "YBLOCK" not in src and meta_of(src)["order"] == order, src
        assert re.search(r"tl\.load\(in_ptr0 \+ \(x0\)", src) and re.search(r"tl\.store\(out_ptr0 \+ \(x0\)", src), src
        with torch.no_grad():
            assert torch.compile(fn, backend="fusion")(*args).stride() == fn(*args).stride()


@pytest.mark.parametrize("device", DEVICES)
def test_tiles_and_transposed_orders_read_a_cat_or_a_pad_where_they_walk(device):
    """A cat's or a pad's clamped read, unclamped in a 2-D tile or a transposed
    order, stays in the variables the kernel walks: simplified again, it took the
    tile's (or the order's) substitution twice and read elsewhere (NaN)."""
    a, b, y = rand(64, 40, device=device), rand(64, 41, device=device), rand(81, 64, device=device)
    image = rand(2, 8, 5, 7, device=device).to(memory_format=torch.channels_last)
    tiled = check(lambda a, b, y: torch.cat([a, b], 1) + y.t(), a, b, y).kernels
    tiled += check(lambda a, y: F.pad(a, (3, 5, 1, 0), value=2.0) + y.t(), a, rand(48, 65, device=device)).kernels
    assert all("YBLOCK" in k.source for k in tiled)
    ordered = check(lambda x: F.pad(x, (1, 2, 1, 0), value=2.0) * 2, image).kernels
    ordered += check(lambda x: torch.cat([x, x.sin()], 2) + 1, image).kernels
    assert all(meta_of(k.source)["order"] for k in ordered)


@pytest.mark.parametrize("device", DEVICES)
def test_cat_and_pad_pieces_load_masked_in_vectors(device):
    """Each piece of a cat (a rotary embedding's halves) or a padded tensor loads
    at its own index, masked outside its range, not at a clamped index, which no
    analysis sees contiguous: compiled for an H100, every load of the rotary
    embedding is a 16-byte vector."""
    def rope(x, cos, sin):
        half = x.shape[-1] // 2
        return x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin

    x = rand(2, 4, 64, 128, device=device, dtype=torch.bfloat16)
    cos, sin = rand(64, 128, device=device, dtype=torch.bfloat16), rand(64, 128, device=device, dtype=torch.bfloat16)
    kernel = check(rope, x, cos, sin).kernels[0]
    y = rand(37, 61, device=device)
    for src in (kernel.source, check(lambda y: F.pad(y, (3, 5, 1, 0), value=2.0) * 3, y).kernels[0].source):
        assert "tl.minimum" not in src and "tl.maximum" not in src, src
    if device == "cpu":
        require_compiler_for_h100()
        ptx = compile_for_h100(kernel.source, kernel.name, XBLOCK=1024, num_warps=4).asm["ptx"]
        loads = re.findall(r"ld\.global[.:\w]*", ptx)  # evict_last: ld.global.L1::evict_last.L2::cache_hint...
        assert len(loads) == 5 and all(ld.endswith(".v4.b32") for ld in loads), loads


@pytest.mark.parametrize("device", DEVICES)
def test_a_scatter_of_a_transposed_value_adds_over_its_tile(device):
    """A scatter whose value is read transposed walks 2-D tiles, as other transposes:
    its atomic adds cover the tile's two dims (they took a 1-D block's shape, which
    Triton refused; found by random program 1060)."""
    x = rand(3, 37, 37, device=device)
    index = (torch.randperm(37, device=device) // 2).view(1, 37, 1).expand(3, 37, 37)
    for how in ("sum", "mean"):
        torch._dynamo.reset()
        fn = lambda x, index: torch.zeros_like(x).scatter_reduce(1, index, x.transpose(1, 2), how, include_self=False)
        kernels = check(fn, x, index).kernels
        assert any(k.kind == "scatter" and meta_of(k.source)["tile"] for k in kernels), [k.source for k in kernels]


@pytest.mark.parametrize("device", DEVICES)
def test_an_odd_length_masks_only_its_last_block(device):
    """A pointwise kernel whose length breaks a 16-byte vector of its narrowest
    type runs its full blocks unmasked and masks its last block alone, with the
    same results: compiled for an H100, the full blocks load and store bf16 in
    16-byte vectors, which a mask Triton cannot prove constant over a vector
    would split into single elements. Short lengths (their launch outweighs their
    accesses), or lengths of whole vectors, keep one body."""
    split = "if xoffset + XBLOCK <= xnumel:"
    cases = [(lambda x: x * 3, rand(301, 303, device=device, dtype=torch.bfloat16)),
             (lambda x: F.pad(x, (3, 5, 1, 0), value=2.0) * 3, rand(300, 301, device=device)),
             (lambda x: x.sigmoid() * x, rand(3, 1001, device=device, dtype=torch.bfloat16))]
    kernels = [check(fn, x).kernels[0] for fn, x in cases]
    assert [split in k.source for k in kernels] == [True, True, False]
    # lengths of whole vectors: 8 bfloat16 (91504 = 8 * 11438), 4 float32 (92708 = 4 * 23177)
    assert split not in check(lambda x: x * 3, rand(301, 304, device=device, dtype=torch.bfloat16)).kernels[0].source
    assert split not in check(lambda x: x * 3, rand(301, 308, device=device)).kernels[0].source
    if device == "cpu":
        require_compiler_for_h100()
        kernel = kernels[0]
        ptx = compile_for_h100(kernel.source, kernel.name, XBLOCK=2048, num_warps=4).asm["ptx"]
        for access in ("ld", "st"):
            found = re.findall(rf"{access}\.global[.:\w]*", ptx)
            assert found.count(f"{access}.global.v4.b32") == 2 and found.count(f"{access}.global.b16") == 16, found


def roundings_to_bf16(source: str) -> int:
    """Conversions to bfloat16 in a rendered kernel (the interpreter's own helper on a CPU)."""
    return source.count(".to(tl.bfloat16)") + source.count("_to_bf16(") - source.count("def _to_bf16(")


@pytest.mark.parametrize("device", DEVICES)
def test_padded_windows_load_at_their_own_offset(device):
    """Each element of a max_pool2d window over a padded input loads at x0 plus a
    constant, masked at the edges: the clamps of the padding hid divisions and
    remainders that fold once unclamped, and Triton sees the loads contiguous
    (H200, 3x3 stride 1 over [32, 256, 28, 28], kernel alone: bf16 35.1 -> 32.1
    us, fp32 33.0 -> 29.4). The padded bf16 values reach the max without a round
    trip through bf16: a pick between -inf and a bf16 value loses nothing in it."""
    x = rand(2, 3, 13, 13, device=device, dtype=torch.bfloat16)
    (k,) = check(lambda x: F.max_pool2d(x, 3, 1, 1), x, tol=dict(rtol=0, atol=0)).kernels
    offsets = re.findall(r"tl\.load\(in_ptr0 \+ \(([^,]*)\)", k.source)
    assert offsets and all(re.match(r"x0 [-+] ", o) for o in offsets), offsets
    assert roundings_to_bf16(k.source) == 1, k.source  # the result's


@pytest.mark.parametrize("device", DEVICES)
def test_a_padded_read_is_its_masked_load(device):
    """A pad's select between the read and the pad value, on checks of the index
    that the unclamped load's mask makes already, is the masked load itself,
    reading the pad value where masked (H200, max_pool2d 3x3 stride 1 padding 1
    [32, 256, 28, 28] bf16, kernel alone: 26.2 -> 21.6 us). A pad value the
    loaded type does not hold (0.1 in bf16) keeps the select, as does a select
    on the values."""
    def body(k):  # the kernel's own code (its helpers select too)
        return k.source[k.source.index("def triton_"):]

    y = rand(37, 61, device=device)
    (k,) = check(lambda y: F.pad(y, (3, 5, 1, 0), value=2.0) * 3, y).kernels
    assert "tl.where" not in body(k) and "int64" not in body(k) and ", other=2.0" in k.source, k.source
    x = rand(2, 3, 13, 13, device=device, dtype=torch.bfloat16)
    (k,) = check(lambda x: F.max_pool2d(x, 3, 1, 1), x, tol=dict(rtol=0, atol=0)).kernels
    assert "tl.where" not in body(k) and "other=float('-inf')" in k.source, k.source
    (k,) = check(lambda x: F.avg_pool2d(x, 3, 1, 1, count_include_pad=False), x).kernels
    assert "tl.where" not in body(k) and "other=0.0" in k.source, k.source
    for fn in (lambda x: F.pad(x, (1, 2), value=0.1) * 3, lambda x: torch.where(F.pad(x, (1, 2)) > 0, F.pad(x, (1, 2)), -1.0)):
        (k,) = check(fn, x).kernels
        assert "tl.where" in body(k), k.source


@pytest.mark.parametrize("device", DEVICES)
def test_a_window_slid_by_one_steps_along_it(device):
    """A pooling window slid by one (stride 1) loops over its elements, each step
    one contiguous vector over a wide block of outputs, with no L2 hint (the
    next block reads the same elements); each GPU candidate compiles for sm_90
    without spilling. At stride 2 a persistent block holds the whole window."""
    from compiler.codegen.triton_config import _window_configs

    x = rand(2, 3, 13, 17, device=device, dtype=torch.bfloat16)
    for fn in (lambda x: F.max_pool2d(x, 3, 1, 1), lambda x: F.avg_pool2d(x.float(), 3, 1, 1, count_include_pad=False)):
        (k,) = check(fn, x, tol=dict(rtol=0, atol=0) if fn(x).dtype == x.dtype else None).kernels
        assert {c["RBLOCK"] for c in meta_of(k.source)["configs"]} == {1}, k.source
        assert "for roffset in tl.static_range(0, 9, " in k.source and "eviction_policy" not in k.source, k.source
    (k,) = check(lambda x: F.max_pool2d(x, 3, 2, 1), x).kernels
    assert "for roffset" not in k.source and meta_of(k.source)["configs"][0]["RBLOCK"] > 1, k.source
    if device == "cpu":
        require_compiler_for_h100()
        for dtype, warps in ((torch.bfloat16, [4, 8]), (torch.float32, [8, 16])):  # 8 bytes a thread
            kernel = check(lambda x: F.max_pool2d(x, 3, 1, 1), x.to(dtype)).kernels[0]
            configs = _window_configs(32 * 256 * 28 * 28, 9, gpu=True, itemsize=dtype.itemsize)
            assert [(c["XBLOCK"], c["num_warps"]) for c in configs] == list(zip([512, 1024], warps)), configs
            for cfg in configs:
                ck = compile_for_h100(kernel.source, kernel.name, XBLOCK=cfg["XBLOCK"], RBLOCK=1, num_warps=cfg["num_warps"])
                assert local_memory_accesses(ck) == 0, f"{dtype} {cfg}: registers spill to local memory"


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_reduction_over_few_strided_rows_steps_along_them(device, dtype):
    """A reduction over a strided dim of at most 32 rows, whose accesses walk x
    contiguously (log_softmax over 21 classes of [N, 21, H, W], a column sum),
    steps a row at a time, unrolled, each a contiguous vector of a block of x
    (H200, log_softmax(1) [8, 21, 512, 512] bf16: 159.3 -> 59.4 us). More rows,
    or a window read two elements apart (a pooling at stride 2), do not step a
    row at a time."""
    x = rand(2, 21, 9, 13, device=device, dtype=dtype)
    for fn, args in ((lambda x: x.log_softmax(1), (x,)), (lambda x: x.softmax(1) * 2, (x,)),
                     (lambda y: y.sum(0), (rand(6, 301, device=device, dtype=dtype),)),
                     (lambda y: y.argmax(0), (rand(7, 45, device=device, dtype=dtype).round(),))):
        (k,) = check(fn, *args).kernels
        rows = args[0].shape[0 if args[0].dim() == 2 else 1]
        assert f"for roffset in tl.static_range(0, {rows}, " in k.source, k.source
    for fn, args in ((lambda x: x.softmax(1), (rand(2, 40, 5, 7, device=device, dtype=dtype),)),
                     (lambda x: F.max_pool2d(x, 2), (x,))):
        (k,) = check(fn, *args).kernels
        assert "static_range" not in k.source, k.source


@pytest.mark.parametrize("device", DEVICES)
def test_a_reduction_over_33_to_128_strided_rows_loops_in_16_bits(device):
    """Over 33-128 strided rows a float32 reduction holds them in one persistent
    block; a bf16 or float16 one loops, a few rows a step in each thread's
    accumulators (H200, mean(1) [64, 100, 16384] bf16: 78.5 -> 58.1 us)."""
    for dtype, persistent in ((torch.float32, True), (torch.bfloat16, False), (torch.float16, False)):
        for fn, x in ((lambda x: x.mean(1), rand(3, 100, 37, device=device, dtype=dtype)),
                      (lambda x: x.softmax(1), rand(2, 40, 5, 7, device=device, dtype=dtype))):
            (k,) = check(fn, x).kernels
            assert meta_of(k.source)["persistent"] == persistent, (dtype, k.source)
            assert ("for roffset in range(" in k.source) != persistent, k.source


@pytest.mark.parametrize("device", DEVICES)
def test_an_arange_used_as_an_index_is_read_directly(device):
    """grid_sample's decomposition picks each corner with arange-valued batch and
    channel indices: they are positions of the loop, read directly (folding into
    one division of x0, no negative index to wrap), and only the computed row and
    column are index values loaded into the address."""
    x, grid = rand(2, 3, 9, 11, device=device), torch.rand(2, 5, 7, 2, device=device) * 2.2 - 1.1
    (k,) = check(lambda x, g: F.grid_sample(x, g, align_corners=False), x, grid).kernels
    corners = [line for line in k.source.splitlines() if "tl.load" in line and "99 * (x0 // 35)" in line]
    assert len(corners) == 4 and all(len(re.findall(r"\btmp\d+\b", c.split("tl.load")[1])) == 2 for c in corners), k.source


@pytest.mark.parametrize("device", DEVICES)
def test_round_trips_through_16_bits_fold_only_where_they_lose_nothing(device):
    """A float32 value cast to bf16 and back is itself where bf16 holds it: a
    bf16 value, -inf, or a pick among such. 0.1 and float16 values round."""
    x = rand(5, 37, device=device, dtype=torch.bfloat16)
    exact = dict(rtol=0, atol=0)
    (k,) = check(lambda x: F.pad(x, (1, 2), value=float("-inf")).float() * 3, x, tol=exact).kernels
    assert roundings_to_bf16(k.source) == 0, k.source
    (k,) = check(lambda x: F.pad(x, (1, 2), value=0.1).float() * 3, x, tol=exact).kernels
    assert roundings_to_bf16(k.source) == 1, k.source
    check(lambda h: h.to(torch.bfloat16).float() * 3, rand(5, 37, device=device, dtype=torch.float16), tol=exact)


@pytest.mark.parametrize("device", DEVICES)
def test_math_functions(device):
    x = rand(517, device=device)
    check(lambda x: torch.erf(x) + torch.atan(x) + torch.expm1(x * 0.1) + torch.log1p(x.abs()) + torch.rsqrt(x.abs() + 1), x)
    check(lambda x: torch.maximum(x, x.flip(0)) + torch.clamp(x, -0.5, 0.5) + x.round() + x.trunc() + torch.sign(x), x)
    check(lambda x: torch.where(x > 0, x.pow(2.5 if False else 3), x.sinh()) + torch.atan2(x, x.cos()), x)


def _float_patterns(device, stride: int):
    """float32s spread over every bit pattern (subnormals, inf, NaN), and both zeros."""
    bits = torch.arange(0, 1 << 32, stride, dtype=torch.int64)
    bits = torch.where(bits >= 1 << 31, bits - (1 << 32), bits).to(torch.int32)
    return torch.cat([bits.view(torch.float32), torch.tensor([0.0, -0.0, 1e-45, math.inf])]).to(device)


@pytest.mark.parametrize("device", DEVICES)
def test_erf_gives_eagers_bits(device):
    """float32 erf is a helper of ours: libdevice's erff with both coefficient sets
    written out. On the GPU it gives eager's bits for floats spread over every bit
    pattern (subnormals, both sides of its switch at 1.00296, inf, NaN); the
    interpreter's exp2 is exact where the GPU's is not, so there: within 2 ulp."""
    stride = 257 if device == "cuda" else 16411  # 16.7M floats on the GPU, 262k in the interpreter
    edges = torch.tensor([-1e-40, 1e-20, 1.0029599, 1.00296, -1.00296, 3.9, 4.0, 9.2, 1e30, -math.inf, math.nan])
    x = torch.cat([_float_patterns(device, stride), edges.to(device)])
    compiled = torch.compile(lambda x: torch.erf(x), backend="fusion")
    with compiler.capture() as cap:
        out = compiled(x)
    source = cap.kernels[0].source
    assert "_erf(" in source and "tl.erf" not in source and "libdevice.erf" not in source
    ref = torch.erf(x)
    same = (out.view(torch.int32) == ref.view(torch.int32)) | (out.isnan() & ref.isnan())
    if device == "cuda":
        assert same.all(), x[~same][:8].tolist()
    else:
        ulps = (out.view(torch.int32).long() - ref.view(torch.int32).long()).abs()
        assert (same | (ulps <= 2)).all(), x[~(same | (ulps <= 2))][:8].tolist()


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: eager's GPU math is the reference")
@pytest.mark.parametrize("op", ["exp", "division", "reciprocal"])
def test_exp_and_division_give_eagers_bits_on_a_gpu(op):
    """On a GPU, float32 exp is eager's expf and a division (a reciprocal too) is
    correctly rounded, for floats spread over every bit pattern: Triton's own forms
    (ex2.approx of a rounded x * log2(e); div.full) put 28% and 27% of randn results
    an ulp or two off (H200). config.fast_math renders Triton's forms again."""
    x = _float_patterns("cuda", 257)
    y = x.roll(12345)
    fns = {"exp": lambda x, y: torch.exp(x), "division": lambda x, y: x / y, "reciprocal": lambda x, y: torch.reciprocal(x)}
    compiled = torch.compile(fns[op], backend="fusion")
    with compiler.capture() as cap:
        out = compiled(x, y)
    ref = fns[op](x, y)
    same = (out.view(torch.int32) == ref.view(torch.int32)) | (out.isnan() & ref.isnan())
    assert same.all(), list(zip(x[~same][:4].tolist(), out[~same][:4].tolist(), ref[~same][:4].tolist()))
    assert "libdevice." not in cap.kernels[0].source
    torch._dynamo.reset()
    with compiler.config.patch(fast_math=True), compiler.capture() as fast:
        torch.compile(fns[op], backend="fusion")(x, y)
    assert not re.search(r"_expf\(|_rcp_rn\(|tl\.div_rn\(", fast.kernels[0].source), fast.kernels[0].source


@pytest.mark.parametrize("device", DEVICES)
def test_a_quotient_of_bfloat16_tensors_divides_with_div_full_and_gives_eagers_bits(device):
    """A division of two bfloat16 tensors into a bfloat16 result is Triton's `/`
    (div.full on a GPU; div.rn costs more) and still gives eager's bits, for every
    bfloat16 bit pattern over a shuffle of them (subnormals, inf, NaN). A division
    with a float16, float32 or upcast operand stays correctly rounded (tl.div_rn)."""
    a = torch.arange(-(1 << 15), 1 << 15, dtype=torch.int32).to(torch.int16).view(torch.bfloat16).to(device)
    if device == "cpu":  # Triton's interpreter widens bfloat16 subnormals wrongly (1e-39 came out 4.4e-39)
        a = torch.where((a != 0) & (a.abs() < torch.finfo(torch.bfloat16).tiny), 1.0, a)
    b = a[torch.randperm(a.numel(), generator=torch.Generator().manual_seed(0)).to(device)]
    cases = {
        "bf16 / bf16": (lambda a, b: a / b, (a, b), True),
        "(a - 1) / sqrt(b)": (lambda a, b: (a - 1) / b.abs().sqrt(), (a, b), True),
        "upcast": (lambda a, b: (a.float() / b.float()).bfloat16(), (a, b), False),
        "bf16 / fp32": (lambda a, b: a / b.float(), (a, b), False),
        "fp16 / fp16": (lambda a, b: a / b, (a.float().half(), b.float().half()), False),
    }
    for name, (fn, args, div_full) in cases.items():
        torch._dynamo.reset()
        with compiler.capture() as cap, torch.no_grad():
            out = torch.compile(fn, backend="fusion")(*args)
        ref = fn(*args)
        bits = {2: torch.int16, 4: torch.int32}[ref.element_size()]
        same = (out.view(bits) == ref.view(bits)) | (out.isnan() & ref.isnan())
        assert same.all(), (name, args[0][~same][:4].tolist(), out[~same][:4].tolist(), ref[~same][:4].tolist())
        assert ("truediv_bf16" in cap.graphs[0].ir) == div_full, (name, cap.graphs[0].ir)
        if device == "cuda":
            assert ("div_rn(" not in cap.kernels[0].source) == div_full, (name, cap.kernels[0].source)


@pytest.mark.parametrize("op", ["sqrt", "rsqrt"])
@pytest.mark.parametrize("device", DEVICES)
def test_sqrt_and_rsqrt_give_eagers_bits(device, op):
    """sqrt is correctly rounded, as eager's on the GPU (libdevice's, as Triton links
    it, is approximate; eager's on the CPU is not always: 1 ulp off near 1e-38); on the
    GPU rsqrt is eager's one instruction, subnormals kept. Neither calls libdevice
    there, whose link costs a kernel's compile tens of milliseconds."""
    x = _float_patterns(device, 257 if device == "cuda" else 16411)
    compiled = torch.compile(getattr(torch, op), backend="fusion")
    with compiler.capture() as cap:
        out = compiled(x)
    ref = x.double().sqrt().float() if op == "sqrt" else torch.rsqrt(x)  # a double's sqrt rounds right
    same = (out.view(torch.int32) == ref.view(torch.int32)) | (out.isnan() & ref.isnan())
    assert same.all(), list(zip(x[~same][:4].tolist(), out[~same][:4].tolist(), ref[~same][:4].tolist()))
    if device == "cuda":
        assert "libdevice." not in cap.kernels[0].source


@pytest.mark.parametrize("op, instruction", [("sqrt", "sqrt.rn.f32"), ("rsqrt", "rsqrt.approx.f32"),
                                             ("erf", "ex2.approx.ftz.f32"), ("exp", "fma.rm.f32"),
                                             ("reciprocal", "rcp.rn.f32"), ("truediv", "div.rn.f32")])
def test_gpu_math_links_no_libdevice(op, instruction):
    """The CUDA forms of sqrt, rsqrt, erf, exp and reciprocal (GPU_HELPERS) and of a
    division, compiled for sm_90: the instruction libdevice's function (or eager's
    IEEE division) would run, and libdevice not linked."""
    require_compiler_for_h100()
    from compiler.codegen.triton_ops import binary, unary

    code = binary(op, "tmp0", "(tmp0 + 3.0)", torch.float32, cuda=True) if op == "truediv" else unary(op, "tmp0", torch.float32)
    compiled = _compiled_for_h100(code, "float32")
    assert "__nvvm_reflect" not in compiled.asm["llir"], "libdevice was linked"
    assert instruction in compiled.asm["ptx"]


@pytest.mark.parametrize("op", ["floordiv", "truncdiv", "remainder", "fmod"])
def test_an_integer_division_by_a_constant_zero_runs(op):
    """LLVM takes x / 0 with a constant 0 for undefined and drops the division (the
    value stored was any register's): the GPU's form divides by a zero it cannot
    see, so the division instruction runs, as in eager's kernel."""
    require_compiler_for_h100()
    from compiler.codegen.triton_ops import binary

    ptx = _compiled_for_h100(binary(op, "tmp0", "0", torch.int32, cuda=True), "int32").asm["ptx"]
    assert "div.s32" in ptx or "rem.s32" in ptx


def _compiled_for_h100(code: str, dtype: str):
    """A kernel storing `code` of its input tmp0 (1024 elements of `dtype`), with
    the helpers it calls in their CUDA forms, compiled for sm_90."""
    from compiler.codegen.triton_ops import HELPERS, helper_sources

    meta = dict(kind="pointwise", xnumel=1024, configs=[dict(XBLOCK=1024, num_warps=4, num_stages=1, grid=1)],
                args=[dict(name=n, dtype=dtype, extent=1024, check_align=True) for n in ("in_ptr0", "out_ptr0")],
                workspace=[], fp_fusion=True)
    source = "\n".join([
        "import triton", "import triton.language as tl", "from triton.language.extra import libdevice", "",
        f"META = {meta!r}", "", *helper_sources([h for h in HELPERS if h + "(" in code], cuda=True),
        "@triton.jit", "def k(in_ptr0, out_ptr0, XBLOCK: tl.constexpr):", "    x0 = tl.arange(0, XBLOCK)",
        "    tmp0 = tl.load(in_ptr0 + x0)", f"    tl.store(out_ptr0 + x0, {code})", ""])
    return compile_for_h100(source, "k")


@pytest.mark.parametrize("device", DEVICES)
def test_integer_and_bool_ops(device):
    a = torch.randint(-50, 50, (301,), device=device)
    b = torch.randint(1, 7, (301,), device=device) * torch.where(torch.rand(301, device=device) > 0.5, 1, -1)
    check(lambda a, b: (a // b, a % b, torch.div(a, b, rounding_mode="trunc"), a * 3 - b), a, b)
    check(lambda a, b: ((a > 0) & (b < 0), (a > 0) | (b > 0), ~(a > b), (a ^ b), a.to(torch.float32) / 3), a, b)
    i32 = a.to(torch.int32)
    check(lambda a: (a.abs() + 1, a.sum(), (a > 0).sum()), i32)
    u8 = torch.randint(0, 256, (301,), device=device, dtype=torch.uint8)
    check(lambda u, v: (u // v, u % v), u8, torch.randint(1, 256, (301,), device=device, dtype=torch.uint8))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_edges_match_aten(device, dtype):
    """Where hardware integer arithmetic differs from ATen's: shifts by a negative
    count or by the width or more (ATen gives 0, or the sign for a right shift),
    the most negative value divided by -1 (ATen wraps)."""
    bits = torch.iinfo(dtype).bits
    a = torch.randint(-1000, 1000, (7, 37), device=device, dtype=dtype)
    a[:, ::3] = torch.iinfo(dtype).min
    s = torch.randint(-3, 2 * bits, (7, 37), device=device, dtype=dtype)
    s[0, :5] = torch.tensor([-1, 0, bits - 1, bits, bits + 1])
    d = torch.randint(1, 9, (7, 37), device=device, dtype=dtype)
    d[:, ::2] = -1
    check(lambda a, s, d: (a << s, a >> s, a // d, a % d, torch.fmod(a, d)), a, s, d)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: eager raises ZeroDivisionError on the CPU, as ours does")
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_integer_division_by_zero_gives_the_gpus_answer(dtype):
    """Eager's CUDA kernels divide integers by zero unchecked and return the GPU's
    answer (int32: -1, and -2 floored where the dividend is negative). A Python 0 as
    the divisor is a constant to LLVM, which then dropped the division: the output
    held any register's value. Now it divides as by a tensor of zeros. What that
    gives is C's undefined behaviour, which varies with the code around it: a
    remainder beside a quotient is a - q * 0 = a, and int64 gives -1 or 2^32 - 1
    (H200). So: int32 kernels of quotients only or remainders only give eager's
    answers, and in every kernel a Python 0 gives what a tensor of zeros does."""
    a = torch.randint(-50, 50, (1003,), device="cuda", dtype=dtype)
    zeros = torch.zeros_like(a)
    quotients = {"a // 0": lambda a, z: a // 0, "trunc(a / 0)": lambda a, z: torch.div(a, 0, rounding_mode="trunc"),
                 "a // zeros": lambda a, z: a // z, "trunc(a / zeros)": lambda a, z: torch.div(a, z, rounding_mode="trunc")}
    remainders = {"a % 0": lambda a, z: a % 0, "fmod(a, 0)": lambda a, z: torch.fmod(a, 0),
                  "a % zeros": lambda a, z: a % z, "fmod(a, zeros)": lambda a, z: torch.fmod(a, z)}
    for fns in (quotients, remainders, {**quotients, **remainders}):
        ours = dict(zip(fns, torch.compile(lambda a, z: tuple(f(a, z) for f in fns.values()), backend="fusion")(a, zeros)))
        for by_zero, by_zeros in zip([n for n in fns if n.endswith("0") or n.endswith("0)")], [n for n in fns if "zeros" in n]):
            assert torch.equal(ours[by_zero], ours[by_zeros]), f"{by_zero} is not {by_zeros}"
        if dtype == torch.int32 and len(fns) == 4:
            bad = [f"{n}: {int((o != fns[n](a, zeros)).sum())} differ" for n, o in ours.items() if not torch.equal(o, fns[n](a, zeros))]
            assert not bad, bad


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_compute_in_float32(device, dtype):
    x, w = rand(33, 257, device=device, dtype=dtype), rand(257, device=device, dtype=dtype)
    cap = check(lambda x, w: (x * w + 1).sigmoid() * x, x, w)
    assert "tl.float32" in cap.kernels[0].source


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_types_round_between_ops_as_eager(device, dtype):
    """Eager rounds every op's result to 16 bits: so do the fused kernels, bit for
    bit, and Triton may not contract a * b + c * d into an FMA across the rounding
    (on an H100 it did, and 14895 of 61445 bf16 sums differed from eager's by an ulp)."""
    a, b, c, d = (rand(5, 12289, device=device, dtype=dtype) for _ in range(4))
    cap = check(lambda a, b, c, d: (a * b + c * d, a * b - c), a, b, c, d, tol=dict(rtol=0, atol=0))
    assert meta_of(cap.kernels[0].source)["fp_fusion"] is False
    a32, b32, c32 = (t.float() for t in (a, b, c))
    cap = check(lambda a, b, c: a * b + c, a32, b32, c32)
    assert meta_of(cap.kernels[0].source)["fp_fusion"] is True  # nothing to round: FMAs welcome


@pytest.mark.parametrize("device", DEVICES)
def test_pointwise_model_is_one_kernel(device):
    class PointwiseModel(nn.Module):
        def __init__(self, dim):
            super().__init__()
            self.s1, self.b1 = nn.Parameter(torch.randn(dim)), nn.Parameter(torch.randn(dim))
            self.s2, self.b2 = nn.Parameter(torch.randn(dim)), nn.Parameter(torch.randn(dim))

        def forward(self, x):
            x = torch.relu(x * self.s1 + self.b1)
            x = torch.sigmoid(x * self.s2 + self.b2)
            return torch.tanh(x * 2.0 + 1.0)

    cap = check(PointwiseModel(96).to(device).eval(), rand(37, 96, device=device))
    assert len(cap.kernels) == 1


@pytest.mark.parametrize("device", DEVICES)
def test_pointwise_epilogue_writes_over_the_matmul_result(device):
    """bias + activation after a matmul write in place of the product (the last
    reader of it, same layout and index); a transposed read cannot."""
    lin = nn.Linear(40, 24).to(device)
    x = rand(33, 40, device=device)
    with torch.no_grad():
        cap = check(lambda x: torch.relu(lin(x)) * 2, x)
    assert "in place of" in cap.graphs[0].wrapper_source
    torch._dynamo.reset()
    cap = check(lambda a: (a.sin() @ a).t() + 1, rand(33, 33, device=device))
    assert "in place of" not in cap.graphs[0].wrapper_source


@pytest.mark.parametrize("device", DEVICES)
def test_multiple_outputs_and_input_mutation(device):
    x = rand(129, device=device)
    check(lambda x: (x.sin(), x.cos() * 2), x)

    def mutate(x, y):
        x.add_(y)
        return x * 2

    a, b = rand(77, device=device), rand(77, device=device)
    a_ref = a.clone()
    out = torch.compile(mutate, backend="fusion")(a, b)
    torch.testing.assert_close(a, a_ref + b)
    torch.testing.assert_close(out, (a_ref + b) * 2)


# -- reductions ----------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape", [(64, 48), (301, 129), (2048, 40)])
def test_result_and_its_column_sum_are_one_pass(device, shape):
    """A bias gradient: a pointwise result the graph returns (GELU's backward)
    and its sum over the rows. One kernel walks the rows as its reduction and
    the contiguous columns as x0, computing each element once: each input is
    loaded once, at the index the result is stored. Mapped the other way, one
    of the two would walk memory transposed (H200, [4096, 4096] fp32: 280 us)."""
    g, h = rand(*shape, device=device), rand(*shape, device=device)
    cap = check(lambda g, h: (lambda d: (d, d.sum(0)))(torch.ops.aten.gelu_backward(g, h)), g, h,
                tol=dict(rtol=1e-4, atol=1e-4))
    assert len(cap.kernels) == 1, [(k.name, k.split_reason) for k in cap.kernels]
    src = cap.kernels[0].source
    walks = [line for line in src.splitlines() if "tl.load(in_ptr" in line or ("tl.store(" in line and " r0 " in line)]
    loops = max(1, src.count("for roffset"))
    assert len(walks) == 3 * loops and all(f"({shape[1]} * r0 + x0)" in line for line in walks), src


@pytest.mark.parametrize("device", DEVICES)
def test_layer_norm_input_gradient_reads_its_input_where_the_weight_gradient_does(device):
    """LayerNorm's input gradient joins the kernel of its weight gradient's column
    sums only where both read each input element at the same index (r0 over the
    rows): sharing the loss's scalar gradient is no reason to fuse, and with it the
    input gradient walked the input a second time in other blocks (H200, [8192,
    4096] bf16: 147 us for that kernel)."""
    ln = nn.LayerNorm(296).to(device=device, dtype=torch.bfloat16)
    x = rand(37, 296, device=device, dtype=torch.bfloat16).requires_grad_()  # 296 = 8 * 37: rows fold into the columns

    def step(x):
        x.grad = None
        loss = ln(x).float().pow(2).mean()
        loss.backward()
        return loss, x.grad

    cap = check(step, x, grad=True, tol=dict(rtol=2e-2, atol=1e-4))
    for k in cap.kernels:
        params = re.search(rf"def {k.name}\(([^)]*)\)", k.source).group(1).split(", ")
        x_ptrs = [p for p, a in zip(params, meta_of(k.source)["args"]) if a["extent"] == x.numel() and p.startswith("in_ptr")]
        loads = {m.group(1) for p in x_ptrs for m in re.finditer(rf"tl\.load\({p} \+ \(([^,]*?)\)[,)]", k.source)}
        walks = {i for i in loads if "x0" in i and "r0" in i}  # not a row's first element (var_mean's shift)
        assert len(walks) <= 1, (k.name, walks)

@pytest.mark.parametrize("itemsize", [4, 2])
def test_small_pointwise_grids_take_16_bytes_a_thread(itemsize):
    """On a GPU, 4-warp programs move 32 bytes a thread per access, unless their
    grid would leave warp slots of the SMs empty: then 16, twice the warps in
    flight (H200, PointwiseModel [1024, 1024]: 6.14 -> 5.47 us per call). Big
    kernels also time 16 bytes a thread against their first guess."""
    from compiler.codegen import triton_config

    def configs(numel):
        return [(c["XBLOCK"] * itemsize // (32 * c["num_warps"]), c["grid"] * c["num_warps"])
                for c in triton_config._pointwise_configs(numel, True, itemsize)]

    big, small = configs(10_000_000), configs(1 << 20)
    assert [b for b, _ in big] == [32, 16] and big[0][1] >= triton_config.SM_COUNT * triton_config.SM_MAX_WARPS
    assert len(small) == 1 and small[0][0] == 16 and small[0][1] <= triton_config.SM_COUNT * triton_config.SM_MAX_WARPS


def test_big_gathers_time_big_programs_of_many_warps():
    """A big pointwise gather (grid_sample's corners, index_select's columns) also
    times programs of 4096 elements in 32 warps, whose gathers hit in L1
    (H100, grid_sample bilinear [16, 64, 128, 128] fp32: 270.4 -> 122.4 us per
    call); each compiles for sm_90. Such kernels, and reductions that gather, are
    tuned on their first call's tensors (scratch indices gather nothing like
    them), unless one reads what it writes: launching it again would then change
    its result."""
    from compiler.codegen.triton_config import GATHER_CONFIGS, _pointwise_configs

    def blocks(configs):
        return [(c["XBLOCK"], c["num_warps"]) for c in configs]

    plain, gathers = _pointwise_configs(16 << 20, True, 4), _pointwise_configs(16 << 20, True, 4, gathers=True)
    assert blocks(gathers) == blocks(plain) + list(GATHER_CONFIGS)
    assert len(_pointwise_configs(1 << 20, True, 4, gathers=True)) == 1
    x, grid, i = rand(2, 3, 9, 11, device="cpu"), rand(2, 5, 7, 2, device="cpu"), torch.randint(0, 11, (5,))
    (sample,) = check(lambda x, g: F.grid_sample(x, g, align_corners=False), x, grid).kernels
    (select,) = check(lambda x, i: x.index_select(-1, i) * 2, x, i).kernels
    (plain,) = check(lambda x: x.sin(), x).kernels
    (norm,) = check(lambda x, i: F.layer_norm(x.index_select(-1, i), (5,)), x, i).kernels  # a reduction's gather
    assert all(meta_of(k.source)["tune_on_call"] for k in (sample, select, norm))
    assert not meta_of(plain.source)["tune_on_call"]
    y = rand(2, 3, 9, 5, device="cpu")
    expected = y + x.index_select(-1, i)
    with compiler.capture() as cap:
        torch.compile(lambda y, x, i: y.add_(x.index_select(-1, i)), backend="fusion")(y, x, i)
    torch.testing.assert_close(y, expected)
    (in_place,) = cap.kernels
    assert not meta_of(in_place.source)["tune_on_call"], in_place.source
    require_compiler_for_h100()
    for xb, warps in GATHER_CONFIGS:  # (Triton 3.6 spills a few registers here, 28 accesses; 3.9 none)
        compile_for_h100(sample.source, sample.name, XBLOCK=xb, num_warps=warps)


def test_index_values_are_checked_where_they_may_leave_their_dim():
    """An index value read from memory is asserted on the device to lie in its dim
    (the kernel compiles with debug=True), as eager's CUDA kernels and TorchInductor's
    do. grid_sample's corners, which a `where` keeps inside, and upsampling's
    positions, computed from the output's, go unchecked: asserting them took
    grid_sample bilinear [16, 64, 128, 128] fp32 from 120.4 to 176.1 us on an H200.
    config.index_checks turns the checks off. Both forms compile for sm_90, with a
    mask and without one."""
    x, grid, i = rand(2, 3, 9, 11, device="cpu"), rand(2, 5, 7, 2, device="cpu") * 1.2, torch.randint(0, 11, (5,))
    (sample,) = check(lambda x, g: F.grid_sample(x, g, align_corners=False), x, grid).kernels
    (up,) = check(lambda x: F.interpolate(x, scale_factor=1.7, mode="bilinear"), x).kernels
    (select,) = check(lambda x, i: x.index_select(-1, i) * 2, x, i).kernels
    (whole,) = check(lambda t, i: t[i] * 2, rand(16, 16, device="cpu"), torch.randint(0, 16, (16,))).kernels
    for k in (select, whole):
        assert "_index_in_range(" in k.source and meta_of(k.source)["debug"], k.source
    assert "_index_in_range(tmp" in select.source and ", None)" in whole.source  # masked, and a block without a mask
    for k in (sample, up):
        assert "_index_in_range(" not in k.source and not meta_of(k.source)["debug"], k.source
    torch._dynamo.reset()
    with config.patch(index_checks=False):
        (unchecked,) = check(lambda x, i: x.index_select(-1, i) * 2, x, i).kernels
    assert "_index_in_range(" not in unchecked.source and not meta_of(unchecked.source)["debug"]
    require_compiler_for_h100()
    for k in (select, whole):
        compile_for_h100(k.source, k.name)


def test_a_kernel_is_timed_on_call_tensors_only_where_none_share_memory():
    """The wrapper may hand a dead input's memory to an output: a kernel timed on
    such tensors would overwrite what it reads."""
    from compiler.runtime.triton_build import _reruns_alike

    x = torch.randn(10)
    assert _reruns_alike((x, torch.randn(10)))
    assert not _reruns_alike((x, x[5:])) and not _reruns_alike(None) and not _reruns_alike(())


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: kernels are timed on a GPU")
def test_gpu_gathers_are_timed_on_the_first_calls_tensors():
    x, i = rand(2048, 4096, device="cuda"), torch.randint(0, 4096, (2048,), device="cuda")
    table, tokens = rand(16384, 4096, device="cuda"), torch.randint(0, 16384, (8192,), device="cuda")
    assert len(persistent_gpu_configs(8192, 4096, torch.float32)) > 1
    for fn, args in ((lambda x, i: x.index_select(1, i), (x, i)),
                     (lambda t, i: F.layer_norm(F.embedding(i, t), (4096,)), (table, tokens))):
        (k,) = check(fn, *args).kernels
        assert k.launch["timed_on"] == "call" and len(k.launch["timed"]) == len(meta_of(k.source)["configs"]), k.launch
    (k,) = check(lambda x: x.sin(), x).kernels
    assert k.launch["timed_on"] == "scratch", k.launch


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: kernels are timed on a GPU")
def test_gpu_scatters_run_their_first_guess_untimed():
    """A scatter big enough for its gathers and stores to be timed has one
    configuration, untimed: scratch inputs (zero indices) would time every update
    landing on one element, and it cannot run again on its call's tensors."""
    src, index = rand(1 << 22, 8, device="cuda"), torch.randint(0, 4096, (1 << 22,), device="cuda")
    out = torch.zeros(4096, 8, device="cuda")
    cap = check(lambda s, i: out.index_add(0, i, s), src, index, tol=dict(rtol=1e-4, atol=1e-3))
    (scatter,) = [k for k in cap.kernels if k.kind == "scatter"]
    assert len(meta_of(scatter.source)["configs"]) == 1 and scatter.launch["timed"] == [], scatter.launch
    (k,) = check(lambda x: x.sin(), src).kernels
    assert len(k.launch["timed"]) > 1, k.launch  # a kernel as big but no scatter is timed


@pytest.mark.parametrize("device", DEVICES)
def test_pointwise_loads_read_again_ask_l2_to_keep_them(device):
    """Rotary embedding reads each element at its own index, and again shifted by
    half a head (the rotated halves), and cos/sin broadcast over heads: the shifted
    and broadcast loads are hinted evict_last, the streaming one is not."""
    x, cos, sin = (rand(2, 3, 37, 16, device=device), rand(37, 16, device=device), rand(37, 16, device=device))

    def rope(x, cos, sin):
        return x * cos + torch.cat((-x[..., 8:], x[..., :8]), -1) * sin

    (k,) = check(rope, x, cos, sin).kernels
    loads = re.findall(r"tl\.load\((\w+) \+ \(([^\n]*)\)\)?$", k.source, re.M)
    hinted = {(p, "evict_last" in rest) for p, rest in loads}
    assert hinted == {("in_ptr0", False), ("in_ptr0", True), ("in_ptr1", True), ("in_ptr2", True)}, k.source


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("rows", [100, 140])
def test_long_rows_split_only_under_one_program_an_sm(device, rows):
    """Rows too long for registers split across programs while there are fewer
    blocks of them than SMs; from one an SM on, a program per block streams its
    rows at full speed (H200, sum [256, 100352]: 35.2 us split, 31.4 not). A GPU
    program takes one such row, so 140 rows do not split; the interpreter's take
    16, and both split."""
    from compiler.codegen import triton_config

    x = rand(rows, 40000, device=device)
    cap = check(lambda x: x.sum(-1), x, tol=dict(rtol=1e-4, atol=1e-3))
    meta = meta_of(cap.kernels[0].source)
    blocks = triton_config.cdiv(rows, meta["configs"][0]["XBLOCK"])
    assert (meta["split"] > 1) == (blocks < triton_config.SM_COUNT), meta
    if device == "cuda":
        assert (meta["split"] > 1) == (rows == 100)


def test_column_blocks_are_narrow_where_rows_split():
    """A reduction over a strided dim splits its rows across programs in blocks
    of 32 columns (128 bytes of fp32 rows), 32 warps an SM; columns enough for two
    blocks of 64 an SM need no split and take those (H200, per call: sum(0) fp32
    [65536, 256] 30.6 -> 25.6 us, softmax(0) 94.5 -> 59.7; sum(0) [2048, 50257]
    122 us in blocks of 64, 142 in blocks of 32)."""
    from compiler.codegen import triton_config as tc

    for cols, rows, width, splits in [(256, 65536, 32, True), (4096, 4096, 32, True), (40, 65536, 32, True),
                                      (16384, 1024, 32, False), (50257, 2048, 64, False), (300, 64, 32, False)]:
        assert (tc.outer_width(cols), tc.splits_outer_rows(cols, rows)) == (width, splits), (cols, rows)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the GPU's plan")
def test_gpu_column_sum_splits_in_narrow_blocks():
    x = rand(65536, 256, device="cuda")
    from compiler.codegen import triton_config as tc

    meta = meta_of(check(lambda x: x.sum(0), x, tol=dict(rtol=1e-4, atol=1e-3)).kernels[0].source)
    first = meta["configs"][0]
    assert first["XBLOCK"] == 32 and meta["split"] > 1 and len(meta["configs"]) == 1, meta
    # 66 splits of 8 blocks would fill the warps; 64, the loop's RBLOCK, come close (see below)
    assert first["grid"] == 8 * 64 == meta["split"] * 8 and first["RBLOCK"] == 64, meta
    assert first["grid"] * first["num_warps"] >= tc.SM_COUNT * tc.SPLIT_WARPS_PER_SM * 7 // 8, meta


def test_a_strided_reduction_read_again_times_programs_of_32_warps():
    """A reduction over a strided dim that reads its block again (a variance's
    second pass, the normalization after it) also times programs of 32 warps: fewer
    share an SM, and their blocks stay in L2 until the next pass (H200, per call,
    layer_norm(x.t()) [4096, 4096]: fp32 86.9 -> 76.7 us, bf16 67.6 -> 51.4;
    Inductor 77.1, 48.7). A block is no taller than the rows."""
    from compiler.codegen.triton_config import _unsplit_outer_configs

    first = dict(XBLOCK=8, RBLOCK=256, num_warps=8, num_stages=1)
    assert all(c["num_warps"] == 4 for c in _unsplit_outer_configs(first, 4096, 4096, passes=1))
    heavy = lambda configs: [(c["XBLOCK"], c["RBLOCK"]) for c in configs if c["num_warps"] == 32]
    assert heavy(_unsplit_outer_configs(first, 4096, 4096, passes=3)) == [(8, 512), (16, 128), (32, 64)]
    assert heavy(_unsplit_outer_configs(first, 4096, 256, passes=2)) == [(16, 128), (32, 64)]


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the GPU's plan")
def test_gpu_layer_norm_over_a_transpose_times_heavy_programs():
    x = rand(4096, 4096, device="cuda")
    kernels = check(lambda x: F.layer_norm(x.t(), (4096,)), x, tol=dict(rtol=1e-4, atol=1e-4)).kernels
    assert len(kernels) == 1
    timed = [cfg for cfg, _ in kernels[0].launch["timed"]]
    assert any(c["num_warps"] == 32 for c in timed) and len(timed) == len(meta_of(kernels[0].source)["configs"]), timed


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the GPU's plan")
@pytest.mark.parametrize("cols", [256, 40, 4096])
def test_gpu_last_program_combines_partials_in_the_loops_tile(cols):
    """A split reduction's last program combines the partial results in the main
    loop's [XBLOCK, RBLOCK] tile where they fit (a split just over RBLOCK is
    trimmed to it: 66 -> 64 for 256 columns), in a tile of their own where they
    do not (40 columns: 256 partials of blocks of 64 rows). Both match eager,
    for a sum and for softmax's online max and sum."""
    x = rand(65536, cols, device="cuda")
    for fn, tol in ((lambda x: x.sum(0), dict(rtol=1e-4, atol=1e-3)), (lambda x: x.softmax(0), dict(rtol=1e-4, atol=1e-7))):
        src = check(fn, x, tol=tol).kernels[0].source
        meta = meta_of(src)
        fits = meta["split"] <= min(c["RBLOCK"] for c in meta["configs"])
        assert fits == (cols != 40) and ("sindex = rbase" in src) == fits, meta


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("shape", [(512, 1024), (512, 4096)])
def test_column_centering_keeps_its_mean_split(device, dtype, shape):
    """x - x.mean(0) (a batch norm over [N, C]): alone, the mean over rows splits
    them across programs in blocks of 32 columns. Fused with the per-element
    subtraction, each program would walk every row in blocks narrow enough to
    fill the GPU, down to 8 columns (H200, bf16 [8192, 4096]: 147 us, against
    65 as two kernels). So: a split reduction, then a pointwise kernel."""
    x = (rand(*shape, device=device) * 3 + 1).to(dtype)
    tol = dict(rtol=2e-2, atol=3e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    cap = check(lambda x: x - x.mean(0), x, tol=tol)
    assert [k.kind for k in cap.kernels] == ["reduction", "pointwise"], [(k.name, k.split_reason) for k in cap.kernels]
    assert "splits its rows across programs in blocks of 32 columns" in cap.kernels[1].split_reason
    if device == "cuda":
        assert meta_of(cap.kernels[0].source)["split"] > 1


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_softmax_over_a_strided_dim_splits_its_rows(device, dtype):
    """softmax(0) and log_softmax(0) over few columns of many rows: the max and
    the sum of exp split their rows across programs, each program keeping its
    sum relative to its max, and the last program of a block of columns brings
    every partial sum to the column's max; the output is a pointwise kernel.
    Fused, the few columns' programs would each walk every row twice. Columns
    of -inf, a NaN and +inf keep eager's results."""
    x = (rand(8192 if device == "cpu" else 65536, 64, device=device) * 5).to(dtype)
    x[:, 1] = float("-inf")
    x[::7, 2] = float("-inf")
    x[5, 3] = float("nan")
    x[9, 4] = float("inf")
    tol = _tol(dtype) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)  # sums of 8192 in another order
    for fn in (lambda x: x.softmax(0), lambda x: F.log_softmax(x, 0)):
        cap = check(fn, x, equal_nan=True, tol=tol)
        assert [k.kind for k in cap.kernels] == ["reduction", "pointwise"], [(k.name, k.split_reason) for k in cap.kernels]
        assert "splits its rows across programs" in cap.kernels[1].split_reason
        src = cap.kernels[0].source
        assert meta_of(src)["split"] > 1 and "tl.fma(" in src, src  # split, with the online step
        assert "_p * tl.exp(acc_" in src  # partial sums brought to the column's max


@pytest.mark.parametrize("device", DEVICES)
def test_softmax_family_persistent(device):
    x = rand(65, 999, device=device)
    cap = check(lambda x: x.softmax(-1), x)
    assert len(cap.kernels) == 1 and cap.kernels[0].kind == "reduction"
    assert "_expf(" in cap.kernels[0].source  # eager's expf: a short row is not online
    check(lambda x: F.log_softmax(x, -1), x)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_long_row_softmax_is_online(device, dtype):
    """Rows too long for registers: max and sum of exp in one pass (the sum
    rescaled as the max grows), then the output: two passes, not three. Rows of
    -inf, a NaN, a huge value and +inf keep eager's results."""
    x = (rand(7, 20001 if device == "cpu" else 50257, device=device) * 5).to(dtype)
    x[1] = float("-inf")
    x[2, 100:] = float("-inf")
    x[3, 7] = float("nan")
    x[4, -2] = 1000
    x[5, 3] = float("inf")
    cap = check(lambda x: (x.softmax(-1), F.log_softmax(x, -1)), x, equal_nan=True)
    src = cap.kernels[0].source
    passes = "for roffset in range(0, "  # each pass: its whole blocks, then the partial last one
    assert len(cap.kernels) == 1 and src.count(passes) == 2 and src.count("for roffset") == 6
    first, second = src.split(passes)[1:]
    for loop in (first, second):  # rows not on 16 bytes: only the first and last blocks mask r
        head, whole, tail = loop.split("for roffset")
        assert "r0 >= 0" in head and "tl.full([1, RBLOCK], True" in whole and "r0 < rnumel" in tail
    # L2 keeps the row for the second pass, which then lets it go; the rows
    # written leave L2 before the rows read again
    first_loads = [line for line in first.splitlines() if "tl.load(" in line]
    second_loads = [line for line in second.splitlines() if "tl.load(" in line]
    stores = [line for line in src.splitlines() if "tl.store(" in line]
    assert len(first_loads) == len(second_loads) == 3 and len(stores) == 6, src
    assert all("evict_last" in line for line in first_loads)
    assert all("evict_first" in line for line in second_loads + stores)
    # the step's exp is one ex2.approx.ftz on the GPU (what it flushes would vanish
    # in the sum anyway), and the rescaling an FMA
    steps = [line for line in first.splitlines() if "_e = " in line]
    assert len(steps) == 3 and all(("_exp_ftz(" in line) == (device == "cuda") for line in steps), steps
    assert first.count("tl.fma(") == 3
    # the output's exp and the sum's reciprocal are Triton's (the sum is not in
    # eager's order anyway), not expf and rcp.rn
    assert "tl.exp(" in second and "_expf(" not in second
    assert "_rcp_rn(" not in src and src.count(" = 1.0 / acc_") == 1, src


@pytest.mark.parametrize("device", DEVICES)
def test_norms(device):
    x = rand(33, 777, device=device)
    ln = nn.LayerNorm(777).to(device).eval()
    with torch.no_grad():
        ln.weight.normal_(), ln.bias.normal_()
    cap = check(ln, x)
    assert len(cap.kernels) == 1
    w = rand(513, device=device)
    src = check(lambda x, w: F.rms_norm(x, (513,), w), rand(33, 513, device=device), w).kernels[0].source
    # a persistent block asks L2 to keep its rows (measured faster on an H200), not the weight
    assert re.search(r"tl.load\(in_ptr0 \+ \(r0 \+ 513 \* x0\).*, eviction_policy='evict_last'\)", src), src
    assert src.count("evict_") == 1
    check(lambda x: (x.mean(-1), x.var(-1), x.std(0)), x)


def shared_memory_on_h100(source: str, name: str, **config) -> int:
    """Bytes of shared memory a rendered kernel takes on an H100."""
    require_compiler_for_h100()
    return compile_for_h100(source, name, **config).metadata.shared


def persistent_gpu_configs(rows: int, cols: int, dtype) -> list:
    """The launch configurations a GPU times for a persistent reduction over rows of `cols`."""
    from compiler.codegen.triton_config import _persistent_configs, pow2

    return _persistent_configs(rows, pow2(cols), inner=True, gpu=True, itemsize=dtype.itemsize)


def test_a_gpu_loops_float32_rows_of_32768_that_a_load_divides(monkeypatch):
    """On a GPU, float32 rows padded to 32768 stay in registers (rms_norm), unless a
    load takes a division of r (group norm's per-channel weight and bias): those
    loop, which ran faster. The plan is asked of the kernels a compile lowered."""
    from compiler.codegen import triton_config

    kernels = []
    plan = triton_config.plan
    monkeypatch.setattr(triton_config, "plan", lambda k, *a, **kw: kernels.append(k) or plan(k, *a, **kw))

    def reduction(fn, *args):
        kernels.clear()
        check(fn, *args, tol=dict(rtol=1e-4, atol=1e-4))
        (k,) = [k for k in kernels if k.rnumel > 1]
        return k

    def gpu_plan(fn, *args):
        return triton_config._plan(reduction(fn, *args), True, 4, False, False)

    x, w, b = rand(2, 64, 56, 56, device="cpu"), rand(64, device="cpu"), rand(64, device="cpu")
    group_norm = gpu_plan(lambda x, w, b: F.group_norm(x, 8, w, b), x, w, b)  # rows of 8 x 3136 = 25088
    rms_norm = gpu_plan(lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
                        rand(4, 25088, device="cpu"), rand(25088, device="cpu"))
    assert not group_norm.persistent and rms_norm.persistent, (group_norm, rms_norm)
    shorter = gpu_plan(lambda x, w, b: F.group_norm(x, 8, w, b), rand(2, 64, 28, 56, device="cpu"), w, b)
    assert shorter.persistent and shorter.configs[0]["RBLOCK"] == 16384  # rows of 8 x 1568 = 12544 stay
    # a row of a view takes r's remainder too: its values are not held along the row
    view = reduction(lambda x: x.transpose(1, 2).reshape(4, 25088).softmax(-1), rand(4, 196, 128, device="cpu"))
    assert not triton_config._divides_r(view) and "FloorDiv(r0, 196)" in str([e.args[1] for e in triton_config.external_loads(view)])


@pytest.mark.parametrize("shape", [(8192, 4096), (8192, 1024)])
def test_big_persistent_reductions_tune_rows_per_program_for_h100(shape):
    """Where a program of a big persistent reduction takes several rows, a GPU
    also times half the rows per program (on an H200, bf16 softmax over [8192,
    4096] ran 40.1 us with 2 rows of 8 warps, 36.9 with 1): every candidate
    compiles for sm_90 without spilling registers. Small ones run their first guess."""
    require_compiler_for_h100()
    for dtype in (torch.float32, torch.bfloat16):
        configs = persistent_gpu_configs(*shape, dtype)
        first = configs[0]
        expected = [first] + [dict(first, XBLOCK=1, num_warps=4, grid=shape[0])] * (shape[1] > 2048 and first["num_warps"] > 4)
        if first["XBLOCK"] > 1:
            expected.append(dict(first, XBLOCK=first["XBLOCK"] // 2, grid=2 * first["grid"]))
        assert configs == expected
        assert len(persistent_gpu_configs(512, shape[1], dtype)) == 1
        kernel = check(lambda x: x.softmax(-1), rand(5, shape[1], device="cpu", dtype=dtype)).kernels[0]
        for cfg in configs:
            blocks = {k: v for k, v in cfg.items() if k.endswith("BLOCK")}
            ck = compile_for_h100(kernel.source, kernel.name, num_warps=cfg["num_warps"], **blocks)
            assert local_memory_accesses(ck) == 0, f"{cfg}: registers spill to local memory"
    # 2 rows of 4096 bf16 per program first, then 1 row in 4 warps, then 1 row
    assert len(persistent_gpu_configs(8192, 4096, torch.bfloat16)) == 3


def test_big_reductions_over_a_short_strided_dim_time_more_rows():
    """A big reduction over a short strided dim (a pooling window at stride 2)
    times its first guess against 32 elements a thread at its rows per program
    and twice as many (H200, max_pool2d 3x3 stride 2 over [32, 64, 112, 112]
    bf16, kernel alone: 34.4 us first, 33.7 at 512 rows in 8 warps); each
    compiles for sm_90 without spilling registers. A small one runs its first guess."""
    from compiler.codegen.triton_config import _persistent_configs

    require_compiler_for_h100()
    for dtype, expected in ((torch.bfloat16, [(256, 4), (512, 8)]), (torch.float32, [(256, 8), (256, 4), (512, 8)])):
        configs = _persistent_configs(32 * 64 * 56 * 56, 16, inner=False, gpu=True, itemsize=dtype.itemsize)
        assert [(c["XBLOCK"], c["num_warps"]) for c in configs] == expected, configs
        kernel = check(lambda x: F.max_pool2d(x, 3, 2, 1), rand(2, 3, 13, 13, device="cpu", dtype=dtype)).kernels[0]
        for cfg in configs:
            ck = compile_for_h100(kernel.source, kernel.name, XBLOCK=cfg["XBLOCK"], RBLOCK=16, num_warps=cfg["num_warps"])
            assert local_memory_accesses(ck) == 0, f"{dtype} {cfg}: registers spill to local memory"
    assert len(_persistent_configs(4096, 16, inner=False, gpu=True, itemsize=2)) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_short_rows_take_four_warp_programs_of_4096_elements(dtype):
    """Rows of 512-2048 (padded) are held by 4-warp programs of 4096 elements,
    whatever their type (H200, layer_norm [16384, 768] bf16 22.2 -> 17.9 us); rows
    of 256 keep wider programs (layer_norm's backward ran slower so), and rows of
    4096 or more time 4 warps against their first guess."""
    for cols in (512, 768, 1024, 2048):
        first = persistent_gpu_configs(1 << 16, cols, dtype)[0]
        assert first["num_warps"] == 4 and first["XBLOCK"] * first["RBLOCK"] == 4096, (cols, first)
    first = persistent_gpu_configs(1 << 16, 256, dtype)[0]
    assert first["num_warps"] > 4 and first["XBLOCK"] * first["RBLOCK"] >= 4096, first
    if dtype == torch.float32:
        wide = persistent_gpu_configs(8192, 4096, dtype)
        assert wide[0]["num_warps"] > 4 and [c["num_warps"] for c in wide[1:]] == [4], wide


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the configurations are launched on a GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_every_tuned_config_matches_eager(dtype):
    """The autotuner may pick any candidate: each one computes eager's result."""
    from compiler.runtime import triton_build

    x, w, b = rand(8192, 1024, device="cuda", dtype=dtype), rand(1024, device="cuda", dtype=dtype), rand(1024, device="cuda", dtype=dtype)
    planes, grid = rand(4, 64, 128, 128, device="cuda", dtype=dtype), rand(4, 128, 128, 2, device="cuda", dtype=dtype)
    # grid_sample's weights contract into FMAs that eager rounds apart (see test_ops)
    sample_tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else _tol(dtype)
    for fn, inputs, tol in ((lambda x: x.softmax(-1), (x,), _tol(dtype)),
                            (lambda x, w, b: F.layer_norm(x, (1024,), w, b), (x, w, b), _tol(dtype)),
                            (lambda x, g: F.grid_sample(x, g, align_corners=False), (planes, grid), sample_tol)):
        kernel = check(fn, *inputs, tol=tol).kernels[0]
        meta = meta_of(kernel.source)
        assert len(meta["configs"]) >= 2
        kfn = getattr(triton_build.load_module(kernel.name, kernel.source, interpret=False)[0], kernel.name)
        ref = fn(*inputs)
        for cfg in meta["configs"]:
            # graph inputs are arg<i>; the one output is poisoned before each launch
            args = [inputs[int(a["name"][3:])] if a["name"].startswith("arg") else torch.full_like(ref, float("nan"))
                    for a in meta["args"]]
            blocks = {k: v for k, v in cfg.items() if k.endswith("BLOCK")}
            kfn[(cfg["grid"],)](*args, **blocks, **triton_build.compile_options(meta, cfg))
            torch.testing.assert_close(args[-1], ref, **tol, msg=lambda m, cfg=cfg: f"{cfg}: {m}")


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64], ids=str)
def test_integer_helpers_compile_for_h100(dtype):
    """The interpreter runs the kernels as Python; Triton's compiler is stricter
    (a division helper that ran under the interpreter did not compile for uint8
    on an H100). check() compiles each integer helper's kernel for sm_90 here."""
    require_compiler_for_h100()
    a = torch.randint(0, 100, (301,), dtype=dtype)
    b = torch.randint(1, 9, (301,), dtype=dtype)
    check(lambda a, b: (a // b, a % b, torch.fmod(a, b), a ** (b % 3), a << (b % 4), a >> (b % 4)), a, b)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int32, torch.int64], ids=str)
def test_gpu_forms_of_the_integer_helpers_compile_for_h100(dtype):
    """A GPU renders integer division and remainder with its own // and %
    (triton_ops.GPU_HELPERS), which the interpreter cannot run: CI compiles them
    for sm_90, by a tensor divisor and by constants (-1 included)."""
    from compiler.codegen.triton_ops import helper_sources

    require_compiler_for_h100()
    t = str(dtype).removeprefix("torch.")
    meta = dict(configs=[dict(XBLOCK=128, num_warps=4, num_stages=1, grid=1)], workspace=[], pdl=False, fp_fusion=True,
                args=[dict(name=n, dtype=t, extent=128, check_align=True) for n in ("arg0", "arg1", "buf2")])
    helpers = "\n\n".join(helper_sources(["_floordiv", "_int_fmod", "_int_remainder", "_truncdiv"], cuda=True))
    source = f"""import triton
import triton.language as tl

META = {meta!r}

{helpers}

@triton.jit
def triton_integer_helpers(in_ptr0, in_ptr1, out_ptr0, XBLOCK: tl.constexpr):
    x0 = tl.arange(0, XBLOCK)
    a = tl.load(in_ptr0 + x0)
    b = tl.load(in_ptr1 + x0)
    q = _floordiv(a, b) + _truncdiv(a, b) + _int_fmod(a, b) + _int_remainder(a, b)
    tl.store(out_ptr0 + x0, q + _truncdiv(a, {-1 if dtype.is_signed else 7}) + _int_fmod(a, 13))
"""
    compile_for_h100(source, "triton_integer_helpers")  # raises where Triton rejects a form for the type


@pytest.mark.parametrize("n", [12289, 12296])
def test_weights_take_the_layout_of_unaligned_rows(n):
    """Rows of 12289 bf16 are 2-byte aligned: Triton reads them one element per
    thread, and would read the weight and bias with 16-byte vectors, moving the
    values between the two layouts through 16 KB of shared memory on every row
    (H100: 117 us, against 86 us with the weight loads told the rows' alignment,
    which gives them the rows' layout). Rows of 12296 are aligned."""
    ln = nn.LayerNorm(n).to(torch.bfloat16).eval()
    with torch.no_grad():
        ln.weight.normal_(), ln.bias.normal_()
    kernel = check(ln, rand(3, n, device="cpu", dtype=torch.bfloat16)).kernels[0]
    assert ("tl.multiple_of(" in kernel.source) == (n == 12289)
    # compiled with the block an H100 gives these rows
    assert shared_memory_on_h100(kernel.source, kernel.name, num_warps=16, XBLOCK=1, RBLOCK=16384) <= 1024


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_softmax_and_layer_norm(device, dtype):
    x = rand(17, 300, device=device, dtype=dtype)
    check(lambda x: x.softmax(-1), x)
    check(lambda x: F.layer_norm(x, (300,)), x)


@pytest.mark.parametrize("device", DEVICES)
def test_looped_reductions_long_rows(device):
    """Rows longer than fit in registers: one loop over r per phase."""
    x = rand(3, 9001 if device == "cpu" else 40001, device=device)
    cap = check(lambda x: x.softmax(-1), x)
    assert "for roffset in range" in cap.kernels[0].source
    check(lambda x: (x.sum(-1), x.amax(-1), x.amin(-1, keepdim=True)), x)
    check(lambda x: F.layer_norm(x, (x.shape[1],)), x)


@pytest.mark.parametrize("n,dtype", [(4099, torch.float32), (9001, torch.bfloat16), (4100, torch.float32)])
def test_misaligned_rows_are_read_from_their_16_byte_boundary(n, dtype):
    """Rows of 4099 floats start on 4-byte boundaries: Triton would read them one
    element per thread. A looped reduction whose every access along r is the row
    itself walks each row from the 16-byte boundary before it, so its inner blocks
    load and store whole 16-byte vectors (checked in the kernel compiled for an
    H100); the first and last blocks mask the elements of the rows beside it.
    Seven rows take every shift; 4100 floats are aligned and read as they are.
    An argmax walks them so too, counting positions from the row's first element
    (H200, argmax over [2048, 50257] fp32, per call: 140.5 -> 114.4 us; eager
    130.9, Inductor 144.5)."""
    require_compiler_for_h100()
    x = rand(7, n, device="cpu", dtype=dtype) * 4
    kernel = check(lambda x: (x.softmax(-1), F.log_softmax(x, -1)), x).kernels[0]
    check(lambda x: (x.sum(-1), x.amax(-1), F.layer_norm(x, (n,))), x, tol=dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else None)
    shifted = "rindex + rrow" in kernel.source
    assert shifted == (n != 4100)
    whole = kernel.source.split("for roffset")[2 if shifted else 1]  # the first pass's inner blocks
    vectors = ".v4.b32" in compile_for_h100(kernel.source, kernel.name).asm["ptx"]
    assert vectors and "tl.full([1, RBLOCK], True" in whole
    ln = nn.LayerNorm(n).to(dtype)  # a weight along r is read at r0 itself: not shifted
    assert "rrow" not in check(ln, x).kernels[0].source
    # positions count from the row's first element, not its boundary; rounding makes
    # ties, where the first position wins
    for fn in (lambda x: (x.argmax(-1), x.argmin(-1)), lambda x: (x.round().argmax(-1), x.round().argmin(1))):
        assert ("rindex + rrow" in check(fn, x).kernels[0].source) == (n != 4100)
    # so does a value of the position itself (an iota along r: cross entropy's
    # one-hot in its backward)
    picked = lambda x: torch.where(torch.arange(n) % 7 == 3, x, -2 * x).softmax(-1)
    assert ("rindex + rrow" in check(picked, x).kernels[0].source) == (n != 4100)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the candidate configurations are a GPU's")
def test_gpu_shifted_rows_read_twice_take_short_steps():
    """A softmax over rows that start off 16 bytes (50257 floats), walked from their
    boundary, times only steps of at most 4096 (8192 ran 60% slower on an H200);
    aligned rows of 50264 still try 8192."""
    from compiler.codegen.triton import SHIFTED_MULTIPASS_MAX_RBLOCK

    for n, shifted in ((50257, True), (50264, False)):
        kernel = check(lambda x: x.softmax(-1), rand(100, n, device="cuda")).kernels[0]
        steps = [c["RBLOCK"] for c in meta_of(kernel.source)["configs"]]
        assert ("rindex + rrow" in kernel.source) == shifted
        assert (max(steps) <= SHIFTED_MULTIPASS_MAX_RBLOCK) == shifted, steps


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the wide persistent form is chosen for GPUs")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_rows_up_to_32k_stay_in_registers(dtype):
    """On a GPU, rows of up to 32768 float32 or 16384 16-bit elements are read
    once, held by 16-32 warps, unless the kernel reads more than three row-long
    tensors, or its rows are longer than 32 KB and start off 16 bytes: a
    persistent block would load those element by element, so they loop, walked
    from their 16-byte boundary (H200, softmax fp32 [4096, 12289]: 131 -> 111 us;
    bf16 rows of 24 KB stay). Longer 16-bit rows loop (layer_norm bf16 [2048,
    25088]: 78.4 -> 69.9 us)."""
    x = rand(5, 12289, device="cuda", dtype=dtype)
    looped = dtype == torch.float32  # 48 KB rows
    for fn in (lambda x: x.softmax(-1), lambda x: F.log_softmax(x, -1)):
        source = check(fn, x).kernels[0].source
        assert ("for roffset" in source) == looped and ("rindex + rrow" in source) == looped
        wide = check(fn, rand(5, 12292, device="cuda", dtype=dtype)).kernels[0].source  # aligned
        assert "for roffset" not in wide and "evict_" not in wide  # the L2 hint: rows up to 4096 fp32 only
    ln = nn.LayerNorm(25088).to("cuda", dtype).eval()
    with torch.no_grad():
        ln.weight.normal_(), ln.bias.normal_()
    cap = check(ln, rand(3, 25088, device="cuda", dtype=dtype))
    assert len(cap.kernels) == 1 and ("for roffset" in cap.kernels[0].source) == (dtype == torch.bfloat16)
    a, b, c, d = (rand(5, 12289, device="cuda", dtype=dtype) for _ in range(4))
    cap = check(lambda a, b, c, d: (a * b + c * d).softmax(-1), a, b, c, d)
    assert "for roffset" in cap.kernels[0].source


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the wide persistent form is chosen for GPUs")
def test_gpu_rows_past_int32_offsets_stay_in_registers():
    """A kernel over more than 2^31 elements indexes in 64 bits and is never walked
    from each row's 16-byte boundary, so its wide rows stay in registers even when
    they start off 16 bytes. Rows on both sides of element 2^31 agree with eager."""
    rows, cols = 174_800, 12_289  # 2.15e9 elements of float32: 8.6 GB, rows of 48 KB
    x = torch.randn(rows, cols, device="cuda")
    compiled = torch.compile(lambda x: x.softmax(-1), backend="fusion")
    with compiler.capture() as cap, torch.no_grad():
        out = compiled(x)
    src = cap.kernels[0].source
    assert "tl.int64" in src and "for roffset" not in src and "rshift" not in src, src
    edge = 2**31 // cols
    for r in (slice(0, 4), slice(edge - 2, edge + 3), slice(rows - 4, rows)):
        torch.testing.assert_close(out[r], x[r].softmax(-1), **_tol(torch.float32))
    del x, out
    torch.cuda.empty_cache()


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the cooperative form is a GPU's (the interpreter runs programs one by one)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_gpu_few_long_rows_split_cooperatively(dtype):
    """A handful of long rows read more than once: each row's slices are held by
    programs that meet at a barrier per reduction, one kernel reads x once. The
    counters reset themselves: later calls (and CUDA graph replays) agree."""
    cases = [
        (lambda x: x.softmax(-1), (rand(3, 100_003, device="cuda", dtype=dtype) * 4,)),  # rows off 16 bytes
        (lambda x: F.log_softmax(x, -1), (rand(1, 128_256, device="cuda", dtype=dtype),)),
        (lambda x, w: F.layer_norm(x, (70_001,), w) * 2, (rand(5, 70_001, device="cuda", dtype=dtype) + 3,
                                                          rand(70_001, device="cuda", dtype=dtype))),
    ]
    for fn, args in cases:
        cap = check(fn, *args, tol=dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else None)
        assert len(cap.kernels) == 1 and "ticket" in cap.kernels[0].source, [k.name for k in cap.kernels]
        compiled = torch.compile(fn, backend="fusion")
        with torch.no_grad():
            first = compiled(*args)
            assert all(torch.equal(first, compiled(*args)) for _ in range(3))
    norm = nn.GroupNorm(2, 64).to("cuda", dtype).eval()  # 4 rows of 401408: statistics and normalize in one kernel
    with torch.no_grad():
        norm.weight.normal_(), norm.bias.normal_()
        cap = check(norm, rand(2, 64, 112, 112, device="cuda", dtype=dtype) * 3 + 1)
    assert len(cap.kernels) == 1 and "ticket" in cap.kernels[0].source
    with config.patch(cuda_graphs=True), torch.no_grad():
        x = rand(2, 65_537, device="cuda", dtype=dtype)
        graphed = torch.compile(lambda x: x.softmax(-1), backend="fusion")
        outs = [graphed(x).clone() for _ in range(3)]
        torch.testing.assert_close(outs[-1], x.softmax(-1), **_tol(dtype))
        assert all(torch.equal(outs[0], o) for o in outs)


@pytest.mark.parametrize("device", DEVICES)
def test_split_reductions_over_few_rows(device):
    """Few long rows: several programs per row, the last one combines them."""
    n = 27_003 if device == "cpu" else 4_000_037
    a, b = rand(n, device=device), rand(n, device=device)
    long_sum = dict(rtol=1e-4, atol=1e-2)
    cap = check(lambda a, b: (a.sum(), ((a - b) ** 2).mean(), a.amax()), a, b, tol=long_sum)
    assert any("atomic_add" in k.source for k in cap.kernels)
    rows = 9000 if device == "cpu" else 65536
    cap = check(lambda x: (x * 2).sum(0) + 1, rand(rows, 40, device=device), tol=long_sum)
    assert "atomic_add" in cap.kernels[0].source


@pytest.mark.parametrize("device", DEVICES)
def test_group_norm_statistics_take_one_split_pass(device):
    """Long groups over few rows: mean and variance come from one pass of two
    shifted sums, sum(x - k) and sum((x - k)^2) (no reduction reads another's
    result), so the statistics kernel reads x once and, on a GPU, splits across
    programs."""
    shape, groups = ((2, 16, 29, 31), 1) if device == "cpu" else ((32, 256, 56, 57), 4)  # 14384 or 204288 a group
    norm = nn.GroupNorm(groups, shape[1]).to(device).eval()
    x = rand(*shape, device=device) * 3 + 100  # far from 0: a naive E[x^2]-E[x]^2 would lose every digit
    with torch.no_grad():
        cap = check(norm, x)
    reductions = [line for line in cap.graphs[0].ir.splitlines() if "= reduction" in line]
    assert len(reductions) == 2 and not any("load(buf" in line for line in reductions), reductions
    assert len([k for k in cap.kernels if k.kind == "reduction"]) == 1
    if device == "cuda":  # 128 rows cannot fill the GPU: several programs per row
        assert "atomic_add" in cap.kernels[0].source


@pytest.mark.parametrize("device", DEVICES)
def test_the_normalization_after_split_statistics_reads_the_variance(device):
    """Where the statistics' sums are a kernel of their own (8 groups of [4, 256,
    56, 56]), the variance is a buffer beside the mean: the normalization reads it
    for each element, where it divided the sums again (H200, [32, 256, 56, 56],
    divisions correctly rounded: 94.2 -> 83.4 us)."""
    norm = nn.GroupNorm(8, 256).to(device).eval()
    with torch.no_grad():
        cap = check(norm, rand(4, 256, 56, 56, device=device) * 3 + 100)
    after = [k for k in cap.kernels if k.kind == "pointwise"]
    assert after, [k.name for k in cap.kernels]
    assert not any(re.search(r" / |div_rn\(", k.source) for k in after), after[0].source



@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_a_reduction_walks_its_reduced_dims_in_memory_order(device, dtype):
    """A group norm over a channels-last input reduces each group's (channel, pixel)
    pairs, whose channels lie side by side in memory: r0 walks them innermost, in
    runs of the group's channels, not the pixels, a row of channels apart. A sum
    over every dim but the batch walks each sample contiguously. Also split across
    programs (few long groups), and with 3 channels a group."""
    def image(*shape):
        return rand(*shape, device=device, dtype=dtype).to(memory_format=torch.channels_last)

    def group_norm(groups):
        return lambda x, w, b: F.group_norm(x, groups, w, b)

    w, b = rand(9, device=device, dtype=dtype), rand(9, device=device, dtype=dtype)
    kernel = check(group_norm(3), image(3, 9, 13, 11), w, b).kernels[0]
    assert meta_of(kernel.source)["order"] == ((143, 1), (3, 143))  # pixels outer, a group's channels inner
    load = next(line for line in kernel.source.splitlines() if "tl.load(in_ptr0" in line and "r0" in line)
    assert "(r0 % 3)" in load and "9 * (r0 // 3)" in load, load
    src = check(lambda x: x.sum((1, 2, 3)), image(3, 6, 9, 17)).kernels[0].source
    assert re.search(r"tl\.load\(in_ptr0 \+ \(r0 \+ 918 \* x0\)", src), src
    w, b = rand(2, device=device, dtype=dtype), rand(2, device=device, dtype=dtype)
    stats = check(group_norm(1), image(1, 2, 160, 160), w, b).kernels[0].source
    assert meta_of(stats)["order"] == ((25600, 1), (2, 25600))
    assert device == "cuda" or meta_of(stats)["split"] > 1  # a GPU takes one long row in one program

@pytest.mark.parametrize("device", DEVICES)
def test_a_reduction_walked_in_memory_order_leaves_a_transposed_epilogue_to_a_tile(device):
    """A group norm over a channels-last input walks each group in memory order; an
    output in the logical order (eager's on a GPU; here made contiguous) would be
    written across that walk, a row of channels apart: the normalization is a 2-D
    tile of its own (H200, 32 groups [32, 256, 56, 56], us per call, fused -> apart:
    bf16 127.6 -> 63.1, Inductor 64.4). Written in the walk's order, it stays fused."""
    x = rand(2, 32, 6, 7, device=device).to(memory_format=torch.channels_last)
    w, b = rand(32, device=device), rand(32, device=device)
    kernels = check(lambda x, w, b: F.silu(F.group_norm(x, 4, w, b)).contiguous(), x, w, b).kernels
    assert [k.kind for k in kernels] == ["reduction", "pointwise"] and meta_of(kernels[1].source)["tile"], kernels
    kernels = check(lambda x, w, b: F.silu(F.group_norm(x, 4, w, b)).to(memory_format=torch.channels_last), x, w, b).kernels
    assert [k.kind for k in kernels] == ["reduction"], [k.name for k in kernels]


@pytest.mark.parametrize("device", DEVICES)
def test_loads_that_do_not_vary_along_r_leave_the_loop(device):
    """A looped reduction loads a row's own values (a group's first element, a
    per-row bias) once, before its loops: Triton's compiler does not move a load
    out of a loop that stores. A kernel that writes an input keeps them inside."""
    rows = 6 if device == "cpu" else 512  # a GPU splits a handful of long rows across programs
    x, b = rand(rows, 9001, device=device), rand(rows, 1, device=device)  # looped: longer than a block
    long_groups = nn.GroupNorm(1, 16).to(device).eval()
    cases = [
        (lambda x, b: (x + b).softmax(-1) * b, (x, b)),
        # groups of 14384 (the CPU) or 51072: longer than a GPU's persistent rows
        (lambda x: long_groups(x), (rand(2, 16, 29, 31, device=device) if device == "cpu" else rand(64, 16, 56, 57, device=device),)),
    ]
    for fn, args in cases:
        with torch.no_grad():
            cap = check(fn, *args)
        in_loops = [line for k in cap.kernels for line in _loop_lines(k.source) if "load(" in line]
        assert in_loops, [k.source for k in cap.kernels]
        assert all("r0" in line or "rindex" in line for line in in_loops), [k.source for k in cap.kernels]

    def write_back(x, b):
        x.sub_(x.mean(-1, keepdim=True) * b)  # reads x[row] in the loops that write it
        return x.sum(-1)

    mine, theirs = x.clone(), x.clone()
    with compiler.capture() as cap:
        out = torch.compile(write_back, backend="fusion")(mine, b)
    torch.testing.assert_close(out, write_back(theirs, b), rtol=1e-4, atol=1e-3)  # sums of 9001
    torch.testing.assert_close(mine, theirs, **_tol(x.dtype))
    in_loops = [line for k in cap.kernels for line in _loop_lines(k.source)]
    assert any(re.search(r"load\(in_ptr\d \+ \(x0\)", line) for line in in_loops), (
        [k.source for k in cap.kernels])  # b[row], beside the stores


def _loop_lines(source: str) -> list[str]:
    """The lines inside a kernel's loops over r."""
    inside, depth = [], None
    for line in source.splitlines():
        indent = len(line) - len(line.lstrip())
        if depth is not None and line.strip() and indent <= depth:
            depth = None
        if depth is not None:
            inside.append(line.strip())
        elif line.lstrip().startswith("for roffset in "):
            depth = indent
    return inside


@pytest.mark.parametrize("device", DEVICES)
def test_reduce_strided_dim(device):
    x = rand(301, 33, device=device)
    check(lambda x: (x.sum(0), x.amax(0), (x * 2).mean(0, keepdim=True)), x)


@pytest.mark.parametrize("device", DEVICES)
def test_arg_and_bool_reductions(device):
    x = rand(17, 301, device=device)
    check(lambda x: (x.argmax(-1), x.argmin(-1), x.argmax(0)), x)
    check(lambda x: ((x > 1).any(-1), (x > -3).all(-1), x.prod(-1)), rand(17, 11, device=device))
    check(lambda x: (x.argmax(-1), x.argmin(-1)), rand(3, 9001, device=device))


@pytest.mark.parametrize("device", DEVICES)
def test_reduction_epilogue_and_several_phases(device):
    def ceilfloor(a, b):
        return ((a.ceil() + b.floor()).sum(dim=-1).softmax(dim=-1) * 10) ** 3

    check(ceilfloor, rand(129, 257, device=device), rand(129, 257, device=device))
    # sum -> center -> var -> scale: three passes over r in one kernel
    check(lambda x: (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True) + 1).sqrt() + x.amax(-1, keepdim=True), rand(9, 1500, device=device))


# -- indirect loads ----------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_indirect_loads(device):
    w = rand(50, 24, device=device)
    idx = torch.randint(0, 50, (7, 5), device=device)
    check(lambda i, w: F.embedding(i, w) * 2, idx, w)
    x = rand(40, 30, device=device)
    g = torch.randint(0, 30, (40, 11), device=device)
    check(lambda x, g: torch.gather(x, 1, g).sum(-1), x, g)
    rows = torch.randint(-40, 40, (13,), device=device)
    check(lambda x, r: x[r].softmax(-1), x, rows)


@pytest.mark.parametrize("device", DEVICES)
def test_pad_of_an_empty_input_reads_nothing(device):
    # every output element is padding: a load at index 0 of the empty input read out
    # of bounds (the interpreter crashed with SIGSEGV)
    x, y = rand(3, 0, device=device), rand(3, 3, device=device)
    check(lambda x, y: F.pad(x, (1, 2), value=1.5) * y, x, y)


# -- graphs ----------------------------------------------------------------------------------


@pytest.mark.parametrize("device", DEVICES)
def test_toy_example_with_graph_break(device):
    def toy_example(a, b):
        x = a / (torch.abs(a) + 1)
        if b.sum() < 0:
            b = b * -1
        return x * b

    cap = check(toy_example, rand(10, device=device), -torch.rand(10, device=device) - 0.5)
    assert cap.graph_breaks >= 1


@pytest.mark.parametrize("device", DEVICES)
def test_mlp_training_step(device):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10)).to(device)
    ref = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.LayerNorm(64), nn.Linear(64, 10)).to(device)
    ref.load_state_dict(model.state_dict())
    x, y = rand(48, 32, device=device), torch.randint(0, 10, (48,), device=device)

    def step(m, x, y):
        loss = F.cross_entropy(m(x), y)
        loss.backward()
        return loss

    with compiler.capture() as cap:
        loss = torch.compile(step, backend="fusion")(model, x, y)
    loss_ref = step(ref, x, y)
    torch.testing.assert_close(loss, loss_ref, rtol=1e-4, atol=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5)
    kinds = {g.kind for g in cap.graphs}
    assert {"forward", "backward"} <= kinds
    assert all(k.target == "triton" for k in cap.kernels)


@pytest.mark.parametrize("device", DEVICES)
def test_training_with_a_second_batch_size(device):
    """Dynamo retraces with symbolic sizes for the smaller batch: Triton kernels
    are built again for it, forward and backward, and the grads equal eager's."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 40), nn.GELU(), nn.LayerNorm(40), nn.Linear(40, 5)).to(device)
    ref = nn.Sequential(nn.Linear(16, 40), nn.GELU(), nn.LayerNorm(40), nn.Linear(40, 5)).to(device)
    ref.load_state_dict(model.state_dict())
    compiled = torch.compile(model, backend="fusion")
    with compiler.capture() as cap:
        for rows in (24, 24, 11):
            x, y = rand(rows, 16, device=device), rand(rows, 5, device=device)
            model.zero_grad()
            ref.zero_grad()
            F.mse_loss(compiled(x), y).backward()
            F.mse_loss(ref(x), y).backward()
            for p, q in zip(model.parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad, q.grad, rtol=1e-3, atol=1e-5)
    assert not [f for g in cap.graphs for f in g.fallbacks]
    assert sorted(g.kind for g in cap.graphs) == ["backward", "backward", "forward", "forward"]
    assert all(k.target == "triton" for k in cap.kernels)


# -- the GPU launch path -----------------------------------------------------------------------


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the compiled launcher needs one")
def test_misaligned_input_takes_the_checked_path():
    base = rand(4097, device="cuda")
    x = base[1:]  # 4 bytes past a 16-byte boundary
    assert x.data_ptr() % 16
    check(lambda x: x * 2 + 1, x)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: NaN propagation is checked on the compiled path")
def test_gpu_max_propagates_nan_like_eager():
    x = rand(8, 300, device="cuda")
    x[3, 17] = math.nan
    check(lambda x: (x.amax(-1), x.softmax(-1), torch.maximum(x, x * 0)), x, equal_nan=True)


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device")
def test_gpu_autotuned_config_is_cached():
    """Each candidate configuration is timed once per shape and machine, the
    fastest runs and is remembered; the kernel's record says which and how the
    others did, and later that the choice came from the cache."""
    x = rand(4096, 4096, device="cuda")
    check(lambda x: x.softmax(-1), x)
    kernel = check(lambda x: x.sum(-1), x, tol=dict(rtol=1e-4, atol=1e-3)).kernels[0]
    configs = meta_of(kernel.source)["configs"]
    timed = kernel.launch["timed"]
    assert len(configs) > 1 and sorted(str(c) for c, _ in timed) == sorted(str(c) for c in configs)
    assert kernel.launch["config"] == timed[0][0] and timed[0][1] == min(us for _, us in timed) > 0
    torch._dynamo.reset()
    with compiler.capture() as cap:
        torch.compile(lambda x: x.sum(-1), backend="fusion")(x)
    assert cap.graphs[0].cache_hits == 1  # the source and the tuned config came from the cache
    assert kernel.launch["compile_s"] > 0
    launch = cap.kernels[0].launch
    assert launch == dict(kernel.launch, timed=[], timed_on=None, tuned_earlier=True, compile_s=launch["compile_s"])


def test_dependent_launch_waits_before_any_memory_access_on_h100():
    """On sm_90 a kernel waits for the kernel before it (griddepcontrol.wait)
    before its first load or store; the kernel carries the launch option that
    makes Triton's launcher launch it so too. Compiled for sm_90 from a real
    kernel with the renderer's wait."""
    require_compiler_for_h100()
    from compiler.codegen.triton import DEPENDENT_LAUNCH_WAIT

    kernel = check(lambda x, w: (x * w).softmax(-1) + 1, rand(64, 1000, device="cpu"), rand(1000, device="cpu")).kernels[0]
    assert "gdc_" not in kernel.source  # CPU kernels run in the interpreter, which has no griddepcontrol
    meta = dict(meta_of(kernel.source), pdl=True)
    lines = [f"META = {meta!r}" if line.startswith("META = ") else line for line in kernel.source.splitlines()]
    body = lines.index(next(line for line in lines if line.startswith(f"def {kernel.name}("))) + 1
    source = "\n".join(lines[:body] + [DEPENDENT_LAUNCH_WAIT] + lines[body:]) + "\n"
    compiled = compile_for_h100(source, kernel.name)
    assert compiled.metadata.launch_pdl
    ptx = compiled.asm["ptx"]
    first_access = min(ptx.find(op) for op in ("ld.global", "st.global") if op in ptx)
    assert 0 < ptx.find("griddepcontrol.wait") < first_access


def _dependent_kernels(x, w):
    h = (x * w).softmax(-1)  # a row reduction
    s = h.sum(0)  # over the strided dim: reads what the kernel before wrote
    return (h - s).relu().amax(-1), s * 2  # reads both


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: programmatic dependent launch is a GPU's")
@pytest.mark.parametrize("pdl", [True, False])
def test_gpu_dependent_kernels_launch_early_and_wait(pdl):
    """With PDL (sm_90+), each kernel launches while the one before it runs and
    waits for it before touching memory. Many calls queued back to back, each on
    new inputs (some just written by ATen or cuBLAS), the allocator handing
    freed buffers to the next kernels, match eager: no kernel reads before its
    producer wrote or writes over what its predecessor still reads.
    FUSION_PDL=0 renders and launches as before."""
    if pdl and torch.cuda.get_device_capability()[0] < 9:
        pytest.skip("programmatic dependent launch needs sm_90 or later")
    w, m = rand(1000, device="cuda"), rand(1000, 1000, device="cuda") / 32
    xs = [rand(333, 1000, device="cuda") for _ in range(40)]
    producers = [lambda x: x, lambda x: x * 1.5, lambda x: x @ m]  # as given, or just written by ATen or cuBLAS
    with config.patch(pdl=pdl), torch.no_grad():
        torch._dynamo.reset()
        compiled = torch.compile(_dependent_kernels, backend="fusion")
        with compiler.capture() as cap:
            compiled(xs[0], w)
        # no synchronization between calls
        outs = [compiled(producers[i % 3](x), w) for i, x in enumerate(xs)]
    assert len(cap.kernels) >= 3, [k.name for k in cap.kernels]
    for k in cap.kernels:
        assert ("tl.extra.cuda.gdc_wait()" in k.source) is pdl and k.launch["dependent"] is pdl
    for i, (x, out) in enumerate(zip(xs, outs)):
        for o, r in zip(out, _dependent_kernels(producers[i % 3](x), w)):
            torch.testing.assert_close(o, r, **_tol(torch.float32))


def test_kernel_records_say_how_they_launch():
    """Under the interpreter a kernel runs its one configuration, and says so."""
    kernel = check(lambda x: (x * 3).cos(), rand(5000, device="cpu")).kernels[0]
    assert kernel.launch == dict(config=meta_of(kernel.source)["configs"][0], launcher="interpreter", timed=[],
                                 timed_on=None, tuned_earlier=False, compile_s=None, dependent=False)


def test_a_launcher_waits_on_its_first_run_and_tells_its_record():
    """A kernel still compiling when its graph's compile returns is waited for by
    the first run, which then tells the kernel's record how it launches and adds
    the wait to the graph's compile time."""
    from compiler.compile_fx import _record_launch
    from compiler.runtime.triton_build import TritonLauncher

    cap = check(lambda x: (x * 3).cos(), rand(5000, device="cpu"))
    record, kernel = cap.graphs[0], cap.kernels[0]
    compiled_s, ran = record.compile_time_s, []

    def resolve(args):  # the compile's stand-in: slow once, then a launch
        assert args == (1, 2)  # the first call's, which a kernel may be tuned on
        time.sleep(0.05)
        launcher.info = {"launcher": "c"}
        return lambda *args: ran.append(args)

    launcher = TritonLauncher(kernel.name, resolve)
    _record_launch(record, kernel, launcher)
    assert kernel.launch is None and not launcher.ready
    launcher.run(1, 2)
    launcher.run(3)
    assert ran == [(1, 2), (3,)] and launcher.ready and kernel.launch == {"launcher": "c"}
    assert record.compile_time_s >= compiled_s + 0.05


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: kernels compile in worker processes only for a GPU")
def test_gpu_kernels_finish_compiling_on_the_first_call(tmp_path):
    """compile_graph returns while its Triton kernels compile (Dynamo builds its
    guards meanwhile); the first call waits for them and fills in their records."""
    from torch.fx.experimental.proxy_tensor import make_fx

    from compiler.compile_fx import compile_graph

    x = rand(100_003, device="cuda")
    gm = make_fx(lambda x: ((x + 1) * 2).sin())(x)
    with config.patch(cache_dir=str(tmp_path)):
        call = compile_graph(gm, [x])
    record = call.record
    compiled_s = record.compile_time_s
    assert [k.launch for k in record.kernels] == [None]
    (out,) = call([x])
    torch.testing.assert_close(out, ((x + 1) * 2).sin())
    launch = record.kernels[0].launch
    assert launch["launcher"] in ("c", "triton") and launch["compile_s"] > 0
    assert record.compile_time_s > compiled_s


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the compiled launcher needs one")
def test_gpu_kernels_on_the_c_launcher_build_no_triton_launcher(monkeypatch):
    """Triton's own launcher is a C module gcc builds per kernel signature (a fifth
    of a second each, cold): kernels our C launcher runs never ask for one."""
    from compiler.runtime import cuda_launcher
    from triton.runtime import driver

    if cuda_launcher.load() is None:
        pytest.skip("no C compiler for our launcher: Triton's launches every kernel")
    check(lambda x: x.cos() + 1, rand(1000, device="cuda"))  # the first kernel checks the C launcher against Triton's
    built = []
    real = driver.active.launcher_cls
    monkeypatch.setattr(driver.active, "launcher_cls", lambda *a, **k: built.append(a) or real(*a, **k))
    check(lambda x, y: ((x * 3.25).sin() - y).relu(), rand(4099, device="cuda"), rand(4099, device="cuda"))
    check(lambda x: F.layer_norm(x, (777,)), rand(33, 777, device="cuda"), tol=dict(rtol=1e-4, atol=1e-4))
    assert not built


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: the launchers run on a GPU")
def test_gpu_a_scatter_compiled_first_leaves_the_launcher_check_to_the_next_kernel(monkeypatch):
    """The C launcher is checked once a process against Triton's, bit for bit, on
    the first kernel. A scatter adds atomically, in any order, so it cannot be that
    kernel: it launches through Triton's until a later kernel has passed the check,
    rather than failing it on rounding and sending every later kernel to Triton's."""
    from compiler.runtime import cuda_launcher, triton_build

    if cuda_launcher.load() is None:
        pytest.skip("no C compiler for our launcher: Triton's launches every kernel")
    monkeypatch.setattr(triton_build, "_c_checked", {})  # as in a fresh process
    grad, ids = rand(4096, 64, device="cuda"), torch.randint(0, 50, (4096,), device="cuda")
    cap = check(lambda g, i: torch.ops.aten.embedding_dense_backward(g, i, 50, -1, False), grad, ids,
                tol=dict(rtol=1e-4, atol=1e-3))
    (scatter,) = [k for k in cap.kernels if k.kind == "scatter"]
    assert scatter.launch["launcher"] == "triton" and "ok" not in triton_build._c_checked, scatter.launch
    (k,) = check(lambda x: x.cos() * 3 + 1, rand(1000, device="cuda")).kernels
    assert triton_build._c_checked == {"ok": True} and k.launch["launcher"] == "c", k.launch


def _ready(workers, count: int, timeout_s: float = 120) -> None:
    import time

    deadline = time.monotonic() + timeout_s
    while workers.ready < count and time.monotonic() < deadline:
        time.sleep(0.05)
    assert workers.ready == count, f"{workers.ready} of {count} compile workers started"


def test_compile_workers_fill_the_cache_the_parent_compiles_from(tmp_path, monkeypatch):
    """Worker processes compile a kernel's configurations for sm_90 into Triton's
    cache, and the parent's own compile of each finds it there (it adds nothing
    to the cache: the same key). A job a worker cannot do is answered with why;
    when the workers die, jobs are still answered and later ones compile in the
    parent: nothing hangs."""
    require_compiler_for_h100()
    from triton import knobs

    from compiler.runtime import compile_workers, triton_build

    kernel = check(lambda x: (x * 1.5).softmax(-1), rand(3, 3001, device="cpu")).kernels[0]
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    meta = meta_of(kernel.source)
    module, path, _ = triton_build.load_module(kernel.name, kernel.source, interpret=False)
    fn = getattr(module, kernel.name)
    dtypes = [a["dtype"] for a in meta["args"]]
    blocks = {b: min(v, 64) for b, v in meta["configs"][0].items() if b.endswith("BLOCK")}

    def options(warps):
        return dict(num_warps=warps, enable_fp_fusion=True)

    def job(warps, name=kernel.name):
        return dict(path=str(path), name=name, dtypes=dtypes, blocks=blocks, options=options(warps), cache_dir=knobs.cache.dir)

    workers = compile_workers.Workers(2, ("cuda", 90, 32))
    try:
        _ready(workers, 2)
        assert [f.result(timeout=300) for f in [workers.submit(job(w)) for w in (2, 4)]] == [None, None]
        cached = sorted(os.listdir(tmp_path / "triton"))
        assert len(cached) >= 2
        for warps in (2, 4):
            ck = compile_workers.compile_kernel(fn, dtypes, blocks, options(warps), ("cuda", 90, 32))
            assert ck.metadata.num_warps == warps
        assert sorted(os.listdir(tmp_path / "triton")) == cached
        assert "no_such_kernel" in workers.submit(job(4, name="no_such_kernel")).result(timeout=60)
        assert (workers.compiled, workers.failed) == (2, 1)
        for proc in workers.processes:
            proc.kill()
        answers = []
        while (future := workers.submit(job(8))) is not None and len(answers) < 10:
            answers.append(future.result(timeout=60))
        assert answers and all(isinstance(a, str) for a in answers) and workers.ready == 0
    finally:
        for proc in workers.processes:
            proc.kill()


def test_a_worker_links_a_small_libdevice_to_the_same_code(tmp_path, monkeypatch):
    """A compile worker links the float32 functions a kernel calls (sin, tanh, pow)
    from a small library it builds out of libdevice, into the directory it is
    given: the kernel compiles to the same PTX and cubin as with the whole library.
    A kernel of float64 links the whole library; a small library found broken is
    built again (cut short) or given up for the whole one (unparsable)."""
    require_compiler_for_h100()
    from compiler.runtime import compile_workers, slim_libdevice

    def kernel(fn, x):
        torch._dynamo.reset()
        return check(fn, x, tol=dict(rtol=1e-6, atol=1e-6)).kernels[0]

    def compiled(kernel):
        blocks = {b: min(v, 256) for b, v in meta_of(kernel.source)["configs"][0].items() if b.endswith("BLOCK")}
        monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / f"triton{len(os.listdir(tmp_path))}"))  # a fresh one
        return compile_for_h100(kernel.source, kernel.name, num_warps=4, **blocks)

    f32 = kernel(lambda x: x.sin() * x.tanh() + x.abs() ** 2.5, rand(1000, device="cpu"))
    f64 = kernel(lambda x: x.sin() * x.tanh(), rand(1000, device="cpu", dtype=torch.float64))
    whole = compiled(f32)
    lib = tmp_path / "libdevice"
    link = slim_libdevice.install(str(lib))
    try:
        small = compiled(f32)
        assert link.linked_small == 1 and len(os.listdir(lib)) == 1
        assert small.asm["ptx"] == whole.asm["ptx"] and small.asm["cubin"] == whole.asm["cubin"]
        compiled(f64)
        assert link.linked_small == 1
        (built,) = lib.iterdir()
        built.write_text(built.read_text()[:200])  # cut short: no function left, built again
        link.libs.clear()
        assert compiled(f32).asm["ptx"] == whole.asm["ptx"] and link.linked_small == 2
        built.write_text("define float @__nv_sinf(float %x) {")  # unparsable: the whole library
        link.libs.clear()
        assert compiled(f32).asm["ptx"] == whole.asm["ptx"] and link.linked_small == 2
    finally:
        slim_libdevice.uninstall()
    # a worker process builds its own into the directory it is given
    workers = compile_workers.Workers(1, ("cuda", 90, 32), str(tmp_path / "worker-libdevice"))
    try:
        _ready(workers, 1)
        assert [p.name.startswith("libdevice-f32-") for p in (tmp_path / "worker-libdevice").iterdir()] == [True]
    finally:
        for proc in workers.processes:
            proc.kill()


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: kernels compile in workers for a GPU")
def test_gpu_kernels_compile_in_worker_processes():
    """Once the workers are up, every configuration of a GPU kernel is compiled by
    one of them, and the kernel computes eager's result."""
    from compiler.runtime import compile_workers
    from compiler.runtime.triton_build import _target

    workers = compile_workers.workers(max(config.compile_workers, 1), _target())
    _ready(workers, max(config.compile_workers, 1))
    before = workers.compiled, workers.failed
    cap = check(lambda x: (x.exp() * 0.75).softmax(-1), rand(4096, 2049, device="cuda"))
    configs = sum(len(meta_of(k.source)["configs"]) for k in cap.kernels)
    assert (workers.compiled - before[0], workers.failed - before[1]) == (configs, 0)


ACROSS_DEVICES = {
    "0-d CPU input": (lambda x, s: x * s + 1, lambda x: (x, torch.tensor(2.5))),
    "0-d CPU constant": (lambda x: x * torch.tensor(3.0) + 1, lambda x: (x,)),
    "x[mask] = constant": (lambda x: x.clone().index_put_((x > 0,), torch.tensor(0.5)), lambda x: (x,)),
    "CPU input moved in": (lambda x, y: (x + y.to(x.device)).sin(), lambda x: (x, torch.randn(x.shape[-1]))),
    "CPU indices": (lambda x, i: x[i] * 2, lambda x: (x, torch.randperm(x.shape[0]))),
    "result moved out": (lambda x: (x * 2).cpu() + 1, lambda x: (x,)),
    "a CPU op beside": (lambda x, y: ((x * 2).sum(0), y * 3 + 1), lambda x: (x, torch.randn(7))),
}


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: tensors on two devices need one")
@pytest.mark.parametrize("case", ACROSS_DEVICES)
def test_kernels_read_only_the_graphs_device(case):
    """A tensor of another device that a kernel would read (a 0-d CPU tensor,
    which eager lets into any op, CPU indices, a CPU input moved in) is copied
    over first, and an op on the CPU runs in ATen: our kernels read a CPU
    pointer before (an illegal memory access). With CUDA graphs on, such a
    graph is not captured (host copies cannot be) and keeps its results. A
    one-element CPU constant (torch.tensor(3.0) in the code, or the value of
    x[mask] = 0.5) is a constant of the kernel: no copy, no ATen."""
    fn, make = ACROSS_DEVICES[case]
    args = make(rand(37, 5, device="cuda"))
    cap = check(fn, *args)
    if "constant" in case:
        assert not cap.externs and not cap.fallbacks, (cap.externs, cap.fallbacks)
    torch._dynamo.reset()
    with config.patch(cuda_graphs=True):
        compiled = torch.compile(fn, backend="fusion")
        for _ in range(3):
            torch.testing.assert_close(compiled(*args), fn(*args))


FACTORIES = {  # a graph with no tensor input; a GPU graph returning a tensor it makes on the CPU
    "ones": (lambda: torch.ones(5, 3, device="cuda") * 2, ()),
    "arange": (lambda: torch.arange(37, device="cuda", dtype=torch.float32).sin(), ()),
    "full of a number": (lambda n: torch.full((4, 9), n, device="cuda").cumsum(1), (2.5,)),
    "a CPU tensor beside": (lambda x: (x * 2, torch.zeros(3), torch.arange(4) + 1), ("x",)),
}


@pytest.mark.skipif(not HAS_CUDA, reason="no CUDA device: tensors made on a GPU need one")
@pytest.mark.parametrize("case", FACTORIES)
def test_a_graph_makes_its_tensors_on_the_device_they_name(case):
    """Tensors a graph makes from nothing come back on the device the code names:
    a graph with no tensor input took the CPU for its device, and torch.ones(3,
    device="cuda") came back on the CPU; a CPU tensor made and returned in a GPU
    graph is made on the CPU, in ATen. A graph of GPU factories alone is ours,
    in kernels."""
    fn, args = FACTORIES[case]
    args = tuple(rand(37, 5, device="cuda") if a == "x" else a for a in args)
    cap = check(fn, *args)
    assert cap.kernels, "no kernel of ours"
    if not any(isinstance(a, torch.Tensor) for a in args):
        assert not cap.fallbacks and not cap.externs, (cap.fallbacks, cap.externs)
