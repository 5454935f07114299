"""The seed workloads: how many kernels each compiles into (and that they are
right), graph breaks, and the kernel cache: cold and cached compilation report
the same kernels, a corrupt entry is rebuilt, a build failure names its kernel."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import compiler
from compiler.config import config
from compiler.runtime import cache, cpp_build

pytestmark = pytest.mark.usefixtures("fresh_dynamo")


# the seed models, as the suites define them
from suites.models import MixedModel, PointwiseModel  # noqa: E402


def toy_example(a, b):
    x = a / (torch.abs(a) + 1)
    if b.sum() < 0:  # data-dependent: Dynamo breaks the graph here
        b = b * -1
        if a.sum() < 1:
            a = a * -2
    return x * b


def run(fn, *args, tol=None):
    """Compiled and eager results (no autograd: inference graphs) and the capture."""
    compiled = torch.compile(fn, backend="fusion", dynamic=False)
    with torch.no_grad(), compiler.capture() as cap:
        out = compiled(*args)
        ref = fn(*args)
    torch.testing.assert_close(out, ref, **(tol or dict(rtol=1e-4, atol=1e-5)))
    return cap


def test_sin_chain_is_one_kernel():
    cap = run(lambda x: ((x + 1) * 2).sin(), torch.randn(100_003))
    assert [k.kind for k in cap.kernels] == ["pointwise"]
    assert sorted(cap.kernels[0].aten_ops) == ["add", "mul", "sin"]
    assert not cap.externs and not cap.fallbacks


def test_pointwise_model_is_one_kernel():
    torch.manual_seed(0)
    cap = run(PointwiseModel().eval(), torch.randn(37, 1024))
    assert len(cap.kernels) == 1, [k.name for k in cap.kernels]
    assert {"relu", "sigmoid", "tanh"} <= set(cap.kernels[0].aten_ops)


@pytest.mark.parametrize(
    "name, fn, args",
    [
        ("softmax", lambda x: x.softmax(-1), (torch.randn(65, 999),)),
        ("log_softmax", lambda x: F.log_softmax(x, -1), (torch.randn(65, 999),)),
        ("layer_norm", nn.LayerNorm(777).eval(), (torch.randn(33, 777),)),
        ("rms_norm", lambda x, w: F.rms_norm(x, (513,), w), (torch.randn(33, 513), torch.randn(513))),
    ],
    ids=["softmax", "log_softmax", "layer_norm", "rms_norm"],
)
def test_norms_over_the_last_dim_are_one_kernel(name, fn, args):
    torch.manual_seed(1)
    with torch.no_grad():
        cap = run(fn, *args)
    assert len(cap.kernels) == 1, [(k.name, k.split_reason) for k in cap.kernels]
    assert cap.kernels[0].kind == "reduction"
    assert not cap.fallbacks


@pytest.mark.parametrize("shape, groups", [((2, 12, 5, 7), 4), ((3, 32, 7, 9), 8), ((2, 6, 1, 1), 3)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_group_norm_is_one_kernel(shape, groups, dtype):
    """The statistics of a group and its normalized values fuse: the per-channel
    scale and shift (an as_strided [N, C] view of [N, G, C/G] values) are computed
    where they are read, and the loops over [N, C, H*W] split C into (group,
    channel in the group) to walk the kernel's rows. TorchInductor makes 3 kernels."""
    torch.manual_seed(2)
    norm = nn.GroupNorm(groups, shape[1]).eval().to(dtype)
    with torch.no_grad():
        norm.weight.normal_()
        norm.bias.normal_()
    x = (torch.randn(shape) * 3 + 1).to(dtype)
    tol = dict(rtol=2e-2, atol=2e-2) if dtype == torch.bfloat16 else dict(rtol=1e-4, atol=1e-4)
    cap = run(norm, x, tol=tol)
    assert len(cap.kernels) == 1, [(k.name, k.split_reason) for k in cap.kernels]
    assert cap.kernels[0].bytes_written == x.nbytes  # only the result reaches memory


def test_few_long_groups_keep_their_statistics_kernel_splittable():
    """4 groups of 36864: fused with the normalize loop, every group would be one
    GPU program; alone, the statistics split their rows across programs."""
    norm = nn.GroupNorm(2, 8).eval()
    with torch.no_grad():
        cap = run(norm, torch.randn(2, 8, 96, 96) * 2 + 3)
    assert [k.kind for k in cap.kernels] == ["reduction", "pointwise"]
    assert "splits its rows" in cap.kernels[1].split_reason


def test_long_strided_rows_in_many_column_blocks_keep_their_consumer_apart():
    """softmax(1) of [B, T, D] reduces a strided dim. Over 300 rows in blocks of
    columns two or more an SM, the normalization stays apart: fused, each program
    would read its block twice, past what the cache holds. Over 256 rows it joins."""
    cap = run(lambda x: x.softmax(1), torch.randn(2, 300, 8500))
    assert [k.kind for k in cap.kernels] == ["reduction", "pointwise"]
    assert "walk its 300 rows twice" in cap.kernels[1].split_reason
    cap = run(lambda x: x.softmax(1), torch.randn(2, 256, 8500))
    assert [k.kind for k in cap.kernels] == ["reduction"], [k.split_reason for k in cap.kernels]


def test_layer_norm_mean_is_reduced_once():
    """var_mean and layer_norm both need the row mean: one sum, not two, in the IR."""
    cap = run(nn.LayerNorm(777).eval(), torch.randn(33, 777))
    reductions = [line for line in cap.graphs[0].ir.splitlines() if "= reduction" in line]
    assert len(reductions) == 2, reductions  # sum(x) and sum((x - mean)^2)


def test_linear_without_pointwise_consumer_stays_one_addmm():
    """Nothing to fuse the bias into: ATen's addmm adds it in the GEMM."""
    lin = nn.Linear(33, 17)
    cap = run(lambda x: lin(x).sum(0), torch.randn(9, 33))
    assert [e.op for e in cap.externs] == ["aten.addmm.default"]


def test_mixed_model_is_two_kernels_and_two_externs():
    torch.manual_seed(2)
    cap = run(MixedModel().eval(), torch.randn(64, 512))
    assert len(cap.kernels) == 2, [(k.name, k.split_reason) for k in cap.kernels]
    # each linear is a plain mm; its bias is added in the kernel of the ops after it
    assert [e.op for e in cap.externs] == ["aten.mm.default"] * 2
    assert all("addmm" in k.aten_ops for k in cap.kernels)
    assert not cap.fallbacks
    # the extern ends a group: each kernel says why it did not join the one before
    assert all(k.split_reason for k in cap.kernels[1:])


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["b-positive", "b-negative"])
def test_toy_example_breaks_the_graph(sign):
    torch.manual_seed(3)
    a, b = torch.randn(10), sign * torch.ones(10)
    cap = run(toy_example, a, b)
    assert len(cap.graphs) > 1
    assert cap.graph_breaks >= 1, cap.graph_break_reasons
    assert all(g.kernels for g in cap.graphs)


# ---------------------------------------------------------------------------
# the kernel cache


def _softmax_mlp(x, w):
    return (x @ w).softmax(-1) * 2 + x.sum(-1, keepdim=True).sigmoid()


def _kernels(cap):
    return [(k.name, k.kind, k.aten_ops, k.bytes_read, k.bytes_written, k.source) for k in cap.kernels]


def test_a_new_shape_compiles_its_own_kernels():
    """A second shape makes Dynamo trace with symbolic sizes; each shape then
    gets its own static kernels (never an uncompiled fallback), once."""
    model = PointwiseModel(dim=64)
    compiled = torch.compile(model, backend="fusion")  # Dynamo's default: automatic dynamic shapes
    with torch.no_grad(), compiler.capture() as cap:
        for rows in (8, 5, 13, 5):
            x = torch.randn(rows, 64)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    assert not [f for g in cap.graphs for f in g.fallbacks]
    assert sorted(k.numel for k in cap.kernels) == sorted(rows * 64 for rows in (8, 5, 13))


def test_past_the_shape_limit_new_shapes_run_uncompiled_and_say_so():
    model = PointwiseModel(dim=32)
    compiled = torch.compile(model, backend="fusion")
    with torch.no_grad(), config.patch(max_shapes=2), compiler.capture() as cap:
        for rows in (3, 4, 5):
            x = torch.randn(rows, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
        with pytest.warns(UserWarning, match="further shapes run uncompiled"):
            x = torch.randn(6, 32)
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-5)
    notes = [f.reason for g in cap.graphs for f in g.fallbacks]
    assert len(notes) == 1 and "FUSION_MAX_SHAPES" in notes[0], notes
    assert sorted(k.numel for k in cap.kernels) == [3 * 32, 4 * 32, 5 * 32]


def test_cold_and_cached_compilation_report_the_same_kernels(tmp_path):
    x, w = torch.randn(17, 33), torch.randn(33, 33)
    with config.patch(cache_dir=str(tmp_path)):
        cold = run(_softmax_mlp, x, w)
        torch._dynamo.reset()
        warm = run(_softmax_mlp, x, w)
    assert cold.kernels and _kernels(cold) == _kernels(warm)
    assert [e.op for e in cold.externs] == [e.op for e in warm.externs]
    assert cold.graphs[0].cache_hits == 0
    assert warm.graphs[0].cache_hits == len(warm.kernels)


def test_a_corrupt_cache_entry_is_rebuilt(tmp_path):
    x, w = torch.randn(17, 33), torch.randn(33, 33)
    with config.patch(cache_dir=str(tmp_path)):
        cold = run(_softmax_mlp, x, w)
        libs = sorted(tmp_path.rglob("*.so"))
        assert len(libs) == len(cold.kernels)
        for lib in libs:
            lib.unlink()  # a new file: this process still maps the old one
            lib.write_bytes(b"\x7fELF garbage, not a shared library")
            assert not cache.valid_entry(lib)
        torch._dynamo.reset()
        again = run(_softmax_mlp, x, w)
    assert again.graphs[0].cache_hits == 0, "a corrupt entry was trusted"
    assert _kernels(again) == _kernels(cold)
    assert all(cache.valid_entry(lib) and lib.read_bytes()[:4] == b"\x7fELF" for lib in libs)


def test_a_kernel_that_fails_to_build_names_itself_and_its_source(tmp_path):
    bad = 'extern "C" void cpp_poi_fused_broken_0(float* out) { out[0] = undeclared_name; }\n'
    with config.patch(cache_dir=str(tmp_path)), pytest.raises(compiler.KernelCompileError) as err:
        cpp_build.build("cpp_poi_fused_broken_0", bad)
    message = str(err.value)
    assert "cpp_poi_fused_broken_0" in message and "undeclared_name" in message
    path = err.value.source_path
    assert path is not None and str(path) in message
    assert path.read_text() == bad


def test_an_unusable_cache_directory_is_named_in_the_error(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    with config.patch(cache_dir=str(blocker / "cache")), pytest.raises(compiler.FusionCompilerError) as err:
        cpp_build.build("cpp_poi_fused_any_0", 'extern "C" void cpp_poi_fused_any_0() {}\n')
    assert str(blocker / "cache") in str(err.value) and "FUSION_CACHE_DIR" in str(err.value)


def test_a_python_float_under_dynamic_shapes_is_a_constant_of_its_value():
    """With dynamic=True Dynamo passes a Python float as a tensor it reads with
    .item(), whose value fake tensors cannot give: each value compiles as a
    constant, as Dynamo makes it without dynamic=True (this raised
    DataDependentOutputException)."""
    fn = lambda a, s: (a / s) * (s + 1)  # noqa: E731
    compiled = torch.compile(fn, backend="fusion", dynamic=True)
    with compiler.capture() as cap:
        for rows, s in ((3, 2.0), (5, 2.0), (3, 0.5), (3, 2.0)):
            a = torch.randn(rows, 7)
            torch.testing.assert_close(compiled(a, s), fn(a, s))
    assert not [f for g in cap.graphs for f in g.fallbacks]
    assert sorted(k.numel for k in cap.kernels) == [21, 21, 35]


def test_register_again_keeps_the_backend():
    """`compiler.register()` where `import compiler` (or the entry point) already
    registered "fusion": Dynamo refuses a name twice, so a second call does nothing."""
    compiler.register()
    compiler.register()
    assert run(lambda x: (x + 1) * 2, torch.randn(5)).kernels
