"""The `fusion` fixture, and the per-test state behind it.

Every call of something compiled here (fusion.run, fusion.compile, and
torch.compile inside a test with a fusion marker) runs inside compiler.capture(),
so the test's records are exactly what its calls compiled. The first call of
each compiled function is kept (its inputs cloned) and measured: at once by
fusion.run, after the test body otherwise.
"""
from __future__ import annotations

import collections
import contextlib
import copy
import functools
import logging
import statistics
import time
import warnings
import zlib

import pytest
import torch
import torch.utils._pytree as pytree

import compiler

from . import markers
from .machine import resolve_device, worker_index
from .measure import MeasureError, Measurement, Target, measure, ncu, nvml, peak_bandwidth_gbps
from .settings import Settings

REAL_COMPILE = torch.compile
STATE = pytest.StashKey["Fusion"]()
SETTINGS = pytest.StashKey[Settings]()
TIMING_SKIP = pytest.StashKey["str | None"]()  # set per session: why timing is untrustworthy here

# (rtol, atol) of the comparison with eager, before --fusion-tolerance-scale
TOLERANCES = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (5e-2, 1e-2),
    torch.complex64: (1e-4, 1e-5),
    torch.complex128: (1e-7, 1e-7),
}


def _alike(a, b) -> bool:
    """Whether two results are the same, bit for bit (NaN equal to NaN)."""
    xs, ys = pytree.tree_leaves(a), pytree.tree_leaves(b)
    return len(xs) == len(ys) and all(
        torch.equal(x, y) or x.dtype.is_floating_point and torch.allclose(x, y, rtol=0, atol=0, equal_nan=True)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else x == y for x, y in zip(xs, ys))


def _clone(tree):
    """Copies of the tensors in `tree`, aliasing kept, parameters shared (module state)."""
    memo: dict[int, torch.Tensor] = {}

    def one(x):
        if not isinstance(x, torch.Tensor) or isinstance(x, torch.nn.Parameter):
            return x
        if id(x) not in memo:
            memo[id(x)] = x.detach().clone().requires_grad_(x.requires_grad)
        return memo[id(x)]

    return pytree.tree_map(one, tree)


def _float64_copy(x):
    """A copy of tensor `x`, in float64 if it is floating: fn may write to its
    inputs, and those of a first call are kept for measuring."""
    if not isinstance(x, torch.Tensor):
        return x
    return x.detach().to(torch.float64, copy=True) if x.is_floating_point() else x.detach().clone()


def _float64_result(fn, args):
    """`fn` on float64 copies of the floating tensors in `args` (and of a module's
    parameters): the flattened outputs, or None where `fn` does not run so."""
    try:
        if isinstance(fn, torch.nn.Module):
            fn = copy.deepcopy(fn).double()
        return pytree.tree_flatten(fn(*pytree.tree_map(_float64_copy, args)))[0]
    except Exception:  # float64 is a tie-break; without it the mismatch stands
        return None


def _exact_output(exact: list | None, i: int, like) -> torch.Tensor | None:
    """Output `i` of the float64 result, where it can stand for a floating `like`."""
    if exact is None or i >= len(exact) or not isinstance(like, torch.Tensor) or like.dtype == torch.float64:
        return None
    ref = exact[i]
    if not (isinstance(ref, torch.Tensor) and ref.is_floating_point() and like.is_floating_point() and ref.shape == like.shape):
        return None
    return ref


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.double() - b).abs().nan_to_num(0.0).max().item() if a.numel() else 0.0


class _Compiled:
    """One compiled callable of the test: what to call and what it replaces."""

    def __init__(self, name: str, compiled, eager):
        self.name = name
        self.compiled = compiled
        self.eager = eager
        self.target: Target | None = None  # its first call
        self.ran: list[compiler.GraphRecord] = []  # the graphs its first call ran, once per run
        self.measured = False


class Fusion:
    """The `fusion` fixture. Inputs on `device`, `compile`, `run`, and what the test's
    compiled calls produced: `graphs`, `kernels`, `externs`, `fallbacks`,
    `graph_breaks`, `records` (measurements) and `metrics`."""

    def __init__(self, item, settings: Settings, device: torch.device, timing_skip: str | None,
                 ncu_path: str | None = None):
        self.nodeid = item.nodeid
        self.config = item.config
        self.trace_dir = _trace_dir(item.config)
        self.settings = settings
        self.device = device
        self.backend = settings.backend
        self.gates = markers.gates_of(item)
        self.timing_off = "--fusion-no-perf" if settings.no_perf else None
        self.timing_skip = timing_skip
        self.ncu_child = item.config.getoption("fusion_ncu_child")  # this process runs under ncu
        self.ncu_path = ncu_path  # --fusion-ncu on CUDA: the ncu that measures DRAM bytes
        self.dram_bytes: dict | None = None
        self.graphs: list[compiler.GraphRecord] = []
        # per eager function, each graph break as often as one compile of it met it
        self._breaks: dict[int, collections.Counter] = {}
        self.records: list[Measurement] = []
        self.error: str | None = None  # a failure to measure
        self.verdict = None
        self.final_metrics: dict | None = None  # metrics as the gates saw them
        self._compiled: list[_Compiled] = []
        self._inductor_kernels = 0
        self._inductor_bytes = 0
        self._depth = 0
        self._closed = False

    # -- inputs on the device (random data: never zeros) -------------------------------
    def randn(self, *size, dtype=None, requires_grad=False) -> torch.Tensor:
        return torch.randn(*size, dtype=dtype, device=self.device, requires_grad=requires_grad)

    def rand(self, *size, dtype=None, requires_grad=False) -> torch.Tensor:
        return torch.rand(*size, dtype=dtype, device=self.device, requires_grad=requires_grad)

    def randint(self, low, high, size, dtype=torch.int64) -> torch.Tensor:
        return torch.randint(low, high, tuple(size), dtype=dtype, device=self.device)

    def randn_like(self, t: torch.Tensor) -> torch.Tensor:
        return torch.randn(t.shape, dtype=t.dtype, device=self.device)

    def ones(self, *size, dtype=None) -> torch.Tensor:
        return torch.ones(*size, dtype=dtype, device=self.device)

    def tensor(self, data, dtype=None) -> torch.Tensor:
        return torch.tensor(data, dtype=dtype, device=self.device)

    # -- compiling ---------------------------------------------------------------------------
    def compile(self, fn):
        """`fn` compiled with the session's backend (dynamic=False); its calls are recorded
        and its first call is measured after the test."""
        return self._wrap(REAL_COMPILE(fn, backend=self.backend, dynamic=False), fn)

    def run(self, fn, *args, check: bool = True, rtol: float | None = None, atol: float | None = None):
        """Compile `fn`, call it on `args`, compare with eager on the same inputs, measure.
        Returns the compiled output."""
        handle = self._handle(REAL_COMPILE(fn, backend=self.backend, dynamic=False), fn)
        expected = fn(*_clone(args)) if check else None
        out = self._call(handle, args, {})
        if check:
            first = handle.target  # its inputs as they were before the compiled call; None when nested
            exact = functools.cache(lambda: _float64_result(fn, first.args) if first else None)
            try:
                self._compare(out, expected, rtol, atol, exact=exact)
            except AssertionError as e:
                if first and not _alike(expected, fn(*_clone(first.args))):
                    raise AssertionError(
                        f"{e}\nfusion.run: eager's own calls differ from one another: the function draws random "
                        "numbers (dropout, rand), which compiled code draws otherwise. Pass check=False, and "
                        "assert what must hold of its result") from None
                raise
        self._measure(handle)
        return out

    def _route(self, model, kwargs: dict):
        """torch.compile(model, **kwargs) inside a marked test: our backend, static shapes."""
        kwargs = dict(kwargs, backend=self.backend, dynamic=False)
        if self.backend == "fusion":
            kwargs.pop("mode", None)
            kwargs.pop("options", None)
        compiled = REAL_COMPILE(model, **kwargs)
        return compiled if kwargs.get("disable") else self._wrap(compiled, model)

    def _handle(self, compiled, eager) -> _Compiled:
        name = getattr(eager, "__qualname__", None) or type(eager).__name__
        handle = _Compiled(name, compiled, eager)
        self._compiled.append(handle)
        return handle

    def _wrap(self, compiled, eager):
        if isinstance(compiled, torch.nn.Module):  # OptimizedModule: record through its forward
            handle = self._handle(compiled.forward, compiled._orig_mod)
            compiled.forward = functools.wraps(handle.compiled)(lambda *a, **k: self._call(handle, a, k))
            return compiled
        handle = self._handle(compiled, eager)

        @functools.wraps(compiled)
        def recorded(*args, **kwargs):
            return self._call(handle, args, kwargs)

        return recorded

    def _call(self, handle: _Compiled, args, kwargs):
        if self._depth or self._closed:  # nested in a recorded call, or after the test
            return handle.compiled(*args, **kwargs)
        first = handle.target is None
        snapshot = _clone((args, kwargs)) if first else None
        grad = torch.is_grad_enabled()
        before = self._inductor_counts()
        self._depth += 1
        start = time.perf_counter()
        cap = None
        try:
            with compiler.capture() as cap, compiler.runs() as ran, self._inductor_profiling():
                out = handle.compiled(*args, **kwargs)
        finally:
            self._depth -= 1
            if cap is not None:  # records of a call that raised are kept too
                self.graphs += cap.graphs
                self._add_breaks(handle, cap.graph_break_reasons)
                if first:
                    handle.ran = ran
        elapsed = time.perf_counter() - start
        after = self._inductor_counts()
        self._inductor_kernels += after[0] - before[0]
        self._inductor_bytes += after[1] - before[1]
        if first:
            handle.target = Target(handle.name, self.backend, handle.compiled, handle.eager, snapshot[0], snapshot[1], grad, elapsed)
        return out

    def _add_breaks(self, handle: _Compiled, reasons: list[str]) -> None:
        """A recompile (another shape) meets the function's graph breaks again: they
        are the same breaks, so a function counts each as many times as one of its
        compiles met it (two breaks with one reason text in one compile stay two)."""
        key = id(handle.eager)
        self._breaks[key] = self._breaks.get(key, collections.Counter()) | collections.Counter(reasons)

    def _inductor_counts(self) -> tuple[int, int]:
        if self.backend != "inductor":
            return (0, 0)
        from torch._inductor import metrics

        return (metrics.generated_kernel_count, metrics.num_bytes_accessed)

    @contextlib.contextmanager
    def _inductor_profiling(self):
        """TorchInductor counts bytes only while its metrics log is on (kept silent
        here), and its C++ kernels show in the profiler only with kernel profiling on."""
        if self.backend != "inductor":
            yield
            return
        from torch._inductor import config

        log = logging.getLogger("torch._inductor.compile_fx.__inductor_metrics")
        saved, quiet = (log.level, log.propagate), logging.NullHandler()
        log.setLevel(logging.INFO)
        log.propagate = False
        log.addHandler(quiet)
        try:
            with config.patch({"cpp.enable_kernel_profile": True}) if self.device.type == "cpu" else contextlib.nullcontext():
                yield
        finally:
            log.removeHandler(quiet)
            log.setLevel(saved[0])
            log.propagate = saved[1]

    def _compare(self, out, expected, rtol, atol, exact=lambda: None):
        """Each output within tolerance of eager's or, where eager's is not, of the
        exact result (`exact()`: the outputs computed in float64, or None): ATen's
        float32 is not always the closer one (a long sum's order, a libm)."""
        got, spec = pytree.tree_flatten(out)
        want, want_spec = pytree.tree_flatten(expected)
        if spec != want_spec:
            raise AssertionError(f"fusion.run: compiled output has structure {spec}, eager {want_spec}")
        scale = self.settings.tolerance_scale
        for i, (g, w) in enumerate(zip(got, want)):
            if isinstance(w, torch.Tensor) and w.dtype in TOLERANCES:
                r, a = TOLERANCES[w.dtype]
                r, a = (r * scale if rtol is None else rtol), (a * scale if atol is None else atol)
            else:
                r, a = (0.0, 0.0) if rtol is None and atol is None else (rtol or 0.0, atol or 0.0)
            try:
                torch.testing.assert_close(g, w, rtol=r, atol=a, equal_nan=True)
            except AssertionError as e:
                where = f"output {i}" if len(got) > 1 else "output"
                ref = _exact_output(exact(), i, w)
                if ref is None:
                    raise AssertionError(f"fusion.run: compiled {where} differs from eager (rtol={r:g}, atol={a:g}):\n{e}") from None
                off = f"ours by up to {_max_diff(g, ref):.3g}, eager's by up to {_max_diff(w, ref):.3g}"
                try:
                    torch.testing.assert_close(g, ref.to(w.dtype), rtol=r, atol=a, equal_nan=True)
                except AssertionError:
                    raise AssertionError(f"fusion.run: compiled {where} differs from eager (rtol={r:g}, atol={a:g}), and from "
                                         f"the float64 result ({off}):\n{e}") from None
                warnings.warn(pytest.PytestWarning(
                    f"pytest-fusion: {self.nodeid}: eager's {where} is off the float64 result (rtol={r:g}, atol={a:g}) "
                    f"and the compiled one is not: it passes ({off})"))

    # -- measuring -------------------------------------------------------------------------
    def _timing(self) -> bool:
        return self.timing_off is None and self.timing_skip is None

    def _measure(self, handle: _Compiled) -> None:
        if handle.target is None or handle.measured:
            return
        handle.measured = True
        t = handle.target
        if self.ncu_child:  # ncu profiles one warm call of ours; the parent measures the rest
            ncu.profiled_call(t.call(t.compiled), self.device, self.settings.warmup)
            return
        reference = None
        # TorchInductor is compiled and timed only for a gate that applies on this device
        wants = any(name == "min_speedup" and a["over"] == "inductor" and a["device"] in (None, self.device.type)
                    for name, a in self.gates)
        if self._timing() and wants and self.backend == "fusion":
            ref = REAL_COMPILE(t.eager, backend="inductor", dynamic=False)
            start = time.perf_counter()
            t.call(ref)()
            reference = (ref, time.perf_counter() - start)
        try:
            self.records.append(measure(
                t, self.device, rounds=self.settings.rounds, warmup=self.settings.warmup,
                timing=self._timing(), nvml_seconds=self.settings.nvml_seconds, reference=reference,
                trace_to=self._trace_to(len(self.records)),
            ))
        except MeasureError as e:
            self.error = str(e)
            raise

    def _trace_to(self, index: int):
        """label -> trace file, when --fusion-trace-dir asks for traces (report layer)."""
        if self.trace_dir is None:
            return None
        from .report.traces import trace_path

        suffix = f"-{index}" if index else ""
        return lambda label: trace_path(self.trace_dir, self.nodeid, label + suffix)

    def measure_pending(self) -> None:
        """Measure the calls not yet measured; then DRAM bytes under ncu (it re-runs the test)."""
        for handle in self._compiled:
            self._measure(handle)
        if self.ncu_path and self.records:
            try:
                self.dram_bytes = ncu.measure_dram(self.ncu_path, self.config, self.nodeid, self.settings, self.device)
            except MeasureError as e:
                self.error = str(e)
                raise

    def retime(self) -> None:
        """Measure every compiled call again (after a failed speed gate)."""
        self.records = []
        for handle in self._compiled:
            handle.measured = False
            self._measure(handle)

    def close(self) -> None:
        self._closed = True

    # -- what the test compiled -------------------------------------------------------------
    @property
    def kernels(self) -> list[compiler.KernelRecord]:
        return [k for g in self.graphs for k in g.kernels]

    @property
    def externs(self) -> list[compiler.CallRecord]:
        return [c for g in self.graphs for c in g.externs]

    @property
    def fallbacks(self) -> list[compiler.CallRecord]:
        return [c for g in self.graphs for c in g.fallbacks]

    @property
    def graph_break_reasons(self) -> list[str]:
        return [r for seen in self._breaks.values() for r in seen.elements()]

    @property
    def graph_breaks(self) -> int:
        return len(self.graph_break_reasons)

    @property
    def metrics(self) -> dict:
        """The test's figures, in the report schema's "metrics" shape."""
        ours = self.backend
        m: dict = {"graph_breaks": self.graph_breaks, "graph_break_reasons": list(self.graph_break_reasons)}
        if ours == "fusion":
            m["kernels"], m["externs"], m["fallbacks"] = len(self.kernels), len(self.externs), len(self.fallbacks)
            m["fallback_ops"] = [f"{c.op} ({c.reason})" if c.reason else c.op for c in self.fallbacks]
            # per call, as launches and times are: the graphs each measured first call
            # ran (a graph compiled once and run by two calls counts twice)
            ran = [g for h in self._compiled for g in h.ran]
            m["bytes_read"] = sum(g.bytes_read for g in ran)
            m["bytes_written"] = sum(g.bytes_written for g in ran)
            m["bytes_total"] = m["bytes_read"] + m["bytes_written"]
        else:
            m["kernels"], m["externs"], m["fallbacks"] = self._inductor_kernels, None, None
            m["bytes_read"] = m["bytes_written"] = None
            m["bytes_total"] = self._inductor_bytes or None
        recs = self.records
        m["launches"] = sum(r.launches for r in recs) if recs else None
        m["launch_names"] = [n for r in recs for n in r.launch_names]
        m["graph_launches"] = sum(r.graph_launches for r in recs)
        peaks = [r.peak_memory_bytes for r in recs if r.peak_memory_bytes is not None]
        m["peak_memory_bytes"] = max(peaks) if peaks else None
        timed = [r for r in recs if r.times_ms]
        keys = set.intersection(*(set(r.times_ms) for r in timed)) if timed else set()
        # several measured calls: a round of the test is one round of each call
        m["times_ms"] = {k: [sum(xs) for xs in zip(*(r.times_ms[k] for r in timed))] for k in sorted(keys)}
        m["median_ms"] = {k: statistics.median(v) for k, v in m["times_ms"].items()}
        med = m["median_ms"]
        m["speedup"] = {k: med[k] / med[ours] for k in ("eager", "inductor") if k in med and k != ours and med[ours] > 0}
        m["compile_s"] = {}
        for r in recs:
            for k, v in r.compile_s.items():
                m["compile_s"][k] = m["compile_s"].get(k, 0.0) + v
        m["bandwidth"] = None
        if med.get(ours) and m["bytes_total"]:
            m["bandwidth"] = {
                "achieved_gbps": m["bytes_total"] / (med[ours] * 1e-3) / 1e9,
                "peak_gbps": peak_bandwidth_gbps(self.device),
            }
        m["nvml"] = next((r.nvml for r in recs if r.nvml), None)
        m["dram_bytes"] = self.dram_bytes
        return m


def _trace_dir(config) -> str | None:
    try:
        from .report.hooks import trace_dir

        return trace_dir(config)
    except (ImportError, ValueError):  # the report layer is optional (-p no:pytest_fusion.report.hooks: no option)
        return None


def create(item) -> Fusion:
    """The test's Fusion state (once per test): device, settings, fresh Dynamo caches."""
    state = item.stash.get(STATE, None)
    if state is not None:
        return state
    from .settings import for_item

    settings = for_item(item.config.stash[SETTINGS], item)
    device = resolve_device(settings.device, worker_index(item.config))
    if device is None:
        # reported at the test (a marked test without the fixture skips from a hook here)
        raise pytest.skip.Exception(f"fusion device {settings.device!r} asked for, but this machine has no CUDA device",
                                    _use_item_location=True)
    timing_skip = item.config.stash.get(TIMING_SKIP, None)
    child = item.config.getoption("fusion_ncu_child")
    cuda = device.type == "cuda" and not child
    try:
        if cuda and not settings.no_perf and timing_skip is None:
            nvml.check(device)
        ncu_path = ncu.find() if cuda and settings.ncu else None
    except (nvml.NvmlError, MeasureError) as e:
        raise pytest.fail.Exception(f"pytest-fusion: {e}", pytrace=False) from None  # one message, no chain
    # a function compiled by an earlier test would hit Dynamo's cache and record nothing
    torch._dynamo.reset()
    torch.manual_seed(zlib.crc32(item.nodeid.encode()))
    state = Fusion(item, settings, device, timing_skip, ncu_path)
    item.stash[STATE] = state
    return state


@contextlib.contextmanager
def routing(state: Fusion):
    """torch.compile inside the block compiles with the test's backend and is recorded."""

    @functools.wraps(REAL_COMPILE)
    def compile(model=None, **kwargs):
        if model is None:
            return lambda m: compile(m, **kwargs)
        return state._route(model, kwargs)

    torch.compile = compile
    try:
        yield
    finally:
        torch.compile = REAL_COMPILE


@pytest.fixture
def fusion(request) -> Fusion:
    """Compile with pytest-fusion's compiler, compare with eager, measure; see Fusion."""
    state = create(request.node)
    yield state
    state.close()
