"""How a FusedKernel maps onto Triton programs, and the block sizes to try.

- pointwise: 1-D blocks over the flat index, or 2-D tiles [YBLOCK, XBLOCK] when
  some accesses are contiguous along one dim and others along the other (a
  transpose): Triton then reads and writes both coalesced, through shared memory.
  When every access is transposed alike (an output that keeps its input's
  strides), the 1-D blocks take the flat index in that order instead.
  Over a length that breaks a 16-byte vector, only the last 1-D block is masked;
- reductions: persistent (a block holds whole rows) when rows are short, looped
  otherwise; a looped reduction over few rows is split across several programs
  per row, the last one to finish combining their partial results. On a GPU, a
  handful of very long rows read more than once (softmax over a vocabulary,
  layer_norm, group_norm) are cooperative: each split over programs that hold
  their slice in registers and meet at a barrier after each reduction, so the
  rows are read from memory once. A short strided dim is held whole, but a
  pooling window slid by one steps over its elements in wide blocks of outputs.

Programs move about 32-64 bytes per thread and per access, and there are
enough of them to fill the GPU twice where the sizes allow."""
from __future__ import annotations

import dataclasses

import sympy
import torch

from .. import ir
from ..config import config
from ..index import FloorDiv, ModularIndexing, fold_divmod, simplify_with_ranges, unclamp, upper_bound
from ..runtime.triton_build import interpreting
from ..scheduler import R, X, FusedKernel, layout_deciding
from .common import SORTS, choose_layout, external_loads, reduction_order, walking_indices

SM_COUNT = 132  # H100 / H200
AUTOTUNE_MIN_ELEMENTS = 1 << 22  # smaller kernels run their first guess
MASKED_TAIL_MIN_ELEMENTS = 1 << 16  # see masks_last_block_only
# rows up to this many elements (padded to a power of 2) stay in registers
PERSISTENT_MAX_RBLOCK = {1: 8192, 2: 8192, 4: 4096, 8: 2048}
# ... and on a GPU, rows up to this many (by element size) when the kernel reads at
# most WIDE_PERSISTENT_MAX_INPUTS row-long tensors: 16-32 warps hold them, and each
# row is read from memory once, not once per loop over it (H100, against looping:
# softmax bf16 [4096, 12289] 125 -> 89 us, fp32 [8192, 8192] 215 -> 182,
# fp32 [4096, 32000] 401 -> 356). 16-bit rows past 16384 loop: since the looped
# form's later gains it runs them faster (H200, per call, persistent against
# looped: bf16 softmax [4096, 32000] 163.9 / 149.7 us, layer_norm [2048, 25088]
# 78.4 / 69.9, rms_norm 64.0 / 59.1, group_norm 32 groups 52.8 / 51.4; float32
# rows of as many elements mostly stay faster in registers: rms_norm [2048, 25088]
# 102.0 / 113.9, softmax [4096, 32000] 254.1 / 275.7, layer_norm [4096, 16384]
# 134.4 / 153.9, though group_norm 70.8 / 67.1)
WIDE_PERSISTENT_MAX_RBLOCK = {1: 16384, 2: 16384, 4: 32768}
# ... and up to this many where a load picks its element by a division of r (group
# norm's weight and bias, one a channel of the group): such rows ran faster looped
# (H200, do_bench per call, float32 group_norm with 32 groups, rows of 25088,
# persistent against looped: [32, 256, 56, 56] 71.7 / 67.0 us, [64, ...] 129.4 /
# 120.8, [16, ...] 42.1 / 38.6), where rows read at r itself stayed faster
# persistent (rms_norm [1024, 25088] 57.0 / 62.0, softmax [1024, 32000] 73.9 /
# 77.2, layer_norm [1024, 25088] 56.5 / 58.0)
DIVIDED_ROW_MAX_RBLOCK = 16384
# rows of 512-2048 (padded) are held by 4-warp programs of 4096 elements, 32 a
# thread, whatever their type: more warps spend more of the short kernel on the
# reduction's exchanges. H200, per call, against the earlier 32 (fp32) or 64 bytes
# (16-bit) a thread: layer_norm [16384, 768] bf16 22.2 -> 17.9 us, fp32 34.7 -> 28.2;
# [8192, 1024] bf16 14.1 -> 12.2; softmax and rms_norm 1-9% faster; layer_norm's
# backward (persistent, three row-long loads) [32768, 512] fp32 fwd+bwd 114.3 ->
# 62.3. Rows of 256 lost (layer_norm fwd+bwd [65536, 256] bf16 49.6 -> 66.0)
SHORT_ROWS = (512, 2048)
SHORT_ROW_PROGRAM = 4096
WIDE_PERSISTENT_MAX_INPUTS = 3
# ... unless the rows do not start on 16 bytes and are longer than this: a
# persistent block then loads element by element, while the looped form walks each
# row from the 16-byte boundary before it in whole vectors, where every access
# along r is the row itself (softmax, log_softmax; not a layer_norm's weight). H200,
# softmax per call, persistent against looped: bf16 [2048, 25087] 101.6 -> 83.9 us,
# fp32 [4096, 12289] 131.4 -> 110.6, [2048, 25087] 135.2 -> 119.9; rows of 24 KB
# keep to registers (bf16 [4096, 12289]: 68.5 against 77.9). A persistent block
# walked from the boundary (whole-vector loads that read up to 15 bytes of the
# neighbours, masked in registers; whole-vector stores and an element-wise one for
# the row's edges) ran slower (H200, do_bench, the best warps of each: layer_norm
# bf16 [4096, 12289] 78.5 -> 255.2 us, [8192, 4099] 50.2 -> 182.3, softmax bf16
# [4096, 12289] 73.1 -> 125.5), but for softmax bf16 [2048, 16001] (81.4 -> 71.3)
SHIFTED_PERSISTENT_MAX_BYTES = 32 << 10
# reducing a strided dim: only short ones, so that a block is wide in the contiguous x
OUTER_PERSISTENT_MAX_RBLOCK = 128
# ... and of 2-byte elements only up to 32 rows: the block of 33-128 spreads its rows
# over the lanes and warps that its 16-byte vectors along x leave over, where a loop
# of 8-16 rows a step keeps them in each thread's accumulators. H200, do_bench per
# call, us, persistent / looped (Inductor), bf16: mean(1) [64, 100, 16384] 78.5 / 58.1
# (58.9); sum(1) [64, 64, 65536] 202.7 / 136.7 (470.2); softmax(1) [32, 48, 128, 128]
# 50.0 / 34.9 (96.5), [32, 64, 128, 128] 51.5 / 47.3 (105.4), but [32, 128, 64, 64]
# 25.2 / 29.6 (45.7); x - x.amax(1) [64, 40, 16384] 51.8 / 45.2 (113.1); LayerNorm2d
# [32, 96, 56, 56] 27.1 / 22.2 (20.2), [32, 64, 112, 112] 47.3 / 44.8 (85.3);
# log_softmax(1) [8, 100, 128, 128] 25.2 / 23.4 (34.6). In float32 the persistent
# block is as fast or faster (LayerNorm2d [32, 64, 112, 112] 55.3 / 63.7, log_softmax(1)
# [8, 100, 128, 128] 30.6 / 40.2). Stepping a row at a time (as walks_columns) past 32
# rows was slower still (softmax(1) [32, 64, 128, 128] bf16 90.6, fp32 129.1)
NARROW_OUTER_PERSISTENT_MAX_RBLOCK = 32
# ... and, where its blocks of columns are two or more an SM, a per-element consumer
# joins it only over rows up to this long (scheduler._splits_rows_alone)
OUTER_FUSED_MAX_ROWS = 256
# ... but windows slid by one of up to this many elements, a step each, unrolled (slides_by_one)
WINDOW_MAX_STEPS = 32
# ... looped, and split over programs where it may: blocks this many columns wide,
# or OUTER_WIDE_XBLOCK where the columns make split_blocks such wider blocks (no split).
# H200, per call, blocks of 32 columns with 16 split warps an SM against 64 with 32
# (programs of 4 warps then; now OUTER_WARPS):
# sum(0) fp32 [65536, 256] 30.6 -> 25.6 us, [4096, 4096] 24.4 -> 22.0, bf16 [4096,
# 4096] 18.9 -> 16.5; softmax(0) fp32 [65536, 256] 94.5 -> 59.7, bf16 [16384, 1024]
# 57.8 -> 42.4, [32768, 64] 26.5 -> 14.8; x - x.mean(0) bf16 [8192, 4096] 61.7 -> 60.0;
# [4096, 8192] 38.7 -> 39.2. Unsplit, wider blocks stream better: sum(0) fp32
# [2048, 50257] 122.2 us in blocks of 64, 142.2 in blocks of 32
OUTER_XBLOCK = 32
OUTER_WIDE_XBLOCK = 64
# one-pass reductions over rows at least this long loop (with tuned RBLOCK)
LOOPED_MIN_RBLOCK = 2048
# a reduction of one row, up to this long, is one program's block (see plan)
SINGLE_ROW_MAX_RBLOCK = 4096
# the largest first-guess step of a looped reduction that reads each row more than once
MULTIPASS_STEP_BYTES = 32 << 10
# split a looped reduction when a row has at least this many loop iterations per split
SPLIT_MIN_ITERATIONS = 4
SM_MAX_WARPS = 64  # resident on an H100 / H200 SM
GATHER_CONFIGS = ((4096, 32),)  # (XBLOCK, warps) pointwise gathers also time
POINTWISE_WARPS = 4  # a 1-D pointwise program's, fewer where its block is small (16 bytes a thread)
SPLIT_WARPS_PER_SM = 32  # of the SM_MAX_WARPS
# warps of a looped reduction's program over a strided dim, its only configuration:
# 8 beat 4 (the first guess until then) in 10 of 11 shapes the autotune timed on an
# H200, us per launch, 8 / 4 warps: sum(0) fp32 [65536, 256] 19.6 / 22.2, [4096,
# 4096] 18.9 / 24.0, [16384, 1024] 19.2 / 27.6, [2048, 50257] (unsplit) 106.0 / 205.6,
# bf16 [4096, 4096] 12.6 / 15.7; softmax(0) fp32 [65536, 256] 22.8 / 23.5, [4096,
# 4096] 21.1 / 23.8, bf16 [16384, 1024] 22.4 / 21.8; x - x.mean(0) bf16 [8192, 4096]
# 22.2 / 31.9, fp32 [4096, 8192] 34.0 / 42.2; (x * 2).sum(0) fp32 [8192, 1024] 11.5 /
# 13.3. Untuned, it compiles once (for sm_90 here, softmax(0)'s kernel: 0.28 s, 0.44
# at 4 warps)
OUTER_WARPS = 8
# a cooperative program's first-guess slice of its row
COOP_SLICE_BYTES = 16 << 10
COOP_MAX_ROWS = 8
COOP_MIN_RNUMEL = 1 << 16


def dependent_launch(device: torch.device) -> bool:
    """Whether kernels for `device` take part in programmatic dependent launch
    (sm_90+, config.pdl): launched with programmatic stream serialization, a
    kernel may start while the kernel before it in the stream finishes, and
    waits for it (griddepcontrol.wait) before it touches memory, so its launch
    latency overlaps its predecessor's tail (H200, five queued calls of
    ceil/floor/sum/softmax [4096, 4096], 2 kernels: 174.0 -> 164.5 us)."""
    if not config.pdl or interpreting(device.type) or torch.cuda.get_device_capability(device)[0] < 9:
        return False
    from triton.language.extra import cuda

    return hasattr(cuda, "gdc_wait")  # Triton 3.4 and later


def pow2(n: int) -> int:
    return 1 << max(0, (max(n, 1) - 1).bit_length())


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclasses.dataclass
class Plan:
    reduction: bool
    persistent: bool = False
    tile: int | None = None  # pointwise 2-D: the flat x0 is tile * y0 + x0
    # the flat index walked in another order: a pointwise kernel's x0 in 1-D blocks
    # (common.choose_layout), a reduction's r0 (common.reduction_order)
    order: tuple | None = None
    split: int = 1  # reductions: programs per block of rows
    coop: bool = False  # reductions: a row's programs meet at barriers (see the module doc)
    window: bool = False  # reductions: windows slid by one, a step per window element (slides_by_one)
    # a persistent block's loads of rows up to PERSISTENT_MAX_RBLOCK long ask L2 to keep
    # them (evict_last), though each is read once. Measured, cause not established.
    # H200, us per call (do_bench) / back to back over inputs that outgrow L2: softmax
    # fp32 [8192, 4096] 69.0/66.8 -> 66.7/65.2, rms_norm 69.9/67.6 -> 67.4/65.8, bf16 2-4%.
    # Wider rows gain or lose up to 3% (layer_norm fp32 [4096, 12292] 114.3 -> 115.9);
    # evict_first instead was mixed (softmax [4096, 12292] 102.2 -> 107.1). Pointwise
    # loads take no hint: per call after an L2 flush, the hint cost the 10M-element
    # chains 3% (H200: sin 22.88 -> 22.18 us without, gelu_tanh 22.94 -> 22.34, bias+GELU
    # bf16 [8192, 4096] 43.04 -> 42.05) and changed none of x * 2 [8192, 4096] (65.9),
    # PointwiseModel [16384, 1024] (36.0 -> 36.2) or [1024, 1024] (5.66) beyond noise
    evict_last_streams: bool = False
    # it loads at indices read from memory, whose spread scratch inputs cannot
    # stand for (its candidates are timed on its first call's tensors)
    gathers: bool = False
    configs: list = dataclasses.field(default_factory=list)


def plan(kernel: FusedKernel, device: torch.device, itemsize: int, int64: bool = False) -> Plan:
    """`int64`: the kernel indexes with 64-bit integers (no cooperative form)."""
    gathers = any(e.args[2] for e in external_loads(kernel))
    p = _plan(kernel, device.type == "cuda", itemsize, int64, gathers)
    p.gathers = gathers
    if kernel.is_scatter:
        # a scatter's speed is where its indices point: scratch inputs (zero indices,
        # every update to one element) time contention alone, and it cannot run again
        # on its call's tensors. Its first guess, untimed (H200, scatter_reduce mean
        # (PyG): its two kernels' candidates took 1.24 and 6.21 ms each on scratch
        # inputs, the whole graph 0.12 ms a call)
        p.configs = p.configs[:1]
    return p


def _plan(kernel: FusedKernel, gpu: bool, itemsize: int, int64: bool, gathers: bool) -> Plan:
    if kernel.is_scan:
        return _scan_plan(kernel, gpu, itemsize)
    reduction = any(m.role == "reduction" for m in kernel.members)
    xn = kernel.xnumel
    if not reduction:
        layout, how = choose_layout(kernel) or (None, None)
        p = Plan(False, tile=how if layout == "tile" else None, order=how if layout == "order" else None)
        p.configs = _tiled_configs(xn // how, how, gpu, itemsize) if p.tile else _pointwise_configs(xn, gpu, itemsize, gathers)
        return p
    rn = max(kernel.rnumel, 1)
    order = reduction_order(kernel)
    inner = order is not None or _loads_reduce_contiguous(kernel)  # reduces_contiguous, the order found once
    rblock = pow2(rn)
    narrow = PERSISTENT_MAX_RBLOCK.get(min(itemsize, 8), 4096)  # rows any target holds in registers
    outer_limit = OUTER_PERSISTENT_MAX_RBLOCK if itemsize > 2 else NARROW_OUTER_PERSISTENT_MAX_RBLOCK
    limit = narrow if inner else outer_limit
    if gpu and inner and itemsize <= 4 and len(_row_inputs(kernel)) <= WIDE_PERSISTENT_MAX_INPUTS:
        limit = max(limit, WIDE_PERSISTENT_MAX_RBLOCK[itemsize])
        if _divides_r(kernel):
            limit = min(limit, max(narrow, DIVIDED_ROW_MAX_RBLOCK))
    # one pass over r reads each row once either way: long rows then loop, so
    # that the block size along r can be tuned (one iteration = persistent)
    one_pass = kernel.loops == 1
    # one program for the whole row: each step of a loop would wait on memory in turn
    # (H200, cross entropy's gather of one logit a row over 4096 rows: 11.6 us looped)
    single = gpu and inner and xn == 1 and rblock <= SINGLE_ROW_MAX_RBLOCK
    persistent = single or rblock <= limit and not (gpu and inner and one_pass and rblock >= LOOPED_MIN_RBLOCK)
    if persistent and gpu and inner and rn * itemsize > SHIFTED_PERSISTENT_MAX_BYTES and not int64:
        stride = row_stride(kernel, _row_indices(kernel))  # int64 kernels are never shifted
        persistent = stride is None or stride * itemsize % 16 == 0
    if not inner and rn <= WINDOW_MAX_STEPS and (slides_by_one(kernel) or walks_columns(kernel)):
        return Plan(True, window=True, configs=_window_configs(xn, rn, gpu, itemsize))
    p = Plan(True, persistent=persistent, order=order)
    if p.persistent:
        p.evict_last_streams = inner and rblock <= narrow
        p.configs = _persistent_configs(xn, rblock, inner, gpu, itemsize)
        return p
    if gpu and inner and kernel.loops > 1 and not int64 and cooperative_rows(xn, rn) and cooperates(kernel):
        p.coop = True
        p.configs = [dict(c, grid=xn * coop_slices(rn, c["RBLOCK"])) for c in _coop_configs(xn, rn, itemsize)]
        return p
    splittable = kernel.can_split(online_sums=not inner)  # as the scheduler decided it (_splits_rows_alone)
    configs = _looped_configs(xn, rn, inner, gpu, itemsize, wide=splittable, passes=kernel.loops)
    xblocks = cdiv(xn, configs[0]["XBLOCK"])
    iterations = rn // configs[0]["RBLOCK"]
    if splittable and _worth_splitting(xblocks, iterations, inner):
        # enough programs for SPLIT_WARPS_PER_SM resident warps: a looped reduction
        # hides memory latency with warps, not with pipelining
        programs = SM_COUNT * SPLIT_WARPS_PER_SM // configs[0]["num_warps"]
        p.split = max(1, min(cdiv(programs, xblocks), iterations // SPLIT_MIN_ITERATIONS))
        # no more partials than a step's RBLOCK where that keeps 7/8 of the programs:
        # the last program then combines them in the main loop's tile (see _partials_index)
        rb = min(c["RBLOCK"] for c in configs)
        if rb < p.split <= rb * 8 // 7:
            p.split = rb
    elif gpu and not inner and xn * rn >= AUTOTUNE_MIN_ELEMENTS:
        configs += _unsplit_outer_configs(configs[0], xn, rn, kernel.loops)
    p.configs = [dict(c, grid=cdiv(xn, c["XBLOCK"]) * p.split) for c in configs]
    return p


def _unsplit_outer_configs(first: dict, xn: int, rn: int, passes: int) -> list:
    """More candidates for a reduction over a strided dim whose column blocks fill
    the GPU unsplit: fewer rows a step, in lighter programs. Autotune timings, us,
    blocks of 64 columns, 8 or 16 rows x 4 warps against the first guess (32 x 8):
    H200, mean(1) bf16 [64, 4096, 1024] 118.5 / 118.7 against over 120.6; H100,
    the same 174.1 / 173.6 against 181.1, fp32 347.4 against 356.3, sum(0) fp32
    [2048, 50257] 145.1 against 171.2 (Inductor, per call, 176.6, 350.6, 159.2).
    A kernel that reads its block again (`passes` loops over r: a softmax, a
    variance) also times programs of 32 warps: fewer of them share an SM, and
    their blocks stay in L2 until the next pass (H200, per call, best of these
    against the first guess's: layer_norm(x.t()) [4096, 4096] fp32 78.6 (8 x 512)
    against 86.9, bf16 51.1 (16 x 128) against 67.6; softmax(1) [64, 512, 1000]
    fused fp32 85.6 (32 x 64) against 118.8)."""
    out = [dict(first, RBLOCK=8, num_warps=4), dict(first, RBLOCK=16, num_warps=4)]
    if passes > 1:
        out += [dict(first, XBLOCK=xb, RBLOCK=rb, num_warps=32) for xb, rb in ((8, 512), (16, 128), (32, 64))
                if xb <= pow2(xn) and rb <= pow2(rn)]
    return out


def _scan_plan(kernel: FusedKernel, gpu: bool, itemsize: int) -> Plan:
    """A scan holds rows that fit in registers as one block (scanned at once);
    longer ones step along them, carrying the running value from step to step.
    Rows along a strided dim step in blocks of contiguous columns."""
    xn, rn = kernel.xnumel, kernel.rnumel
    rblock = pow2(rn)
    inner = reduces_contiguous(kernel)
    limit = PERSISTENT_MAX_RBLOCK.get(min(itemsize, 8), 4096) if inner else OUTER_PERSISTENT_MAX_RBLOCK
    sort = any(m.node.buffer.reduction_type in SORTS for m in kernel.members)
    if rblock <= limit or sort:  # a sort holds its row (the lowering keeps it short)
        return Plan(True, persistent=True, configs=[_persistent_config(xn, rblock, inner, gpu, itemsize, short_rows=False)])
    if not gpu:
        rb = min(rblock, 1024)
        xb = max(1, min(pow2(xn), (1 << 14) // rb))
        return Plan(True, configs=[dict(XBLOCK=xb, RBLOCK=rb, num_warps=1, grid=cdiv(xn, xb))])
    if inner:
        rb = min(rblock, 8192 // itemsize)
        cfg = dict(XBLOCK=1, RBLOCK=rb, num_warps=_warps(rb, itemsize))
    else:
        xb = _fill(xn, outer_width(xn), 8)
        cfg = dict(XBLOCK=xb, RBLOCK=outer_rblock(xb), num_warps=OUTER_WARPS)
    return Plan(True, configs=[dict(cfg, num_stages=1, grid=cdiv(xn, cfg["XBLOCK"]))])


# -- pointwise ---------------------------------------------------------------------------------


def _pointwise_configs(xn: int, gpu: bool, itemsize: int, gathers: bool = False) -> list:
    """`gathers`: the kernel loads at indices it reads from memory."""
    if not gpu:  # the interpreter pays per op and per program: few, big programs
        xb = min(pow2(xn), 1 << 16)
        return [dict(XBLOCK=xb, num_warps=1, grid=cdiv(xn, xb))]
    def cfg(xb, warps):
        return dict(XBLOCK=xb, num_warps=warps, num_stages=1, grid=cdiv(xn, xb))

    xb = 1024 * max(1, 4 // itemsize)  # 32 bytes per thread and access with POINTWISE_WARPS
    # a grid too small to fill every SM's warp slots takes 16 bytes a thread:
    # twice the warps in flight (H200, per call: PointwiseModel [1024, 1024] 6.34
    # -> 5.66 us, [256, 1024] 5.12 -> 4.48), while bigger ones keep 32 (bias_gelu
    # [8192, 4096] fp32 67.0 -> 69.7 us with 16, bf16 50.1 -> 54.5)
    if cdiv(xn, xb) * POINTWISE_WARPS < SM_COUNT * SM_MAX_WARPS:
        xb //= 2
    while xb > 128 and cdiv(xn, xb) < SM_COUNT:
        xb //= 2
    xb = min(xb, pow2(xn))
    out = [cfg(xb, _warps(xb, itemsize, lo=1, hi=POINTWISE_WARPS, thread_bytes=16))]
    # big kernels also time half the block, 16 bytes a thread: kernels that read
    # some elements twice (rope's shifted halves) run faster so (H200, per call:
    # rope [8, 32, 2048, 128] bf16 69.2 -> 67.8 us; with the hint on such loads, see
    # TritonKernel._load, 66.7; Inductor 67.0-67.2). Twice the block ran no faster (H100)
    if xn >= AUTOTUNE_MIN_ELEMENTS and xb >= 256:
        out.append(cfg(xb // 2, _warps(xb // 2, itemsize, lo=1, hi=POINTWISE_WARPS, thread_bytes=8)))
    # gathers whose indices spread over a region (grid_sample's corners over a
    # channel's plane, index_select's columns over a row) hit in L1 when one
    # program covers much of the region: big programs of many warps. H100, real
    # data, us per call after an L2 flush, the two candidates above -> 4096 x 32
    # warps (Inductor): grid_sample [16, 64, 128, 128] bilinear fp32 270.4 -> 122.4
    # (186.4), bf16 193.8 -> 106.4 (148.2), nearest fp32 114.7 -> 79.4 (111.0);
    # index_select(1) [4096, 8192] -> 4096 fp32 116.5 -> 79.8 (112.1); gather(1)
    # [4096, 8192] fp32 244.5 -> 188.9 (235.5). 16 warps were no faster (index_select
    # 78.1) and spilled (20 local accesses, grid_sample fp32, Triton 3.6); embedding
    # rows keep the candidates above (4096 x 32: 59.5 against 51.5)
    if gathers and xn >= AUTOTUNE_MIN_ELEMENTS:
        out += [cfg(xb, w) for xb, w in GATHER_CONFIGS if xb <= pow2(xn)]
    return out


def masks_last_block_only(xn: int, configs: list, itemsize: int) -> bool:
    """A 1-D kernel over a length that is not a multiple of a 16-byte vector of its
    narrowest type (`itemsize`) runs its full blocks unmasked and masks only its
    last one: Triton cannot prove `xindex < xnumel` the same across such a vector
    then, so it would load and store in narrower pieces, down to every element
    alone, each thread's at a stride of its elements. H200, per call: bf16
    F.pad(x, (3, 5, 1, 0), value=2) * 3 [8192, 4091] 100.6 -> 39.7 us (Inductor
    58.2; bench.gpu --set more). Standalone kernels of x * 3 [8193, 4099]: bf16
    125.4 -> 36.8 (eager 37.5, Inductor 57.4); fp32 68.4 -> 68.2 at 4 elements a
    thread, 93.1 -> 69.0 at 8. Kernels of one block, or short enough that their
    launch outweighs their accesses, keep one body, which compiles faster."""
    return xn % (16 // itemsize) != 0 and xn > MASKED_TAIL_MIN_ELEMENTS and min(c["grid"] for c in configs) > 1


def _tiled_configs(yn: int, xn: int, gpu: bool, itemsize: int) -> list:
    def cfg(yb, xb, w):
        yb, xb = min(yb, pow2(yn)), min(xb, pow2(xn))
        return dict(YBLOCK=yb, XBLOCK=xb, num_warps=w, num_stages=1, grid=cdiv(yn, yb) * cdiv(xn, xb))

    if not gpu:
        return [cfg(64, 64, 1)]
    out = [cfg(64, 64, 8)]
    if yn * xn >= AUTOTUNE_MIN_ELEMENTS:
        # tall tiles won over odd sizes, whose rows no vector can read (H200, us per call,
        # 64x64x8 / 128x32x4 / 256x16x4: x.t() + y [4099, 4097] bf16 43.1 / 40.6 / 39.8,
        # fp32 63.5 / 64.6 / 61.7); 32x128x8 over x.t().contiguous() [4097, 4099] (fp32
        # 49.2 against 44.2); 32x32x4 won none of eight transposes
        out += [cfg(128, 32, 4), cfg(256, 16, 4), cfg(32, 128, 8)]
    return out


# -- reductions -----------------------------------------------------------------------------------


def _row_inputs(kernel: FusedKernel) -> set:
    """The buffers a kernel reads along r (whole rows of them live at once when persistent)."""
    return {e.args[0] for e in external_loads(kernel) if R in e.args[1].free_symbols}


def _divides_r(kernel: FusedKernel) -> bool:
    """Whether a load's index takes r only through divisions: a value held for
    stretches of the row, as group norm's per-channel weight (not a row of a view,
    whose index also takes r's remainder)."""
    def held(index) -> bool:
        parts = [f for f in index.atoms(FloorDiv, ModularIndexing) if R in f.free_symbols]
        if not parts or any(isinstance(f, ModularIndexing) and f.args[1] == 1 for f in parts):
            return False
        return R not in index.subs({f: 0 for f in parts}).free_symbols

    return any(held(e.args[1]) for e in external_loads(kernel))


def _row_indices(kernel: FusedKernel) -> list | None:
    """The index of each access along r; None when one is indirect."""
    if any(e.args[2] and R in sympy.expand(e.args[1]).free_symbols for e in external_loads(kernel)):
        return None
    return walking_indices(kernel, R)


def row_stride(kernel: FusedKernel, indices: list | None) -> int | None:
    """S when the kernel walks rows of S elements: every access along r (`indices`;
    None: one is indirect) is r0 + S * x0. Else None. (A value of r0 itself, an
    iota along r, is the position in the row either way.)"""
    strides = set()
    for idx in indices or ():
        stride = idx.coeff(X)
        if idx != R + stride * X or not stride.is_Integer:
            return None
        strides.add(int(stride))
    return strides.pop() if len(strides) == 1 else None


def reduces_contiguous(kernel: FusedKernel) -> bool:
    """True when the reduced dim is the contiguous one in most of the loads that
    decide the layout (scheduler.layout_deciding), or when the reduction walks its
    dims in an order that makes it so (common.reduction_order)."""
    return reduction_order(kernel) is not None or _loads_reduce_contiguous(kernel)


def _loads_reduce_contiguous(kernel: FusedKernel) -> bool:
    """reduces_contiguous's vote of the loads, in the logical order of r0."""
    walks = layout_deciding([sympy.expand(e.args[1]) for e in external_loads(kernel)])
    return sum(1 if i.coeff(R) == 1 else -1 for i in walks) >= 0


def outer_rblock(xb: int) -> int:
    """Rows per step of a looped reduction over a strided dim, in blocks of xb columns."""
    return max(4, 2048 // xb)


def splits_outer_rows(xn: int, rn: int) -> bool:
    """Whether a splittable reduction over a strided dim, xn columns of rn rows,
    splits its rows across programs: too few outer_width blocks to fill the
    GPU, and rows long enough (as plan() decides it)."""
    xb = outer_width(xn)
    return _worth_splitting(cdiv(xn, xb), rn // outer_rblock(xb), inner=False)


def outer_width(xn: int) -> int:
    """Columns in a block of a looped reduction over a strided dim (see OUTER_XBLOCK)."""
    if cdiv(xn, OUTER_WIDE_XBLOCK) >= split_blocks(inner=False):
        return OUTER_WIDE_XBLOCK
    return min(pow2(xn), OUTER_XBLOCK)


def split_blocks(inner: bool) -> int:
    """Blocks of rows too few to fill the GPU, under which a looped reduction
    splits them. Blocks of strided columns: two an SM. Rows along the contiguous
    dim: one an SM, as a program per row streams it at full speed from there on
    (H200, per call, split against not: group_norm 8 groups [32, 256, 56, 56],
    256 rows of 100352, fp32 87.9 -> 84.8 us, bf16 65.1 -> 63.1; layer_norm
    [160, 100352] 54.9 -> 53.3, [256, 100352] 83.8 -> 80.4; sum [256, 100352]
    35.2 -> 31.4, [200, 65536] 20.1 -> 18.6)."""
    return SM_COUNT if inner else 2 * SM_COUNT


def _worth_splitting(xblocks: int, iterations: int, inner: bool) -> bool:
    """Too few blocks of rows to fill the GPU, each with loop iterations enough to share."""
    return xblocks < split_blocks(inner) and iterations >= 2 * SPLIT_MIN_ITERATIONS


def _fill(xn: int, xb: int, floor: int) -> int:
    """Fewer rows per program while the grid is too small to fill the GPU."""
    while xb > floor and cdiv(xn, xb) < 2 * SM_COUNT:
        xb //= 2
    return xb


def _warps(elems: int, itemsize: int, lo: int = 2, hi: int = 16, thread_bytes: int = 64) -> int:
    """Warps for a block of `elems`, each thread loading about `thread_bytes`."""
    return min(hi, max(lo, elems * itemsize // (32 * thread_bytes)))


def _persistent_configs(xn: int, rblock: int, inner: bool, gpu: bool, itemsize: int) -> list:
    first = _persistent_config(xn, rblock, inner, gpu, itemsize)
    if not (gpu and xn * rblock >= AUTOTUNE_MIN_ELEMENTS):
        return [first]
    if not inner:
        return _outer_persistent_configs(xn, first)
    # the best warps and rows per program depend on the kernel's registers and on
    # the GPU's bandwidth. Rows of 16K or more also time half and twice the warps
    # (H100, [4096, 12289]: layer_norm fp32 143 us with 16 warps, 154 with 32;
    # softmax fp32 183 and 156; rms_norm bf16 80 with 8, 106 with 16), up to 64
    # elements per thread; a program of several shorter rows also times half the
    # rows (H200, [8192, 4096] bf16: softmax 40.1 us with 2 rows of 8 warps, 36.9
    # with 1 row). Each candidate costs a compile, about 0.1-0.2 s: twice the warps
    # over one shorter row gained at most 2.4% on an H200 (layer_norm fp32 70.8 ->
    # 69.1 us), and is not tried
    w, xb = first["num_warps"], first["XBLOCK"]
    warps = (w // 2, 2 * w) if rblock >= 16384 else ()
    out = [first] + [dict(first, num_warps=n) for n in warps if n <= 32 and xb * rblock <= 64 * 32 * n]
    if SHORT_ROWS[1] < rblock <= 8192 and w > 4:
        # one row in 4 warps (layer_norm's backward: H200, fwd+bwd [8192, 4096] bf16
        # 97.1 -> 76.7 us, [4096, 8192] bf16 kernels 34.4 -> 26.8)
        out.append(dict(first, XBLOCK=1, num_warps=4, grid=xn))
    if xb > 1:
        out.append(dict(first, XBLOCK=xb // 2, grid=cdiv(xn, xb // 2)))
    return out


def slides_by_one(kernel: FusedKernel) -> bool:
    """Whether the kernel reduces windows slid by one element along x (max_pool2d
    or avg_pool2d at stride 1): it stores at x0 and loads at x0 plus an offset of r
    that spans less than x, so neighbouring outputs read mostly the same elements
    and each element of the window, over a block of x, is one contiguous vector.
    Such a kernel steps over the window an element at a time (unrolled), in wide
    blocks of x, and its loads take no L2 hint (the next block reads them again).
    H200, do_bench per call, us, stepped / a persistent block of [256-512, 16] /
    Inductor: max_pool2d 3x3 stride 1 [32, 256, 28, 28] bf16 26.7 / 32.0 / 27.7,
    fp32 27.5 / 29.5 / 26.5; [32, 64, 112, 112] bf16 90.5 / 112.3 / 91.7, fp32
    92.2 / 100.5 / 89.4; [8, 96, 57, 55] bf16 15.2 / 15.9 / 15.3, fp32 15.1 / 15.0
    / 15.1; 5x5 [32, 128, 28, 28] bf16 28.1 / 41.2 / 77.1; avg_pool2d 3x3 [32,
    256, 28, 28] bf16 32.8 / 40.6 / 27.3; max_pool2d(x.relu()) fp32 33.7 / 36.1 /
    36.0. At stride 2 the windows' loads are strided: persistent blocks.
    A loop with runtime steps rather than unrolled ran slower (bf16 [32, 64, 112,
    112] 96.2 against 90.4 in the same blocks)."""
    loads = external_loads(kernel)
    if any(e.args[2] for e in loads) or any(sympy.expand(m.store_index) != X for m in kernel.members if m.stored):
        return False
    ranges = {X: kernel.xnumel, R: kernel.rnumel}
    walks = [fold_divmod(simplify_with_ranges(unclamp(e.args[1], ranges)[0], ranges)) for e in loads]
    offsets = [sympy.expand(i) - X for i in walks if {X, R} <= i.free_symbols]
    for offset in offsets:
        spread = upper_bound(offset.as_coeff_Add()[1], {R: kernel.rnumel})
        if X in offset.free_symbols or spread is None or spread >= kernel.xnumel:
            return False
    return bool(offsets)


def walks_columns(kernel: FusedKernel) -> bool:
    """Whether each of the kernel's accesses along r walks x contiguously, as a
    reduction over the few strided rows of a column does (softmax(1) over 21
    classes of [N, 21, H, W]): stepped a row at a time (unrolled, as a window), a
    block of x reads each row as one contiguous vector and the reduction stays in
    each thread, where a persistent [XBLOCK, RBLOCK] block spread its rows over
    threads and warps. H200, per call, us, persistent / stepped (two runs):
    log_softmax(1) [8, 21, 512, 512] bf16 159.3 / 59.4-59.8 (eager 133.9), fp32
    100.3 / 102.2-103.5; softmax(1) [32, 16, 128, 128] bf16 43.3 / 18.6-20.3, fp32
    29.5 / 24.0-25.8; sum(1) [64, 16, 65536] bf16 157.6 / 42.5-43.0 (eager 49.8),
    fp32 76.9 / 74.6-75.4. A pooling window at stride 2 reads x two elements apart
    and keeps its persistent blocks (max_pool2d 3x3 [32, 64, 112, 112] bf16 32.9 /
    44.3)."""
    loads = external_loads(kernel)
    if any(e.args[2] for e in loads):
        return False
    indices = [sympy.expand(e.args[1]) for e in loads]
    indices += [sympy.expand(m.store_index) for m in kernel.members if m.stored]
    along = [i for i in indices if {X, R} <= i.free_symbols]
    last = kernel.xnumel - 2

    def step(i, x: int):
        at = {s: 0 for s in i.free_symbols if s not in (X, R)} | {R: 0}
        return i.xreplace(at | {X: x + 1}) - i.xreplace(at | {X: x})

    return bool(along) and kernel.xnumel > 1 and all(step(i, 0) == 1 and step(i, last) == 1 for i in along)


def _window_configs(xn: int, rn: int, gpu: bool, itemsize: int) -> list:
    """Blocks of x for a window slid by one (slides_by_one), one element of it a
    step, 8 bytes a thread: 16 ran slower in float32 (H200, do_bench, max_pool2d
    3x3 stride 1 [32, 64, 112, 112] fp32: 129.3 us against 90.9; bf16 at 8 bytes
    90.4), and the candidates' timings were within 4% of each other."""
    def cfg(xb):
        xb = min(xb, pow2(xn))
        return dict(XBLOCK=xb, RBLOCK=1, num_warps=min(16, max(1, xb * itemsize // (32 * 8))), num_stages=1,
                    grid=cdiv(xn, xb))

    if not gpu:
        return [dict(cfg(1 << 14), num_warps=1)]
    return [cfg(512)] + ([cfg(1024)] if xn * rn >= AUTOTUNE_MIN_ELEMENTS else [])


def _outer_persistent_configs(xn: int, first: dict) -> list:
    """Candidates for a short strided dim (a pooling window at a stride over 1):
    blocks of the first guess's rows and twice as many, at 32 elements a thread
    (H200, max_pool2d 3x3 kernel alone, us, first guess / best: stride 2 [32, 64,
    112, 112] fp32 42.0 / 41.0 at 512 rows, bf16 34.4 / 33.7 at 512 rows in 8
    warps). 64 a thread spill registers there (sm_90, Triton 3.6: 60-106 local
    memory accesses) and are not tried."""
    out = [first]
    for xb in (first["XBLOCK"], 2 * first["XBLOCK"]):
        warps = max(1, xb * first["RBLOCK"] // (32 * 32))
        if xb <= pow2(xn) and warps <= 16 and (xb, warps) not in [(c["XBLOCK"], c["num_warps"]) for c in out]:
            out.append(dict(first, XBLOCK=xb, num_warps=warps, grid=cdiv(xn, xb)))
    return out


def _persistent_config(xn: int, rblock: int, inner: bool, gpu: bool, itemsize: int, short_rows: bool = True) -> dict:
    """`short_rows`: SHORT_ROWS take their programs (measured on reductions, not on scans or sorts)."""
    if not gpu:
        xb = max(1, min(pow2(xn), (1 << 14) // rblock))
        return dict(XBLOCK=xb, RBLOCK=rblock, num_warps=1, grid=cdiv(xn, xb))
    if inner and short_rows and SHORT_ROWS[0] <= rblock <= SHORT_ROWS[1]:
        xb = _fill(xn, max(1, min(pow2(xn), SHORT_ROW_PROGRAM // rblock)), 1)
        return dict(XBLOCK=xb, RBLOCK=rblock, num_warps=4, num_stages=1, grid=cdiv(xn, xb))
    if inner:
        xb = _fill(xn, max(1, min(pow2(xn), (16384 // itemsize) // rblock, 64)), 1)
        # float32: about 32 bytes a thread (H200, [8192, 4096] fp32: layer_norm 71.0 us
        # with 8 warps, 69.2 with 16; softmax and rms_norm equal); 16-bit: 64 bytes
        # (bf16 rows of 4096: softmax 36.9 us with 8 warps, 44.8 with 16)
        warps = _warps(xb * rblock, itemsize, thread_bytes=32 if itemsize >= 4 else 64)
    else:  # a short strided dim: wide in x, so each row of the block is coalesced
        xb = _fill(xn, max(1, min(pow2(xn), 4096 // rblock, 1024)), 8)
        warps = _warps(xb * rblock, itemsize, hi=8)
    return dict(XBLOCK=xb, RBLOCK=rblock, num_warps=warps, num_stages=1, grid=cdiv(xn, xb))


def cooperates(kernel: FusedKernel) -> bool:
    """Whether every reduction of the kernel can combine partial results over a
    row's slices (not argmax: positions would need the slices' offsets)."""
    return all(m.node.buffer.reduction_type in ir.REDUCED_IN_PARTS for m in kernel.members if m.role == "reduction")


def cooperative_rows(xn: int, rn: int) -> bool:
    """A handful of very long rows: otherwise a program per row leaves most of
    the GPU idle, or a split pass and a second kernel read the rows twice. With
    more rows, programs wait at the barriers for slices that have yet to start,
    and with shorter ones a program per row keeps up. H200, per call, L2 flushed,
    cooperative against the other forms: softmax [1, 262144] fp32 11.8 against
    46.3 us, [8, 128256] fp32 13.5 against 26.5, bf16 12.5 against 23.3;
    log_softmax [3, 100003] fp32 13.4 against 29.6; layer_norm [5, 70001] bf16
    13.6 against 24.6; but softmax [8, 50257] fp32 24.8 against 19.4, layer_norm
    [16, 250007] fp32 27.9 against 24.8, softmax [2048, 50257] fp32 442-480
    against 274. Nor does a persistent form (groups of programs that loop over
    the rows, one barrier a row, the partial max and sum combined online; with
    or without loading the next row's slice before the barrier): H200, softmax
    [2048, 50257] over slices of 2048-16384 elements, 4-16 warps, 2-16 programs
    an SM: fp32 404-1290 us, bf16 408-1404, against 235 and 141 looped."""
    return xn <= COOP_MAX_ROWS and rn >= COOP_MIN_RNUMEL


def coop_slices(rn: int, rblock: int, pad: int = 0) -> int:
    """Programs per row of a cooperative reduction; `pad`: elements walked
    before the row's first one (rows from their 16-byte boundary)."""
    return cdiv(rn + pad, rblock)


def _coop_configs(xn: int, rn: int, itemsize: int) -> list:
    """Slices of about COOP_SLICE_BYTES held by threads of 64 bytes each; on big
    kernels also half and twice that, at least two slices a row."""
    def cfg(rb):
        return dict(XBLOCK=1, RBLOCK=rb, num_warps=_warps(rb, itemsize, lo=1, hi=32), num_stages=1)

    rb = min(COOP_SLICE_BYTES // itemsize, pow2(rn) // 2)
    sizes = [rb] + ([rb // 2, rb * 2] if xn * rn >= AUTOTUNE_MIN_ELEMENTS else [])
    return [cfg(b) for b in sizes if 256 <= b <= pow2(rn) // 2] or [cfg(rb)]


def _looped_configs(xn: int, rn: int, inner: bool, gpu: bool, itemsize: int, wide: bool, passes: int = 1) -> list:
    """`wide`: a split will fill the GPU, so strided reductions can take wide
    blocks of contiguous x (long bursts) rather than more, narrower ones.
    `passes`: loops over each row (softmax: 2)."""
    def cfg(xb, rb, w):
        return dict(XBLOCK=xb, RBLOCK=rb, num_warps=w, num_stages=1)

    if not gpu:
        rb = min(pow2(rn), 1024)
        return [cfg(max(1, min(pow2(xn), (1 << 14) // rb)), rb, 1)]
    big = xn * rn >= AUTOTUNE_MIN_ELEMENTS
    if inner and passes > 1:
        # a row read again by a later loop: few, wide programs keep it in L2 until
        # then and keep many loads in flight. The best step varies with the row
        # (H100, softmax over [2048, 50257]: fp32 8192 x 32 warps 369 us, 4096 x 32
        # 502 us, 2048 x 4 warps 704 us; bf16 2048 x 32 warps 222 us, 4096 x 32 236,
        # 8192 x 32 260; over 12289: 2048 x 8 bf16, x 16 fp32): an eighth to a
        # sixteenth of the row, 4 or 8 elements per thread, and steps of 2 elements a
        # thread: a sixteenth of the row in fp32, a thirty-second in bf16 (H200, fp32
        # softmax [4096, 12289]: 1024 x 16 warps 110.8 us, 2048 x 16 129; [2048,
        # 25087]: 2048 x 32 119.9, 2048 x 16 132.1); and a quarter of the eighth at 2 a
        # thread (H200, per call, softmax fp32 [2048, 50257], rows walked from their
        # 16-byte boundary: 2048 x 32 warps 235.4 us, 4096 x 32 256.0). Measured and
        # left out (H200, do_bench, our kernel over [2048, 50257]): num_stages 2-4 (the
        # best step of each dtype within 1%); whole-vector loads and stores in a
        # shifted row's edge blocks (4096 x 32 bf16 167.0 -> 135.6 us, fp32 258.1 ->
        # 240.4, against 139.1 and 234.1 for 2048 x 32, which it does not speed up);
        # two rows a program (bf16 152.6). The bf16 kernel moves 58% of peak DRAM
        # bandwidth with 69% of its issue slots busy (ncu). Also left out (H200,
        # do_bench, Triton 3.6, against 2048 x 32: bf16 140.5, fp32 233.9 us):
        # capping registers so two 1024-thread programs share an SM (maxnreg 32:
        # 4096 x 32 bf16 167.3 -> 196.8, 2048 x 32 fp32 -> 288.0); the loop's
        # loads pipelined through shared memory (tl.range num_stages 2-4, cp.async:
        # bf16 192.8-293.8, fp32 316.1-448.2); the next step's load issued before
        # this step's math (bf16 161.3, fp32 288.1); the online sum without its
        # all -inf guard, its max starting at -FLT_MAX (bf16 155.3, fp32 233.7)
        def step(rb, per_thread):
            return cfg(1, rb, min(32, max(4, rb // (32 * per_thread))))

        eighth = min(pow2(rn) // 8, MULTIPASS_STEP_BYTES // itemsize)
        out = [step(eighth, 8)]
        if big:
            out += [step(max(1, eighth // 2), 4), step(eighth, 4)]
            out += [step(max(1, eighth * itemsize // 8), 2)] if itemsize <= 4 else []
            out += [step(max(1, eighth // 4), 2)]
        return [c for i, c in enumerate(out) if c not in out[:i]]
    if inner:
        # a kernel that may split keeps several accumulators per row: more, lighter
        # threads (on an H100, GroupNorm's statistics ran 57 -> 45 us)
        tb = 32 if wide else 64
        rb = min(pow2(rn), 8192 // itemsize)
        out = [cfg(1, rb, _warps(rb, itemsize, thread_bytes=tb))]
        if big:
            out.append(cfg(1, rb // 2, _warps(rb // 2, itemsize, thread_bytes=tb)))
            if rb * 2 <= pow2(rn):
                out.append(cfg(1, rb * 2, _warps(rb * 2, itemsize, thread_bytes=tb)))
        return out
    # rows of x are contiguous: blocks of outer_width columns (see OUTER_XBLOCK),
    # 2048 elements a step. Blocks of 128 x 16 ran slower (H200, sum(0) fp32
    # [65536, 256] 47.9 us against 25.6; 64 x 16 with 2 warps 36.9)
    xb = outer_width(xn) if wide else _fill(xn, outer_width(xn), 8)
    return [cfg(xb, outer_rblock(xb), OUTER_WARPS)]
