"""Views (index arithmetic, no kernels of their own), cat/stack/pad, indirect
reads (gather, index_select, embedding, advanced indexing), in-place mutation of
inputs, outputs that alias inputs, multiple outputs, 0-d tensors and constants:
compiled with the fusion backend and compared with eager on random data."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import compiler

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


@pytest.fixture
def check_compiled(check_on_every_target):
    """Each case on every target: C++, Triton interpreted, Triton on a GPU."""
    return check_on_every_target


def rand(shape, dtype=torch.float32):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(-50, 50, shape, dtype=dtype)
    return torch.randn(shape).to(dtype)


def transposed(shape, dtype=torch.float32):
    """A non-contiguous tensor of `shape` (its storage is laid out reversed)."""
    return rand(shape[::-1], dtype).permute(*reversed(range(len(shape))))


def no_fallbacks(cap):
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]


DTYPES = [torch.float32, torch.float16, torch.int64, torch.bool]
IDS = ["float32", "float16", "int64", "bool"]


def _views(x):
    # x: [3, 5, 7]; every result is a view of x
    return {
        "view": x.reshape(15, 7),
        "reshape(-1)": x.reshape(-1),
        "permute": x.permute(2, 0, 1),
        "transpose": x.transpose(0, 2),
        "expand": x[:, :1].expand(3, 4, 7),
        "slice(step, negative start)": x[1:, ::2, -3:],
        "select(negative)": x[:, -2],
        "squeeze": x[:, :1].squeeze(1),
        "unsqueeze": x.unsqueeze(0).unsqueeze(-1),
        "flatten": x.flatten(1),
        "as_strided": x.as_strided((4, 3), (2, 5), 1),
        "narrow": x.narrow(2, 1, 3),
        "movedim": x.movedim(0, -1),
        "t of select": x[0].t(),
        "diagonal": torch.diagonal(x, 0, 1, 2),
        "unflatten": x.unflatten(2, (1, 7)),
        "split": x.split(2, 1)[2],
        "chunk": x.chunk(3, 2)[1],
        "unbind": x.unbind(1)[3],
        "unfold": x.unfold(2, 3, 2),
    }


def offset(shape, dtype=torch.float32):
    """A slice of a larger tensor: a non-zero storage offset (as_strided counts from the storage)."""
    return rand((shape[0] + 1, *shape), dtype)[1]


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "offset"])
@pytest.mark.parametrize("dtype", DTYPES, ids=IDS)
def test_views(check_compiled, dtype, layout):
    torch.manual_seed(0)
    x = {"contiguous": rand, "transposed": transposed, "offset": offset}[layout]((3, 5, 7), dtype)
    names = list(_views(x))
    # a pointwise op on each view: the view must be read through the right index
    cap = check_compiled(lambda x: tuple(v * 2 for v in _views(x).values()), x, names=names)
    no_fallbacks(cap)


def test_views_of_computed_values(check_compiled):
    """Views of a value not in memory compose into its index; as_strided counts
    from the start of the buffer the viewed value is realized into."""
    x = offset((6, 7))
    cap = check_compiled(
        lambda x: (
            (x + 1).t()[1:, ::2].reshape(-1) * 2,
            (x * 2)[1:].as_strided((3, 3), (1, 2), 4),
            (x.sin()).t()[1:].as_strided((3, 3), (1, 2)),
            (x - 1).unfold(0, 2, 2).sum(-1),
            torch.diagonal(x.exp(), 1),
        ),
        x,
    )
    no_fallbacks(cap)


def test_as_strided_of_a_computed_value_eager_lays_out_otherwise(check_compiled):
    """A computed value keeps its inputs' layout in eager (a transposed or a
    channels_last input), and as_strided (diagonal's decomposition) reads that
    storage: it is stored so first. It was read as if contiguous: wrong values,
    forward and backward."""
    a, cl = rand((13, 7)).t(), rand((2, 3, 5, 7)).to(memory_format=torch.channels_last)
    cap = check_compiled(lambda a, cl: ((a * 2).as_strided((5,), (1,), 3) + 1, (a * 2).diagonal(1), torch.diag(a * 3, 1),
                                        (cl + 1).diagonal(0, 2, 3) * 2, (cl + 1).as_strided((2, 105), (105, 1)) * 2), a, cl)
    no_fallbacks(cap)
    w, v = a.detach().requires_grad_(), a.detach().requires_grad_()
    torch.compile(lambda w: ((w * 2).diagonal(1) ** 2).sum(), backend="fusion")(w).backward()
    ((v * 2).diagonal(1) ** 2).sum().backward()
    torch.testing.assert_close(w.grad, v.grad)


def test_view_outputs_alias_inputs_and_need_no_kernel(check_compiled):
    x = rand((4, 6))
    cap = check_compiled(lambda x: (x.t(), x.view(2, 12), x[1:, ::2], x.unsqueeze(0), x), x)
    assert not cap.kernels and not cap.fallbacks


def test_outputs_alias_inputs_like_eager(fresh_dynamo):
    """A view of an input returned by the compiled function shares the input's storage."""
    x = rand((4, 6))
    a, b, c = torch.compile(lambda x: (x.t(), x[1:], x + 1), backend="fusion", dynamic=False)(x)
    assert a.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert b.untyped_storage().data_ptr() == x.untyped_storage().data_ptr()
    assert c.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()
    x.add_(1)  # a later change to x shows through the views, as in eager
    torch.testing.assert_close(a, x.t())
    torch.testing.assert_close(b, x[1:])


def _matmul_and_views(x, w):
    y = (x * 2).sigmoid()
    return y.view(12, 7) @ w, y.view(12, 7), y.transpose(1, 2)


def test_returned_views_of_a_stored_value_are_that_buffer(check_compiled):
    """A training forward returns a matmul's input reshaped, for the backward
    (LLaMA's MLP: silu(a) * b, viewed [tokens, hidden]). The value is stored for
    the matmul anyway: the outputs are views of that buffer, as in eager, not a
    copy written beside it (on an H200 that kernel wrote 92 MB twice: 86 -> 62 us)."""
    x, w = rand((3, 4, 7)), rand((7, 5))
    cap = check_compiled(_matmul_and_views, x, w)
    assert [k.bytes_written for k in cap.kernels] == [x.numel() * 4]
    _, a, b = torch.compile(_matmul_and_views, backend="fusion", dynamic=False)(x, w)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


CAT_DTYPES = [torch.float32, torch.bfloat16, torch.int32, torch.bool]


@pytest.mark.parametrize("dtype", CAT_DTYPES, ids=["float32", "bfloat16", "int32", "bool"])
def test_cat_stack_pad(check_compiled, dtype):
    torch.manual_seed(1)
    x, y = rand((3, 5, 7), dtype), transposed((3, 2, 7), dtype)
    fill = True if dtype == torch.bool else 2
    table = {
        "cat(dim=1, three pieces, one non-contiguous)": lambda x, y: torch.cat([x, y, x[:, :1]], 1),
        "cat(dim=0, computed piece)": lambda x, y: torch.cat([x[:1], x.clone() if dtype == torch.bool else x * 2], 0),
        "cat(dim=-1)": lambda x, y: torch.cat([x, x[..., :3]], -1),
        "cat with an empty piece": lambda x, y: torch.cat([x, x[:, :0]], 1),
        "cat of empty pieces only": lambda x, y: torch.cat([x[0, 0, :0], y[0, 0, :0]]),
        "stack(dim=1)": lambda x, y: torch.stack([x, x.flip(2)], 1),
        "stack(dim=-1)": lambda x, y: torch.stack([x[:, 0], y[:, 1]], -1),
        "constant_pad_nd": lambda x, y: F.pad(x, (1, 2, 0, 3), value=fill),
        "pad negative (crop)": lambda x, y: F.pad(x, (-1, 2, 1, -2)),
        "pad of a non-contiguous input": lambda x, y: F.pad(y, (2, 1)),
        "flip": lambda x, y: torch.flip(x, (0, 2)),
        "roll": lambda x, y: torch.roll(x, 2, 1),
        "repeat": lambda x, y: y.repeat(2, 1, 3),
        "tril": lambda x, y: torch.tril(x[0]),
    }
    fns = list(table.values())
    cap = check_compiled(lambda x, y: tuple(f(x, y) for f in fns), x, y, names=list(table))
    no_fallbacks(cap)


def test_clamped_indices_fold_only_what_is_cheap_to_know():
    """The clamps of cat, pad and slice_scatter (compiler.index.clamp) fold numbers,
    substituted ones too, and a floor of 0 under a nonnegative index; any other
    clamp is built as is (sympy's Min and Max compare their arguments symbolically
    whenever one is built), and unclamp turns it into the mask of the load."""
    from compiler.index import IndexMax, IndexMin, clamp, symbol, unclamp

    x = symbol("x0")
    c = clamp(x - 1, 0, 9)
    assert isinstance(c, IndexMin) and any(isinstance(a, IndexMax) for a in c.args)
    assert [c.xreplace({x: v}) for v in (0, 5, 20)] == [0, 4, 9]
    assert clamp(x, 0, 9) == IndexMin(x, 9) and clamp(x + 3, -2, None) == x + 3
    assert clamp(7, 0, 5) == 5 and clamp(-3, 0, None) == 0
    assert unclamp(c, {x: 30}) == (x - 1, [(x, ">=", 1), (x, "<", 11)])


def test_divisions_and_remainders_keep_what_they_divide_nonnegative():
    """FloorDiv and ModularIndexing are printed as C's and Triton's `/` and `%`, which
    truncate toward zero: a constant in what they divide moves into [0, divisor)
    (floor division moves its quotient outside), so a split never leaves a negative
    numerator where the whole index is not negative (a cumsum over a rolled flat
    view's gradient read (x2 - 1323) // 37 and ((x0 % 37) - 1323) % 37)."""
    from compiler.index import FloorDiv, ModularIndexing, symbol

    x, y = symbol("x1"), symbol("x2")
    assert FloorDiv(37 * x + y - 1323, 37) == x - 36 + FloorDiv(y + 9, 37)
    assert FloorDiv(y - 5, 4) == FloorDiv(y + 3, 4) - 2 and FloorDiv(y + 9, 4) == FloorDiv(y + 1, 4) + 2
    assert ModularIndexing(y - 1323, 1, 37) == ModularIndexing(y + 9, 1, 37)
    assert ModularIndexing(y + 80, 2, 4) == ModularIndexing(y, 2, 4)
    for v in range(1323, 1500):  # the values are the floor's and the modulo's
        assert FloorDiv(37 * x + y - 1323, 37).xreplace({x: v // 37, y: v % 37}) == (v - 1323) // 37
        assert ModularIndexing(y - 1323, 1, 37).xreplace({y: v}) == (v - 1323) % 37


def test_an_unrolled_loop_of_a_hundred_steps(check_compiled):
    """A loop unrolled 100 times whose every step is stacked (an RNN's outputs):
    its chain of values is stored every so often and its stack built in groups,
    so no expression grows past what the compiler can walk (both once raised
    RecursionError); and the groups are few kernels, not one a step."""
    torch.manual_seed(2)

    def f(x):
        outs = []
        for i in range(100):
            x = x * 0.999 + 0.001 * i
            outs.append(x.sin())
        return torch.stack(outs, 1), x

    cap = check_compiled(f, rand((7, 13)))
    no_fallbacks(cap)
    assert len(cap.kernels) <= 12, [k.name for k in cap.kernels]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.int64], ids=["float32", "bfloat16", "int64"])
def test_slice_scatter_is_one_pointwise_kernel(check_compiled, dtype):
    """x.slice_scatter(src, dim, start, end, step), as slice_backward (a cat's or a
    slice's gradient) and an in-place slice assignment make it: each element picks
    src or x by its position, src read directly, so a computed src fuses with it
    and its consumers into one kernel (torch._decomp's version read src through a
    computed arange, and stored it first)."""
    torch.manual_seed(3)
    x, y, z = rand((5, 13, 7), dtype), rand((5, 4, 7), dtype), rand((5, 13, 7), dtype)

    def assign(x, y, z):
        x = x * 2
        x[:, 3:7] = y * 3
        return x

    table = {
        "slice_scatter": lambda x, y, z: x.slice_scatter(y, 1, 2, 6),
        "step 3": lambda x, y, z: x.slice_scatter(y, 1, 1, 13, 3),
        "negative start and end": lambda x, y, z: x.slice_scatter(y, 1, -11, -1, 3),
        "end past the size": lambda x, y, z: x.slice_scatter(y, 1, 9, 100),
        "dim -1, a strided src": lambda x, y, z: x.slice_scatter(z[..., :2], -1, 5, 7),
        "empty src": lambda x, y, z: x.slice_scatter(y[:, :0], 1, 4, 4) - z,
        "empty src, returned": lambda x, y, z: x.slice_scatter(y[:, :0], 1, 4, 4),
        "slice_backward of a computed gradient": lambda x, y, z: torch.ops.aten.slice_backward(y * 2, [5, 13, 7], 1, 4, 12, 2) + z,
        "in-place slice assignment": assign,
    }
    fns = list(table.values())
    cap = check_compiled(lambda x, y, z: tuple(f(x, y, z) for f in fns), x, y, z, names=list(table))
    no_fallbacks(cap)
    grad = check_compiled(lambda y, z: torch.ops.aten.slice_backward(y * 2, [5, 13, 7], 1, 4, 12, 2) + z, y, z)
    assert len(grad.kernels) == 1, [k.name for k in grad.kernels]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int64], ids=["float32", "float16", "int64"])
def test_indirect_reads(check_compiled, dtype):
    torch.manual_seed(2)
    x = rand((6, 5, 7), dtype)
    i = torch.randint(-6, 6, (4,))  # negative indices count from the end
    j = torch.randint(0, 7, (4,), dtype=torch.int32)
    g = torch.randint(0, 5, (6, 3, 7))
    w = rand((10, 9), dtype)
    tok = torch.randint(0, 10, (3, 4))
    table = {
        "gather(dim=1)": lambda x, i, j, g, w, tok: torch.gather(x, 1, g),
        "gather(dim=-1)": lambda x, i, j, g, w, tok: torch.gather(x, -1, g.transpose(1, 2)[:, :5, :3]),
        "take_along_dim": lambda x, i, j, g, w, tok: torch.take_along_dim(x, g[:, :1], 1),
        "index_select": lambda x, i, j, g, w, tok: torch.index_select(x, 1, g[0, 0, :4]),
        "embedding": lambda x, i, j, g, w, tok: F.embedding(tok, w),
        "x[i] (negative)": lambda x, i, j, g, w, tok: x[i],
        "x[:, :, j] (int32 indices)": lambda x, i, j, g, w, tok: x[:, :, j],
        "x[i, :, j] (split index dims)": lambda x, i, j, g, w, tok: x[i, :, j],
        "x[i, i % 5] (adjacent index dims)": lambda x, i, j, g, w, tok: x[i, i % 5],
        "x[2D index]": lambda x, i, j, g, w, tok: x[g[:2, :2, 0]],
        "x[i[:1], 2, 3] (one element at an index read)": lambda x, i, j, g, w, tok: x[i[:1], 2, 3],
        "x[i[:1], 2].sum(-1) (a row at an index read)": lambda x, i, j, g, w, tok: x[i[:1], 2].sum(-1),
        "scatter_add(dim=1)": lambda x, i, j, g, w, tok: torch.scatter_add(x, 1, g, x[:, 2:]),
        "scatter(dim=-1, value)": lambda x, i, j, g, w, tok: x.scatter(-1, g.transpose(1, 2)[:, :5, :2], 3),
        "scatter_add(short index)": lambda x, i, j, g, w, tok: torch.scatter_add(x, 1, g[:4, :, 2:5], x[:, :3]),
        "scatter(one index a row, value)": lambda x, i, j, g, w, tok: x.scatter(1, g[:, :1], 3),
        "scatter_add(one index a row)": lambda x, i, j, g, w, tok: torch.scatter_add(x, 1, g[:, 1:2], x[:, 2:3]),
        "masked_fill": lambda x, i, j, g, w, tok: x.masked_fill(x > 0, 1),
        "where(mask)": lambda x, i, j, g, w, tok: torch.where(x > 0, x, torch.zeros((), dtype=dtype)),
    }
    fns = list(table.values())
    cap = check_compiled(lambda *a: tuple(f(*a) for f in fns), x, i, j, g, w, tok, names=list(table))
    no_fallbacks(cap)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.int32, torch.int64],
                         ids=["float32", "float16", "int32", "int64"])
def test_index_put_scatters(check_compiled, dtype):
    """index_put, with accumulate or not, index_add, scatter with a src and
    scatter_add with more indices along its dim than a reduction over them would
    take are scatter kernels of ours (x copied, or filled where it is one number,
    then each value added to or written at the element its indices pick):
    duplicates add up, negative indices count from the end, index dims split by
    a slice or broadcast against values, aranges index as positions."""
    torch.manual_seed(4)
    x, v = rand((6, 5, 7), dtype), rand((80, 5, 7), dtype)
    i = torch.randint(-6, 6, (40,))  # duplicates, negative
    j = torch.randint(0, 7, (40,), dtype=torch.int32)
    k = torch.randint(0, 5, (9,))
    u = torch.randperm(6)[:4]  # unique: a plain write leaves no choice of value
    long = torch.randint(0, 6, (80, 5, 7))  # 80 indices along dim 0
    perm = torch.rand(6, 5, 7).argsort(1)  # unique along dim 1
    put = torch.ops.aten.index_put
    table = {
        "x[i] += v (duplicates)": lambda x, v, i, j, k, u, long, perm: put(x, [i], v[:40], True),
        "x[i, :, j] += v (split index dims)": lambda x, v, i, j, k, u, long, perm: put(x, [i, None, j], v[:40, :, 0], True),
        "x[:, k] += v[0, 0] (broadcast values)": lambda x, v, i, j, k, u, long, perm: put(x, [None, k], v[0, 0], True),
        "x[u] = v (a write)": lambda x, v, i, j, k, u, long, perm: put(x, [u], v[:4], False),
        "(x * 2)[i] += v (into a computed value)": lambda x, v, i, j, k, u, long, perm: put(x * 2, [i], v[:40], True),
        "zeros[i] += v (a fill)": lambda x, v, i, j, k, u, long, perm: put(torch.zeros_like(x), [i], v[:40], True),
        # index tensors computed from aranges are positions of the loop, read directly (overlapping windows)
        "x[:, a + b, c] += v (aranges)": lambda x, v, i, j, k, u, long, perm: put(
            x, [None, (torch.arange(4, device=x.device)[:, None] + torch.arange(2, device=x.device)).view(4, 2, 1),
                torch.arange(7, device=x.device)], v[:6, :4, None, :].expand(6, 4, 2, 7), True),
        "index_add": lambda x, v, i, j, k, u, long, perm: torch.index_add(x, 1, k, v.reshape(-1, 7)[:54].reshape(6, 9, 7)),
        "scatter_add(dim=0, 80 indices)": lambda x, v, i, j, k, u, long, perm: torch.scatter_add(x, 0, long, v),
        "scatter(dim=1, src)": lambda x, v, i, j, k, u, long, perm: torch.scatter(x, 1, perm, v[:6]),
    }
    fns = list(table.values())
    tol = dict(rtol=1e-2, atol=1e-2) if dtype == torch.float16 else None  # adds in another order
    cap = check_compiled(lambda *a: tuple(f(*a) for f in fns), x, v, i, j, k, u, long, perm, names=list(table), tol=tol)
    no_fallbacks(cap)
    scatters = [kn for kn in cap.kernels if kn.kind == "scatter"]
    assert len(scatters) == len(table) and all("_scatter_" in kn.name for kn in scatters), [kn.name for kn in cap.kernels]


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bfloat16], ids=["float32", "int64", "bfloat16"])
def test_scatter_reduce_sum_max_min_mean_prod_are_scatters(check_on_every_target, target, dtype):
    """scatter_reduce's sum, amax, amin and mean are scatters of ours: each value
    combined with the element its index picks (tl.atomic_add / atomic_max /
    atomic_min on Triton, in order on one thread in C++), into x's copy; without
    include_self (PyG's aggregation), from the operation's identity, with a
    second scatter marking the elements an index picks (the others keep x).
    Triton's float max and min combine int32 keys that order as the floats do,
    NaN winning as in eager; without include_self their keys start where no value
    lands, which marks the elements no index picks. "mean" sums and counts the
    values an element takes. The interpreter has no atomic add of 16-bit values:
    those stay ATen's. "prod" is ours in C++ (multiplied in order, as eager's),
    ATen's in Triton, which has no atomic multiply."""
    torch.manual_seed(6)
    x, src = rand((37, 5), dtype), rand((300, 5), dtype)
    if dtype.is_floating_point:
        x[3, 1] = src[7, 2] = float("nan")
        src[8, 0], src[9, 4] = float("inf"), -float("inf")
        src[10:20] = 0.0  # -0.0 and 0.0 alike
        src[20:30] = -0.0
    index = torch.randint(0, 37, (300, 5))  # duplicates; some rows of x picked by none
    cases = [(r, s) for r in ("sum", "amax", "amin", "mean", "prod") for s in (True, False)]
    table = {f"{r}, include_self={s}": (lambda x, i, v, r=r, s=s: (x * 2).scatter_reduce(0, i, v + 1, r, include_self=s))
             for r, s in cases}
    fns = list(table.values())
    tol = dict(rtol=2e-2, atol=5e-2) if dtype == torch.bfloat16 else None  # adds in another order
    cap = check_on_every_target(lambda *a: tuple(f(*a) for f in fns), x, index, src, names=list(table), tol=tol)
    no_bf16_adds = target == "triton" or target == "cuda" and torch.cuda.get_device_capability() < (9, 0)
    ours = [(r, s) for r, s in cases if not (dtype == torch.bfloat16 and r in ("sum", "mean") and no_bf16_adds)
            and not (r == "prod" and target != "cpp")]
    keys = target != "cpp" and dtype.is_floating_point  # one scatter of keys, picked or not

    def scatters_of(r, s):  # a mean sums and counts; the rest mark the picked elements without include_self
        return 2 if r == "mean" or not s and not (keys and r != "sum") else 1

    scatters = [k for k in cap.kernels if k.kind == "scatter"]
    assert len(scatters) == sum(scatters_of(r, s) for r, s in ours), [k.name for k in cap.kernels]
    assert all(f.op == "aten.scatter_reduce.two" and f.reason for f in cap.fallbacks), cap.fallbacks
    assert len(cap.fallbacks) == len(cases) - len(ours), [(f.op, f.reason) for f in cap.fallbacks]
    if target != "cpp" and dtype.is_floating_point:  # the extremes combine int32 keys
        assert sum("tl.atomic_max" in k.source or "tl.atomic_min" in k.source for k in scatters) == 4
        assert all("tl.int32" in k.source for k in scatters if "tl.atomic_max" in k.source or "tl.atomic_min" in k.source)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_indirect_reads_of_computed_values(check_compiled, dtype):
    """A gather or index of a computed value recomputes it at the elements read
    when they are fewer than its own; otherwise (more elements read, or a value
    of the index itself, as an arange) it reads it from memory."""
    torch.manual_seed(3)
    x = rand((6, 5, 7), dtype)
    g = torch.randint(0, 5, (6, 3, 7))
    i = torch.randint(-6, 6, (4,))
    j = torch.randint(0, 7, (4,))
    w = rand((10, 9), dtype)
    tok = torch.randint(0, 10, (3, 4))
    table = {
        "gather(x.sin() * 2)": lambda x, g, i, j, w, tok: torch.gather(x.sin() * 2, 1, g),
        "(x + 1)[i, :, j]": lambda x, g, i, j, w, tok: (x + 1)[i, :, j],
        "gather of a gather": lambda x, g, i, j, w, tok: torch.gather(torch.gather(x, 1, g).exp(), 2, g[:, :, :2] % 7),
        "gather(x + arange)": lambda x, g, i, j, w, tok: torch.gather(x + torch.arange(7, device=x.device, dtype=x.dtype), 1, g),
        "embedding(w * 3), more rows than w": lambda x, g, i, j, w, tok: F.embedding(tok.repeat(3, 1), w * 3),
    }
    fns = list(table.values())
    cap = check_compiled(lambda *a: tuple(f(*a) for f in fns), x, g, i, j, w, tok, names=list(table))
    no_fallbacks(cap)


@pytest.mark.parametrize("classes", [1001, 5003])  # on a GPU: rows in one block, and looped
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_cross_entropy_stores_no_log_probabilities(check_compiled, dtype, classes):
    """cross_entropy picks one log-probability a row: the forward stores each
    row's max and sum, not the [rows, classes] log_softmax (4096 x 32000 bf16:
    262 MB written and read back, for a loss of one number)."""
    torch.manual_seed(4)
    logits = rand((37, classes), dtype)
    target = torch.randint(0, classes, (37,))
    target[5] = -100  # ignored
    cap = check_compiled(F.cross_entropy, logits, target,
                         tol=None if dtype == torch.float32 else dict(rtol=2e-2, atol=1e-2))
    no_fallbacks(cap)
    written = sum(k.bytes_written for k in cap.kernels)
    assert written < 16 * 37, [(k.name, k.bytes_written) for k in cap.kernels]


MUTATIONS = {
    "add_": (lambda x: x.add_(1), [(4, 5)]),
    "mul_ then read": (lambda x: (x.mul_(2), x * 3)[1], [(4, 5)]),
    "two in-place ops": (lambda x: (x.add_(1), x.mul_(3), x.sin())[2], [(4, 5)]),
    "in-place on a transposed input": (lambda x: x.t().mul_(2).sum(), [(4, 5)]),
    "copy_ into a slice": (lambda x, y: x[1:3].copy_(y), [(4, 5), (2, 5)]),
    "setitem broadcast": (lambda x, y: x.__setitem__((slice(None), 1), y[0]), [(4, 5), (2, 4)]),
    "copy_ with broadcast": (lambda x, y: x.copy_(y[0]), [(4, 5), (2, 5)]),
    "two inputs mutated": (lambda x, y: (x.add_(y[0]), y.sub_(1))[0], [(4, 5), (2, 5)]),
    "relu_ and zero_": (lambda x, y: (x.relu_(), y.zero_())[0], [(4, 5), (2, 5)]),
    "read before the mutation": (lambda x: (x.sum(), x.add_(1))[0], [(4, 5)]),
    "returned as a view": (lambda x: x.add_(1).view(-1), [(4, 5)]),
}


# every case in float32; a few in other dtypes
MUTATION_CASES = [(c, torch.float32) for c in MUTATIONS] + [
    (c, d) for c in ("add_", "copy_ into a slice", "in-place on a transposed input") for d in (torch.float16, torch.int64)
]


@pytest.mark.parametrize("case, dtype", MUTATION_CASES, ids=[f"{c}-{str(d)[6:]}" for c, d in MUTATION_CASES])
def test_mutation_of_inputs(check_compiled, case, dtype):
    """In-place ops on graph inputs are functionalized and written back; the
    helper compares the inputs after the call with eager's too."""
    torch.manual_seed(3)
    fn, shapes = MUTATIONS[case]
    args = [rand(s, dtype) for s in shapes]
    if case == "in-place on a transposed input":
        args = [transposed(shapes[0], dtype).t()]
    cap = check_compiled(fn, *args)
    no_fallbacks(cap)
    assert cap.kernels, "the write-back must be a generated kernel"


def test_in_place_add_writes_the_input_in_one_kernel(check_compiled):
    cap = check_compiled(lambda x: x.add_(1), rand((33, 65)))
    assert len(cap.kernels) == 1 and not cap.fallbacks


def test_multiple_outputs_of_different_shapes(check_compiled):
    x = rand((3, 5, 7))
    cap = check_compiled(lambda x: (x.sum(0), x.amax(1), x.sin(), x.argmax(2), x, x.sin()), x)
    no_fallbacks(cap)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool], ids=["float32", "int64", "bool"])
def test_zero_dim_tensors(check_compiled, dtype):
    torch.manual_seed(4)
    s, v = rand((), dtype), rand((7,), dtype)
    if dtype == torch.bool:
        fn = lambda s, v: (s & v, s | True, ~s, v.any(), s.all(), torch.where(s, v, ~v))  # noqa: E731
    elif dtype == torch.int64:
        fn = lambda s, v: (s * 2 + v, s // 3, s % -4, v.sum(), (s + 1).abs(), v.max())  # noqa: E731
    else:
        fn = lambda s, v: (s * 2 + v, (s + 1).sin(), v.sum(), s.exp(), v.amax() * s, s.reshape(1, 1))  # noqa: E731
    cap = check_compiled(fn, s, v)
    no_fallbacks(cap)


def test_python_scalar_inputs(check_compiled):
    cap = check_compiled(lambda x, s, n: x * s + n, rand((9,)), 2.5, 3)
    no_fallbacks(cap)


def test_tensor_constants_and_factories(check_compiled):
    """torch.tensor(...) in the code is a graph constant; arange/full/zeros are pointwise."""
    x = rand((3, 7))
    cap = check_compiled(
        lambda x: (
            x * torch.tensor([1.0, -2.0, 3.0, 0.5, 1.5, 2.0, -1.0], device=x.device),
            torch.gather(x, 1, torch.tensor([[0, 6, 3]], device=x.device).expand(3, 3)),
            x + torch.arange(7, device=x.device) * 0.5 + torch.arange(1, 15, 2, device=x.device),
            x + torch.full((7,), 2.0, device=x.device) + torch.linspace(0, 1, 7, device=x.device),
            torch.zeros_like(x) + torch.ones(7, device=x.device),
        ),
        x,
    )
    no_fallbacks(cap)


def test_same_size_bit_views_are_bitcasts(check_compiled):
    """x.view(dtype) of a dtype of the same size reads each element's bits as it
    (float32 as int32, bfloat16 as int16, float16 as bfloat16), in the kernel: a
    sign bit cleared, bfloat16's next value, floats built from their bits.
    A view to another size is left to ATen, saying so."""
    torch.manual_seed(4)
    f, b, h = rand((6, 37)), rand((6, 37), torch.bfloat16), rand((6, 37), torch.float16)
    bits = torch.randint(0x3F000000, 0x40000000, (6, 37), dtype=torch.int32)  # floats in [0.5, 2)
    table = {
        "abs by bits": lambda f, b, h, i: ((f * 2).view(torch.int32) & 0x7FFFFFFF).view(torch.float32),
        "next bfloat16": lambda f, b, h, i: (b.view(torch.int16) + 1).view(torch.bfloat16).float(),
        "float16 as bfloat16": lambda f, b, h, i: h.view(torch.bfloat16).float() * 0 + h.view(torch.int16),
        "floats from bits": lambda f, b, h, i: (i + 3).view(torch.float32) * 2,
    }
    fns = list(table.values())
    no_fallbacks(check_compiled(lambda *a: tuple(fn(*a) for fn in fns), f, b, h, bits, names=list(table)))
    cap = check_compiled(lambda f: f.view(torch.uint8).float().mean(), f)
    assert [f.op for f in cap.fallbacks] == ["aten.view.dtype"] and "another size" in cap.fallbacks[0].reason


def test_a_boolean_mask_put_of_one_value_is_a_select(check_compiled):
    """x[mask] = v (x[:, mask] too, and index_put_ accumulating) for one value is a
    select in one kernel, x's shape kept: how many elements the mask picks is
    data, and never needed. A vector of values (as many as picked) is ATen's."""
    torch.manual_seed(6)
    x = rand((6, 37))
    x[1, 2] = float("nan")

    def put(t):
        t = t.clone()
        t[t > 1] = 0.0
        t[:, t[0] < 0] = -5.0
        t[t.isnan()] = 7.0
        t.index_put_((t[:, 0] < -1,), torch.tensor(3, dtype=t.dtype, device=t.device), accumulate=True)
        return t

    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        cap = check_compiled(put, (x * 3).to(dtype))
        no_fallbacks(cap)
        assert len(cap.kernels) == 1, [k.name for k in cap.kernels]

    def vector(t, v):
        t[t > 0] = v
        return t

    cap = check_compiled(vector, x, torch.randn(int((x > 0).sum())))
    assert [f.op for f in cap.fallbacks] == ["aten.index_put.default"], cap.fallbacks


def test_a_long_binary_search_compiles(check_compiled):
    """bucketize over 1025 boundaries is 11 unrolled steps, each reading the last
    twice: its expression is a DAG whose written-out text doubled with each step
    (over 17 boundaries the IR line was 31.8 MB, over 33 the compile took 3
    minutes). Shared parts are written out once each and every text is cut: lines
    stay short."""
    from compiler.ir import TEXT_LIMIT

    torch.manual_seed(7)
    for n in (17, 1025):
        boundaries = torch.sort(torch.randn(n))[0]
        cap = check_compiled(lambda x, b: torch.bucketize(x, b), rand((64,)), boundaries)
        no_fallbacks(cap)
        assert max(len(line) for line in cap.graphs[0].ir.splitlines()) < TEXT_LIMIT + 200


def test_searchsorted_rows_are_a_binary_search(check_compiled):
    """searchsorted over rows (an inverse-CDF sample: each row its own CDF) is a
    binary search in one kernel, every value stepping at once, left or right, as
    int64 or int32; a 1-D sequence is bucketize's. Values equal to an element,
    below the first and past the last; NaN goes past the last, as in ATen (it went
    first). A sorter is left to ATen."""
    torch.manual_seed(8)
    cdf = torch.rand(7, 33).cumsum(-1)
    cdf = cdf / cdf[:, -1:]
    u = torch.rand(7, 5)
    u[0, 0], u[1] = cdf[0, 3], torch.tensor([0.0, 1.0, 2.0, -1.0, float(cdf[1, 10])])
    u[2, :2] = torch.tensor([float("nan"), float("inf")])
    table = {
        "left": lambda c, v, s: torch.searchsorted(c, v), "right": lambda c, v, s: torch.searchsorted(c, v, right=True),
        "side right, int32": lambda c, v, s: torch.searchsorted(c, v, side="right", out_int32=True),
        "1-D": lambda c, v, s: torch.searchsorted(s, v), "bfloat16": lambda c, v, s: torch.searchsorted(c.bfloat16(), v.bfloat16()),
    }
    fns = list(table.values())
    sorted_1d = torch.sort(torch.randn(50))[0]
    cap = check_compiled(lambda *a: tuple(f(*a) for f in fns), cdf, u, sorted_1d, names=list(table))
    no_fallbacks(cap)
    assert len(cap.kernels) == 1, [k.name for k in cap.kernels]
    cap = check_compiled(lambda c, v, i: torch.searchsorted(c, v, sorter=i), cdf.flip(-1), u, torch.arange(32, -1, -1).repeat(7, 1))
    assert [f.op for f in cap.fallbacks] == ["aten.searchsorted.Tensor"]


@pytest.mark.parametrize("before", range(6))
def test_a_constant_after_any_number_of_buffers(check_compiled, before):
    """A graph's constant is named by its place among the buffers (const4 after
    four): the wrapper's own names for the values it holds never take that name
    (const4 read `const4 = const4`, an unbound local: F.ctc_loss with its lengths
    written as tensors raised)."""
    def fn(x):
        out = x * 2
        for i in range(before):
            out = out + x[i % 4].sum() * (i + 1)
        return out + torch.tensor([3.0, 4.0, 5.0], device=x.device)

    no_fallbacks(check_compiled(fn, rand((4, 3))))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["float32", "bfloat16"])
def test_bucketize_is_a_kernel(check_on_every_target, dtype):
    """bucketize is a binary search over the boundaries (torch._decomp's), one
    kernel of ours, with no ATen fallback."""
    torch.manual_seed(8)
    x = rand((2, 3, 9, 11), dtype)
    boundaries = torch.linspace(-2, 2, 9).to(dtype)
    table = {
        "bucketize": lambda x, b: torch.bucketize(x, b),
        "bucketize right": lambda x, b: torch.bucketize(x * 2, b, right=True),
    }
    fns = list(table.values())
    cap = check_on_every_target(lambda *a: tuple(f(*a) for f in fns), x, boundaries, names=list(table))
    assert not cap.fallbacks, [f"{f.op}: {f.reason}" for f in cap.fallbacks]


def test_a_zero_dim_index_or_value_is_read_in_a_kernel(check_on_every_target):
    """take with a 0-d index and bucketize of a 0-d value: their decompositions
    index by it, which read its value (item) and failed the compile (Dynamo then
    ran the call eagerly); ours index by a tensor of one element."""
    torch.manual_seed(9)
    x, boundaries = rand((5, 7)), torch.linspace(-2, 2, 9)
    table = {
        "take": lambda x, b, i, v: torch.take(x, i),
        "bucketize": lambda x, b, i, v: torch.bucketize(v, b),
        "bucketize right, int32": lambda x, b, i, v: torch.bucketize(v * 3, b, right=True, out_int32=True),
        "searchsorted": lambda x, b, i, v: torch.searchsorted(b, v),
    }
    fns = list(table.values())
    cap = check_on_every_target(lambda *a: tuple(f(*a) for f in fns), x, boundaries, torch.tensor(-9), rand(()),
                                names=list(table))
    assert len(cap.graphs) == 1 and cap.kernels, "the call was not compiled"
    no_fallbacks(cap)


def test_a_scatter_add_of_bools_saturates(check_on_every_target):
    """scatter_add of bools is a logical or, as in eager: Triton summed the bools
    that meet at an element in 1 bit, so True + True came back False."""
    torch.manual_seed(3)
    x, src = torch.rand(10, 5) > 0.5, torch.rand(6, 5) > 0.3
    index = torch.randint(0, 10, (6, 5))
    cap = check_on_every_target(lambda x, i, s: (torch.scatter_add(x, 0, i, s), torch.scatter_add(x, 1, i[:, :3] % 5, s)),
                                x, index, src)
    no_fallbacks(cap)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bfloat16", "float16"])
def test_16_bit_index_put_adds_as_eager_does(check_on_every_target, target, dtype):
    """x.index_put(i, v, accumulate=True) of 16-bit floats, 400 values into 10 rows:
    on a GPU eager sums each row's values in float32 and rounds once, and so do
    ours (16-bit atomics rounded at every add and drifted); on the CPU eager adds
    in order, rounding each, and so does the C++ kernel."""
    torch.manual_seed(4)
    x, v = rand((10, 4), dtype), rand((400, 4), dtype)
    i = torch.randint(0, 10, (400,))
    cap = check_on_every_target(lambda x, i, v: x.index_put((i,), v, accumulate=True), x, i, v)
    if target != "triton":  # the interpreter has no 16-bit atomics of ours: ATen's
        no_fallbacks(cap)


def test_a_graph_whose_shapes_depend_on_data_runs_uncompiled_and_says_so():
    """narrow at a tensor's value, and a boolean mask's index_put with its backward
    (nonzero): fake tensors cannot trace them, for us or TorchInductor. The graph
    runs as it is, with a warning and a record that say why, where Dynamo ran it
    eagerly with a traceback in its log and no record of ours."""
    torch.manual_seed(5)
    x, i = torch.randn(6, 8), torch.tensor(3)
    mask, v = torch.rand(6, 8) > 0.5, torch.randn((), requires_grad=True)
    w = x.clone().requires_grad_()
    table = {
        "narrow(x, 1, a tensor, 2)": lambda: torch.narrow((x * 2).sin(), 1, i, 2).cos(),
        "index_put(mask) and its backward": lambda: torch.index_put(w * 2, (mask,), v).sum(),
    }
    for name, fn in table.items():
        torch._dynamo.reset()
        with compiler.capture() as cap, pytest.warns(UserWarning, match="depends on the data"):
            out = torch.compile(fn, backend="fusion")()
        torch.testing.assert_close(out, fn(), msg=name)
        notes = [g.note for g in cap.graphs]
        assert notes and all("runs uncompiled" in n and "depends on the data" in n for n in notes), (name, notes)
    expected = torch.autograd.grad(table["index_put(mask) and its backward"](), (w, v))
    torch._dynamo.reset()
    got = torch.autograd.grad(torch.compile(table["index_put(mask) and its backward"], backend="fusion")(), (w, v))
    torch.testing.assert_close(got, expected)
