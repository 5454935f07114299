"""The decomposition table: ATen core decompositions plus the composite ops we
want as primitives we can fuse (softmax, norms, gelu), taken from torch._decomp."""
from __future__ import annotations

import functools
import math

import torch
from torch._decomp import core_aten_decompositions, get_decompositions
from torch._decomp.decompositions import grid_sampler_2d as _decomposed_grid_sampler_2d
from torch._decomp.decompositions import native_dropout as _decomposed_dropout
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes

from .config import config
from .ir import overflows, upcast

aten = torch.ops.aten

# Composite ops whose decompositions are pure pointwise + reductions: decomposing
# them is what lets softmax or layer_norm become one kernel.
_EXTRA = [
    aten._softmax,
    aten._log_softmax,
    aten._softmax_backward_data,
    aten._log_softmax_backward_data,
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.native_group_norm,
    aten.native_group_norm_backward,
    aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional,
    aten.native_batch_norm_backward,
    aten._native_batch_norm_legit,
    aten.native_batch_norm,
    aten._batch_norm_with_update,
    aten._batch_norm_with_update_functional,
    aten._batch_norm_no_update,
    aten.gelu,
    aten.gelu_backward,
    aten.leaky_relu,
    aten.leaky_relu_backward,
    aten.rrelu_with_noise_backward,
    aten.elu,
    aten.elu_backward,
    aten.hardtanh,
    aten.hardtanh_backward,
    aten.embedding,
    aten.embedding_dense_backward,
    aten.index_select,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten.mean.dim,
    aten.mean.default,
    aten.clamp_min,
    aten.clamp_max,
    aten.linalg_vector_norm,
    aten.repeat,
    aten.diagonal,
    aten._adaptive_avg_pool2d,
    aten.bucketize,
]

# Ops we lower ourselves (or call as externs) even though core decompositions exist.
_KEEP = {
    # its decomposition (math attention) leaves the flash backward op without the
    # logsumexp it needs: gradients would be wrong. An extern call, forward and backward.
    aten._scaled_dot_product_flash_attention_for_cpu.default,
    aten.addmm.default,
    aten.mm.default,
    aten.bmm.default,
    aten.baddbmm.default,
    aten.convolution.default,
}


def _softmax(x, dim: int, half_to_float: bool):
    """torch._decomp's softmax, with one reciprocal per row: the sum of
    exp(x - max) lies in [1, n] (or is NaN), so e * (1 / sum) is within an ulp of
    e / sum, and a multiply per element costs far less than an IEEE division
    (H100, bf16 over [2048, 50257]: 253 -> 246 us)."""
    x = x.contiguous()
    computation_dtype, result_dtype = elementwise_dtypes(x, type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    x = x.to(computation_dtype)
    if x.ndim and x.shape[dim] == 0:
        return x.to(torch.float32 if half_to_float else result_dtype)
    unnormalized = torch.exp(x - torch.amax(x, dim, keepdim=True))
    result = unnormalized * torch.reciprocal(torch.sum(unnormalized, dim, keepdim=True))
    return result if half_to_float else result.to(result_dtype)


def _native_dropout(x, p: float, train: bool | None):
    """torch._decomp's dropout, with its draws in float32 whatever x's dtype (as
    eager's kernels draw): a bfloat16 draw > 0.1 would keep a share off 0.9 by its
    rounding. The mask is random numbers of ours (lowerings.randomness)."""
    if not train or p == 0 or p == 1 or not x.dtype.is_floating_point:
        return _decomposed_dropout(x, p, train)
    keep = torch.rand_like(x, dtype=torch.float32) > p
    return keep * x * float(1.0 / (1.0 - p)), keep


def _logit_as_on_device(decomposition):
    """logit as eager computes it on each device: in float32 on a GPU (torch._decomp's),
    but a 16-bit float on the CPU step by step in its own type, each step rounded
    (ATen's CPU kernel runs x / (1 - x) in Vectorized<BFloat16>/<Half>): in float32,
    a third of such results were an ulp off."""
    def logit(x, eps=None):
        if x.device.type != "cpu" or x.dtype not in (torch.float16, torch.bfloat16):
            return decomposition(x, eps)
        z = x if eps is None or eps < 0 else x.clamp(eps, 1 - eps)
        return torch.log(z / (1 - z))

    return logit


def _std_as_on_device(decomposition):
    """std (and std_mean) of float32 as eager computes it on the CPU: in float64, the
    square root too, rounded to float32 once (a std of 1.8e20, whose variance float32
    cannot hold, was inf). A GPU computes it in float32, as torch._decomp's does."""
    def std(x, *args, **kwargs):
        if x.device.type != "cpu" or x.dtype != torch.float32:
            return decomposition(x, *args, **kwargs)
        out = decomposition(x.double(), *args, **kwargs)
        return tuple(o.float() for o in out) if isinstance(out, tuple) else out.float()

    return std


def _ntuple(v, n: int) -> tuple[int, ...]:
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return tuple(v) * n if len(v) == 1 else tuple(v)


class _Windows:
    """A pooling's geometry over the last n dims (2 or 3), as ATen computes it:
    window o starts at o * stride - padding and reads kernel elements `dilation`
    apart; the input is padded on both sides so that every window lies inside it.
    idx[d] ([out, kernel] then a pair of 1s for each dim after d) indexes dim d
    of the padded input: affine, so the windows are read directly
    (lowerings.indexing._affine_forms)."""

    def __init__(self, size, kernel_size, stride, padding, dilation, ceil_mode, device, n: int = 2):
        from torch._meta_registrations import pooling_output_shape

        k, s, p, dl = (_ntuple(v, n) for v in (kernel_size, stride or kernel_size, padding, dilation))
        self.n, self.size, self.kernel, self.padding, self.dilation = n, tuple(size[-n:]), k, p, dl
        self.out = [pooling_output_shape(m, k[d], p[d], s[d], dl[d], ceil_mode) for d, m in enumerate(self.size)]
        self.pad = [(p[d], max(0, (self.out[d] - 1) * s[d] + (k[d] - 1) * dl[d] + 1 - self.size[d] - p[d]))
                    for d in range(n)]
        self.starts = [torch.arange(self.out[d], device=device) * s[d] for d in range(n)]
        self.idx = [(self.starts[d][:, None] + torch.arange(k[d], device=device) * dl[d]).view(
            self.out[d], k[d], *[1] * (2 * (n - 1 - d))) for d in range(n)]

    def windows(self, x, fill=0.0):
        """x's windows, [..., o0, k0, o1, k1, ...]."""
        pads = [q for d in reversed(range(self.n)) for q in self.pad[d]]
        return torch.nn.functional.pad(x, pads, value=fill)[(..., *self.idx)]

    def per_window(self, t, d: int):
        """A [out[d]] tensor broadcast over the windows' output dims [o0, o1, ...]."""
        return t.view(-1, *[1] * (self.n - 1 - d))

    def divisor(self, count_include_pad: bool, divisor_override):
        """avg_pool's divisor of each window: its extent clipped to the input and
        its padding (count_include_pad), or to the input alone, or divisor_override."""
        if divisor_override:
            return divisor_override
        total = None
        for d in range(self.n):
            lo = self.starts[d] - self.padding[d]
            hi = torch.clamp(lo + self.kernel[d], max=self.size[d] + self.padding[d])
            extent = hi - lo if count_include_pad else torch.clamp(hi, max=self.size[d]) - torch.clamp(lo, min=0)
            total = self.per_window(extent, d) if total is None else total * self.per_window(extent, d)
        return total


def _window_max(windows):
    """The max over windows' last dim and where it is: the first of equal maxima,
    but the last NaN, as in eager's pooling kernels (they take `val > max || isnan(val)`,
    where torch.max takes the first NaN)."""
    values, at = windows.max(-1)
    position = torch.arange(windows.shape[-1], device=windows.device)
    last_nan = torch.where(windows.isnan(), position, -1).amax(-1)
    return values, torch.where(last_nan >= 0, last_nan, at)


def _max_pool_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False, n: int = 2):
    """The max of each window (padded with -inf) and where it is, as an index into
    the input's plane (volume); NaN wins, as in eager. Floats only (ATen takes the rest)."""
    if not x.dtype.is_floating_point:
        return NotImplemented
    w = _Windows(x.shape, kernel_size, stride, padding, dilation, ceil_mode, x.device, n)
    lead = x.ndim - n
    order = [*range(lead), *(lead + 2 * d for d in range(n)), *(lead + 2 * d + 1 for d in range(n))]
    windows = w.windows(x, float("-inf")).permute(order).flatten(-n)  # [..., o0, o1, ..., k0 * k1 * ...]
    values, at = _window_max(windows)
    flat = None
    for d in range(n):
        inner = math.prod(w.kernel[d + 1:])
        offset = at // inner if inner > 1 else at  # the window's position along dim d
        offset = offset % w.kernel[d] if d else offset
        pos = w.per_window(w.starts[d] - w.padding[d], d) + offset * w.dilation[d]
        flat = pos if flat is None else flat * w.size[d] + pos
    return values, flat


def _max_pool2d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode, 2)


def _max_pool3d_with_indices(x, kernel_size, stride=(), padding=0, dilation=1, ceil_mode=False):
    return _max_pool_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode, 3)


def _max_pool2d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _scatter_to_maxima(grad, x, indices, 2)


def _max_pool3d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation, ceil_mode, indices):
    return _scatter_to_maxima(grad, x, indices, 3)


def _scatter_to_maxima(grad, x, indices, n: int = 2):
    """A max pooling's backward: each window's gradient added at its max (a
    scatter over the windows). Also adaptive_max_pool2d's."""
    acc = upcast(x.dtype)
    plane = x.new_zeros((*x.shape[:-n], math.prod(x.shape[-n:])), dtype=acc)
    plane = plane.scatter_add(-1, indices.flatten(-n), grad.flatten(-n).to(acc))
    return plane.view(x.shape).to(x.dtype)


def _avg_pool(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None,
              n: int = 2):
    """avg_pool as the sums of windows read through affine indices (one fused
    kernel: lowerings.indexing._affine_forms), over ATen's divisors; 16-bit inputs
    summed in float32, as eager does."""
    w = _Windows(x.shape, kernel_size, stride, padding, 1, ceil_mode, x.device, n)
    acc = upcast(x.dtype)
    kernel_dims = tuple(-2 * n + 1 + 2 * d for d in range(n))
    return (w.windows(x).sum(kernel_dims, dtype=acc) / w.divisor(count_include_pad, divisor_override)).to(x.dtype)


def _avg_pool_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad, divisor_override,
                       n: int = 2):
    """Each window's gradient over its divisor, added into the elements it read (a
    scatter over the windows), the padding then cut away."""
    w = _Windows(x.shape, kernel_size, stride, padding, 1, ceil_mode, x.device, n)
    acc = upcast(x.dtype)
    share = grad.to(acc) / w.divisor(count_include_pad, divisor_override)
    share = share.view(*share.shape[:-n], *[e for o in share.shape[-n:] for e in (o, 1)])  # [..., o0, 1, o1, 1, ...]
    padded = x.new_zeros((*x.shape[:-n], *(m + sum(q) for m, q in zip(w.size, w.pad))), dtype=acc)
    lead = [None] * (x.ndim - n)
    padded = aten.index_put(padded, [*lead, *w.idx], share, True)
    crop = tuple(slice(q[0], q[0] + m) for m, q in zip(w.size, w.pad))
    return padded[(..., *crop)].to(x.dtype)


def _searchsorted(sorted_sequence, values, *, out_int32=False, right=False, side=None, sorter=None):
    """Where each value would go in sorted_sequence (the first element >= it, or >
    it with right): a 1-D sequence is torch._decomp's bucketize; rows of them (an
    inverse-CDF sample, each row its own) a binary search too, every value stepping
    at once, each reading its row's middle element by a gather. With a sorter, ATen's."""
    if sorter is not None:
        return NotImplemented
    right = right or side == "right"
    dtype = torch.int32 if out_int32 else torch.int64
    if sorted_sequence.ndim == 1:
        return aten.bucketize(values, sorted_sequence, out_int32=out_int32, right=right)
    n = sorted_sequence.shape[-1]
    start = torch.zeros(values.shape, dtype=torch.int64, device=values.device)
    end = start + n
    for _ in range(n.bit_length()):
        mid = (start + end) // 2
        found = torch.gather(sorted_sequence, -1, mid.clamp(max=max(n - 1, 0)))
        after = ~(found > values) if right else ~(found >= values)  # ATen's tests: a NaN value goes last
        searching = start < end
        start = torch.where(searching & after, mid + 1, start)
        end = torch.where(searching & ~after, mid, end)
    return start.to(dtype)


class _AdaptiveWindows:
    """An adaptive pooling's windows: window o spans [o * n // out, ceil((o + 1) *
    n / out)) of a dim of n, as in ATen, each read `longest` long (clamped to the
    input; `fits` says which of those positions lie in the window)."""

    def __init__(self, size, out_size, device):
        self.starts, self.picks, self.fits, self.lengths = [], [], [], []
        for n, out in zip(size[-2:], out_size):
            o = torch.arange(out, device=device)
            start, end = o * n // out, ((o + 1) * n + out - 1) // out
            step = torch.arange(-(-n // out) + (1 if n % out else 0), device=device)
            self.starts.append(start)
            self.picks.append(torch.clamp(start[:, None] + step, max=n - 1))
            self.fits.append(step < (end - start)[:, None])
            self.lengths.append(end - start)
        self.rows = self.picks[0].view(*self.picks[0].shape, 1, 1)  # [oh, kh, 1, 1]
        self.cols = self.picks[1]  # [ow, kw]

    def inside(self):
        """[oh, kh, ow, kw]: whether each position read lies in its window."""
        return self.fits[0][:, :, None, None] & self.fits[1]


def _adaptive_max_pool2d(x, output_size):
    """The max of each window and where it is (an index into the input's plane),
    as _max_pool2d_with_indices; windows of unequal lengths read their longest,
    the positions past a window's end -inf. Floats only (ATen takes the rest)."""
    if not x.dtype.is_floating_point or 0 in output_size:
        return NotImplemented
    (h, wd), (oh, ow) = x.shape[-2:], output_size
    if h % oh == 0 and wd % ow == 0:
        return _max_pool2d_with_indices(x, (h // oh, wd // ow))
    w = _AdaptiveWindows(x.shape, output_size, x.device)
    windows = torch.where(w.inside(), x[..., w.rows, w.cols], float("-inf"))  # [..., oh, kh, ow, kw]
    kw = w.cols.shape[-1]
    values, at = _window_max(windows.movedim(-3, -2).flatten(-2))  # a window's first position always fits
    rows = w.starts[0][:, None] + at // kw
    return values, rows * wd + w.starts[1] + at % kw


def _adaptive_avg_pool2d_backward(grad, x):
    """Each window's gradient over its size, added into the elements it covers (a
    scatter over the windows; positions past a window's end add nothing)."""
    acc = upcast(x.dtype)
    w = _AdaptiveWindows(x.shape, grad.shape[-2:], x.device)
    share = grad.to(acc) / (w.lengths[0][:, None] * w.lengths[1])
    share = share[..., :, None, :, None] * w.inside().to(acc)  # [..., oh, kh, ow, kw]
    lead = [None] * (x.ndim - 2)
    out = aten.index_put(x.new_zeros(x.shape, dtype=acc), [*lead, w.rows, w.cols], share, True)
    return out.to(x.dtype)


def _grid_sampler_2d(x, grid, *args):
    """torch._decomp's grid_sampler_2d (the corners gathered in one kernel) where
    Triton renders it and no gradient is taken. On a GPU it beats ATen's kernel
    (H100, [16, 64, 128, 128], per call: bilinear fp32 122.4 us against 260.5, bf16
    106.4 against 199.8, nearest fp32 79.4 against 136.7, in programs of 4096 x 32
    warps: see triton_config.GATHER_CONFIGS); on a CPU it ran 5.6x slower than eager; in
    training the backward, ATen's still, comes with a recomputed forward (H100,
    [8, 32, 64, 64] fp32 fwd+bwd: 626 us against 353 with ATen's forward)."""
    if config.target_for(x.device) != "triton" or (torch.is_grad_enabled() and (x.requires_grad or grid.requires_grad)):
        return NotImplemented
    return _decomposed_grid_sampler_2d(x, grid, *args)


def _negatives_as_eager(decomposition, index_at: int, dim_at: int | None, wraps: bool):
    """`decomposition` of an op whose decomposition reaches advanced indexing,
    which counts a negative index from the end, with eager's own rule for
    negative indices: index_select, embedding, index_add and index_copy refuse
    them (moved down by the dim's size first, the lowering's wrap leaves them
    negative and its range check fails); index_fill, which decomposes into
    index_copy, counts them from the end (`wraps`)."""
    def decompose(*args, **kwargs):
        x, args = args[0], list(args)
        dim = 0 if dim_at is None else args[dim_at] % max(x.ndim, 1)
        size = x.shape[dim] if x.ndim else 1
        index = args[index_at]
        args[index_at] = torch.where(index < 0, index + size if wraps else index - size, index)
        return decomposition(*args, **kwargs)

    return decompose


def _scalar_as_vector(decomposition, at: int):
    """`decomposition` of an op whose decomposition indexes with argument `at`
    (take's index, bucketize's values), given a 0-d tensor there as one of one
    element: indexing by a 0-d tensor reads its value (item), which tracing cannot."""
    def decompose(*args, **kwargs):
        if args[at].ndim:
            return decomposition(*args, **kwargs)
        args = list(args)
        args[at] = args[at].reshape(1)
        return decomposition(*args, **kwargs).reshape(())

    return decompose


def _in_input_layout(decomposition, n: int):
    """`decomposition` of a pooling, its outputs laid out channels-last where its
    input is, as eager's (a decomposition's own result is contiguous)."""
    def decompose(x, *args, **kwargs):
        out = decomposition(x, *args, **kwargs)
        layout = torch.channels_last if n == 2 else torch.channels_last_3d
        if out is NotImplemented or x.ndim != n + 2 or x.is_contiguous() or not x.is_contiguous(memory_format=layout):
            return out
        if isinstance(out, tuple):
            return tuple(o.contiguous(memory_format=layout) for o in out)
        return out.contiguous(memory_format=layout)

    return decompose


# Scalar arguments ATen converts to the op's dtype, raising where they overflow it
# ("value cannot be converted to type int8_t without overflow"), where compiled code
# would wrap or round them (float32's lowest in a bf16 attention mask's masked_fill
# to -inf, an int8 clamp's 300): such a call stays ATen's, which raises as eager does
CONVERTED_SCALARS = {
    aten.clamp.default: ("min", "max"), aten.clamp_min.default: ("min",), aten.clamp_max.default: ("max",),
    aten.hardtanh.default: ("min_val", "max_val"), aten.threshold.default: ("threshold", "value"),
    aten.pow.Tensor_Scalar: ("exponent",), aten.masked_fill.Scalar: ("value",), aten.scatter.value: ("value",),
    aten.addcmul.default: ("value",), aten.addcdiv.default: ("value",),
    **{op: ("alpha",) for op in (aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar,
                                 aten.rsub.Tensor, aten.rsub.Scalar)},
}


def overflowing_scalar(op, args, kwargs, dtype: torch.dtype) -> str | None:
    """"name=value" of a CONVERTED_SCALARS argument of this call that `dtype`
    cannot hold, else None."""
    names = CONVERTED_SCALARS.get(op)
    if not names:
        return None
    bound = dict(zip((a.name for a in op._schema.arguments), args)) | dict(kwargs)
    return next((f"{n}={bound[n]!r}" for n in names if overflows(bound.get(n), dtype)), None)


def _scalars_checked(op, decomposition):
    """`decomposition` of an op with CONVERTED_SCALARS, declining (the op stays
    ATen's) where one overflows the dtype of the op's tensors."""
    def decompose(*args, **kwargs):
        tensors = [a.dtype for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
        dtype = functools.reduce(torch.promote_types, tensors) if tensors else None
        if dtype is not None and overflowing_scalar(op, args, kwargs, dtype):
            return NotImplemented
        return decomposition(*args, **kwargs)

    return decompose


# ops left to lowerings of ours, which compute them as eager's kernels do
_LOWERED_AS_EAGER = (aten.addcmul, aten.addcdiv, aten.lerp)


def _roll_as_cat(decomposition):
    """roll as the cat of two slices a dim, whose loads are contiguous and masked
    (the C++ loop vectorizes), rather than a gather at (i - shift) % size computed
    per element (a 64-bit remainder, which kept the loop scalar; two threads, ours /
    Inductor: x.roll(3, -1) [4096, 4096] 1.03 -> 0.89, a Swin block's roll((3, 3),
    (1, 2)) 2.20 -> 1.25). On the CPU only: the GPU's form was measured as it is."""
    @functools.wraps(decomposition)
    def roll(a, shifts, dims=()):
        shifts = shifts if isinstance(shifts, (list, tuple)) else [shifts]
        dims = dims if isinstance(dims, (list, tuple)) else [dims]
        if a.device.type != "cpu" or not dims or len(shifts) != len(dims) or a.numel() == 0 or not all(
                isinstance(v, int) for v in [*shifts, *dims, *a.shape]):
            return decomposition(a, shifts, dims)
        out = a
        for shift, dim in zip(shifts, dims):
            size = out.shape[dim]
            s = shift % size
            if s:
                out = torch.cat([out.narrow(dim, size - s, s), out.narrow(dim, 0, size - s)], dim)
        return out.clone() if out is a else out

    return roll


@functools.lru_cache(None)
def decomposition_table() -> dict:
    table = dict(core_aten_decompositions())
    table.update(get_decompositions(_EXTRA))
    for op in [op for op in table if op.overloadpacket in _LOWERED_AS_EAGER]:
        del table[op]  # lowered as eager's kernels compute them (lowerings/pointwise.py)
    table[aten._softmax.default] = _softmax
    table[aten.logit.default] = _logit_as_on_device(table[aten.logit.default])
    for op in (aten.std.correction, aten.std_mean.correction, aten.std.dim, aten.std.default):
        table[op] = _std_as_on_device(table[op])
    table[aten.native_dropout.default] = _native_dropout
    # pooling, ours (torch._decomp has max_pool2d's only from torch 2.12 on)
    table[aten.max_pool2d_with_indices.default] = _max_pool2d_with_indices
    table[aten.max_pool2d_with_indices_backward.default] = _max_pool2d_with_indices_backward
    table[aten.max_pool3d_with_indices.default] = _max_pool3d_with_indices
    table[aten.max_pool3d_with_indices_backward.default] = _max_pool3d_with_indices_backward
    for n, forward, backward in ((2, aten.avg_pool2d, aten.avg_pool2d_backward), (3, aten.avg_pool3d, aten.avg_pool3d_backward)):
        table[forward.default] = functools.partial(_avg_pool, n=n)
        table[backward.default] = functools.partial(_avg_pool_backward, n=n)
    table[aten._adaptive_avg_pool2d_backward.default] = _adaptive_avg_pool2d_backward
    table[aten.adaptive_max_pool2d.default] = _adaptive_max_pool2d
    table[aten.adaptive_max_pool2d_backward.default] = _scatter_to_maxima
    table[aten.grid_sampler_2d.default] = _grid_sampler_2d
    table[aten.searchsorted.Tensor] = _searchsorted
    for op, index_at, dim_at, wraps in ((aten.embedding.default, 1, None, False), (aten.index_select.default, 2, 1, False),
                                        (aten.index_add.default, 2, 1, False), (aten.index_copy.default, 2, 1, False),
                                        (aten.index_fill.int_Tensor, 2, 1, True), (aten.index_fill.int_Scalar, 2, 1, True)):
        table[op] = _negatives_as_eager(table[op], index_at, dim_at, wraps)
    table[aten.roll.default] = _roll_as_cat(table[aten.roll.default])
    table[aten.take.default] = _scalar_as_vector(table[aten.take.default], 1)
    table[aten.bucketize.Tensor] = _scalar_as_vector(table[aten.bucketize.Tensor], 0)
    for op in CONVERTED_SCALARS.keys() & table.keys():
        table[op] = _scalars_checked(op, table[op])
    for n, ops in ((2, (aten.max_pool2d_with_indices, aten.avg_pool2d, aten._adaptive_avg_pool2d, aten.adaptive_max_pool2d)),
                   (3, (aten.max_pool3d_with_indices,))):  # eager's avg_pool3d gives a contiguous result
        for op in ops:
            table[op.default] = _in_input_layout(table[op.default], n)
    for op in _KEEP:
        table.pop(op, None)
    return table
