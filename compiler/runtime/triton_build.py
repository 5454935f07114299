"""Build and launch Triton kernels.

The kernel module is written to the cache (content hash) and imported. On a GPU
every launch configuration is compiled before the graph is returned, in a thread
pool so that a graph's kernels compile together (each thread hands its compile
to a worker process once one is ready: runtime/compile_workers.py); when there
are several, the fastest is picked once per shape and machine (timed on scratch
inputs, or a gather's on its first call's tensors) and remembered in the cache.
The launcher is generated per kernel with the grid, constants and workspace
addresses as literals, and calls our C launcher (runtime/cuda_launcher.py;
Triton's own where that cannot serve): per call it only reads the stream and,
for graph inputs (which may be views at any address), checks 16-byte alignment,
falling back to a plain Triton launch when one is not.

CPU tensors (config.cpu_target == "triton", FUSION_TARGET=triton) run under
Triton's interpreter, which CI uses to check the Triton codegen without a GPU;
TRITON_INTERPRET=1 needs not be set, the modules are imported with it on."""
from __future__ import annotations

import concurrent.futures
import contextlib
import importlib.util
import json
import os
import sys
import threading
import time

import torch

from ..config import config
from ..errors import KernelCompileError
from . import compile_workers, cuda_launcher
from .cache import cache_dir, content_hash, valid_entry, write_entry

_modules: dict = {}
_lock = threading.Lock()
_pool: concurrent.futures.ThreadPoolExecutor | None = None
WORKER_TIMEOUT_S = 300  # longer than any kernel has taken to compile

DTYPES = {str(d).replace("torch.", ""): d for d in (
    torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32,
    torch.int16, torch.int8, torch.uint8, torch.bool)}


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(max_workers=min(8, os.cpu_count() or 1), thread_name_prefix="fusion-triton")
    return _pool


def interpreting(device_type: str) -> bool:
    return device_type != "cuda" or os.environ.get("TRITON_INTERPRET", "0") == "1"


@contextlib.contextmanager
def _interpret(on: bool):
    """triton.jit makes an interpreted function while this knob is set."""
    if not on:
        yield
        return
    from triton import knobs

    old = knobs.runtime.interpret
    knobs.runtime.interpret = True
    try:
        yield
    finally:
        knobs.runtime.interpret = old


def load_module(name: str, source: str, interpret: bool):
    """(module, source path, whether the source was in the cache)."""
    key = content_hash(source)
    path = cache_dir() / "triton" / key[:2] / f"{key}_{name}.py"
    hit = valid_entry(path)
    if not hit:
        write_entry(path, source.encode())
    with _lock:
        mod = _modules.get((key, interpret))
        if mod is None:
            modname = f"fusion_triton_{key}{'_interp' if interpret else ''}"
            spec = importlib.util.spec_from_file_location(modname, path)
            mod = importlib.util.module_from_spec(spec)
            sys.modules[modname] = mod
            with _interpret(interpret):
                spec.loader.exec_module(mod)
            if interpret:
                mod.libdevice = InterpretedLibdevice()
                if hasattr(mod, "_sort_rows"):
                    mod._sort_rows = interpreted_sort_rows
            _modules[(key, interpret)] = mod
    return mod, path, hit


class InterpretedLibdevice:
    """libdevice for the interpreter, which has none: apply the torch function
    of the same name to the block's data."""

    TORCH = {"nearbyint": "round"}

    def __getattr__(self, name):
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        fn = getattr(torch, self.TORCH.get(name, name))

        def call(*args):
            ref = next(a for a in args if isinstance(a, tl.tensor))
            vals = [torch.from_numpy(np.asarray(a.handle.data)) if isinstance(a, tl.tensor) else a for a in args]
            out = np.asarray(fn(*vals).numpy())
            scalar = tl.int1 if out.dtype == np.bool_ else ref.dtype.scalar
            ty = tl.block_type(scalar, list(out.shape)) if out.ndim else scalar
            return tl.tensor(TensorHandle(out, scalar), ty)

        return call


def interpreted_sort_rows(x, descending):
    """_sort_rows for the interpreter: Triton's tl.sort is compiled code, which
    it cannot run; numpy sorts the block's rows."""
    import numpy as np
    import triton.language as tl
    from triton.runtime.interpreter import TensorHandle

    out = np.sort(np.asarray(x.handle.data), axis=1)
    if bool(getattr(descending, "value", descending)):
        out = out[:, ::-1]
    return tl.tensor(TensorHandle(np.ascontiguousarray(out), x.dtype.scalar), x.type)


# -- launchers ------------------------------------------------------------------------------


class TritonLauncher:
    """What the wrapper calls: `name.run(*tensors)`. Until the kernel is
    compiled, `run` waits for it and then replaces itself with the fast path.
    `info` says how it launches (KernelRecord.launch), once it has waited;
    `when_ready` hooks get it then, with the seconds waited."""

    def __init__(self, name: str, resolve, info: dict | None = None):
        self.name = name
        self._resolve = resolve
        self.info = info
        self._hooks: list = []

    def run(self, *args):
        self.wait(args)
        return self.run(*args)

    @property
    def ready(self) -> bool:
        return "run" in self.__dict__

    def when_ready(self, hook) -> None:
        self._hooks.append(hook)

    def wait(self, args: tuple | None = None):
        """`args`: the first call's tensors, which some kernels are tuned on."""
        if not self.ready:
            start = time.perf_counter()
            self.run = self._resolve(args)
            for hook in self._hooks:
                hook(self.info, time.perf_counter() - start)


def _constexprs(cfg: dict) -> dict:
    """The block sizes, in the order the kernel declares them."""
    return {k: cfg[k] for k in ("YBLOCK", "XBLOCK", "RBLOCK") if k in cfg}


def compile_options(meta: dict, cfg: dict) -> dict:
    """Triton's compile options for one configuration of a kernel."""
    options = dict(num_warps=cfg["num_warps"], num_stages=cfg.get("num_stages", 1),
                   enable_fp_fusion=meta.get("fp_fusion", True))
    if meta.get("pdl"):  # an option since Triton 3.4 (triton_config.dependent_launch)
        options["launch_pdl"] = True
    if meta.get("debug"):  # its device asserts (index values), without Triton's integer overflow checks
        options.update(debug=True, sanitize_overflow=False)
    return options


def _jit_launcher(fn, meta, cfg, interpret: bool, workspace: list):
    """The plain Triton launch (the interpreter; misaligned inputs on a GPU).
    Interpreted kernels are invisible to torch.profiler: under it, they run
    inside a range named after the kernel (launch counts, traces), as C++ ones do."""
    grid = (cfg["grid"],)
    consts = _constexprs(cfg)
    opts = {} if interpret else compile_options(meta, cfg)
    profiling = torch._C._autograd._profiler_enabled
    name = fn.__name__

    def launch(*args):
        if interpret and profiling():
            with torch.profiler.record_function(name):
                return fn[grid](*args, *workspace, **consts)
        fn[grid](*args, *workspace, **consts, **opts)

    return launch


def _fast_launcher(ck, meta, cfg, slow, device_index: int, use_c: bool, workspace: list):
    """A launcher specialized to one compiled kernel, generated as source so
    the grid, constants and workspace addresses are literals: our C launcher
    (`use_c`, where the kernel fits it), else Triton's own."""
    n = len(meta["args"])
    params = [f"a{i}" for i in range(n)]
    lines = [f"def launch({', '.join(params)}):"]
    checked = [i for i, a in enumerate(meta["args"]) if a["check_align"]]
    for i in checked:
        lines.append(f"    p{i} = a{i}.data_ptr()")
    if checked:
        lines.append(f"    if ({' | '.join(f'p{i}' for i in checked)}) & 15:")
        lines.append(f"        return slow({', '.join(params)})")
    ptrs = ", ".join([f"p{i}" if i in checked else f"a{i}" for i in range(n)] + [str(w.data_ptr()) for w in workspace])
    grid = cfg["grid"]
    c = cuda_launcher.load()
    md = ck.metadata
    ns = dict(slow=slow, workspace=workspace, stream=torch._C._cuda_getCurrentRawStream)
    if use_c and _c_fits(ck):
        pdl = int(bool(getattr(md, "launch_pdl", False)))
        lines.append(f"    c_launch(function, {grid}, {_threads(md)}, {md.shared}, stream({device_index}), {pdl}, {ptrs})")
        ns.update(function=_cu_function(ck), c_launch=c.launch)
    else:
        consts = ", ".join(str(v) for v in _constexprs(cfg).values())
        lines.append(f"    run({grid}, 1, 1, stream({device_index}), function, packed, None, None, None, {ptrs}, {consts})")
        ns.update(run=ck.run, function=ck.function, packed=ck.packed_metadata)
    exec(compile("\n".join(lines) + "\n", f"<launcher {ck.name}>", "exec"), ns)
    return ns["launch"]


def _threads(md) -> int:
    """Threads a program of the compiled kernel runs."""
    return md.num_warps * getattr(md, "warp_size", 32)


def _cu_function(ck):
    """The kernel's CUfunction for our C launcher, loaded without Triton's own
    launcher: that is a C module gcc builds for each new kernel signature (H200:
    0.21 of the 0.51 s a cold compile of the sin chain took)."""
    if ck.function is not None:
        return ck.function
    f = getattr(ck, "_fusion_function", None)
    if f is None:
        from triton.runtime import driver
        from triton.runtime.errors import OutOfResources

        device = driver.active.get_current_device()
        shared = driver.active.utils.get_device_properties(device)["max_shared_mem"]
        if ck.metadata.shared > shared:  # the checks Triton's own load makes
            raise OutOfResources(ck.metadata.shared, shared, "shared memory")
        loaded = driver.active.utils.load_binary(ck.name, ck.kernel, ck.metadata.shared, device)
        if len(loaded) > 4 and _threads(ck.metadata) > loaded[4]:
            raise OutOfResources(_threads(ck.metadata), loaded[4], "threads")
        f = ck._fusion_function = loaded[1]
    return f


# kernel needs that only Triton's launcher provides
_C_UNSUPPORTED = ("global_scratch_size", "profile_scratch_size", "launch_cooperative_grid")


def _c_fits(ck) -> bool:
    md = ck.metadata
    return (cuda_launcher.load() is not None and _c_checked.get("ok", True)
            and all(not getattr(md, f, 0) for f in _C_UNSUPPORTED) and getattr(md, "num_ctas", 1) == 1)


# whether the C launcher gave the same results as Triton's on the first kernel
_c_checked: dict = {}


def _check_c_launcher(c_launch, triton_launch, meta, device) -> bool:
    """Run one kernel through both launchers on the same random inputs: the C
    launcher is used only if every output matches bit for bit."""
    a = _scratch_args(meta, device)
    b = [t.clone() for t in a]
    c_launch(*a)
    triton_launch(*b)
    torch.cuda.synchronize()
    ok = all(torch.equal(x.view(torch.uint8), y.view(torch.uint8)) for x, y in zip(a, b))
    if not ok:
        print("pytest-fusion: the C launcher disagreed with Triton's; using Triton's", file=sys.stderr)
    return ok


# -- compiling and choosing a configuration ------------------------------------------------------


def _scratch_args(meta, device):
    """Inputs to launch a kernel on while tuning or checking it: big enough for
    every index it uses, random floats, zero integers (indirect loads stay in bounds)."""
    out = []
    for a in meta["args"]:
        dt = DTYPES[a["dtype"]]
        if dt.is_floating_point:
            out.append(torch.randn(a["extent"], device=device, dtype=dt))
        else:
            out.append(torch.zeros(a["extent"], device=device, dtype=dt))
    return out


def _reruns_alike(args) -> bool:
    """Whether a kernel that writes only what it does not read may launch again on
    `args`: no two of them share memory (the wrapper may hand a dead input's memory
    to an output)."""
    if not args:
        return False
    storages = [a.untyped_storage().data_ptr() for a in args]
    return len(set(storages)) == len(storages)


def _target() -> tuple:
    """The GPU kernels are compiled for: (backend, arch, warp size)."""
    from triton.runtime import driver

    t = driver.active.get_current_target()
    return (t.backend, t.arch, t.warp_size)


def _compile_one(fn, meta, cfg, path, target, pool):
    """Compile one configuration without launching it: first in a worker process
    when one is ready, then here, where Triton finds the worker's kernel in its
    cache (or, if the worker failed, compiles it and raises its error).
    (compiled kernel, seconds it took)."""
    from triton import knobs

    start = time.perf_counter()
    dtypes = [a["dtype"] for a in meta["args"] + meta["workspace"]]
    blocks, options = _constexprs(cfg), compile_options(meta, cfg)
    future = pool.submit(dict(path=str(path), name=fn.__name__, dtypes=dtypes, blocks=blocks, options=options,
                              cache_dir=knobs.cache.dir)) if pool else None
    if future is not None:
        try:
            future.result(timeout=WORKER_TIMEOUT_S)
        except concurrent.futures.TimeoutError:
            pass  # a stuck worker: compile it here
    return compile_workers.compile_kernel(fn, dtypes, blocks, options, target), time.perf_counter() - start


def _tune_path(path, device) -> "os.PathLike":
    import triton

    machine = content_hash(torch.cuda.get_device_name(device), triton.__version__)[:12]
    return path.with_name(path.stem + f".{machine}.tune.json")


def _time(launch, args, reps_ms: float = 2.0) -> float:
    launch(*args)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    launch(*args)
    end.record()
    end.synchronize()
    once = max(start.elapsed_time(end), 1e-3)
    n = max(3, min(100, int(reps_ms / once)))
    start.record()
    for _ in range(n):
        launch(*args)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / n


def _resolve(name, fn, meta, configs, futures, device, path, tune_path, workspace, target, tune_args):
    """Collect the compiled configurations, pick the fastest: (config, launcher,
    kind, [[config, us] of each candidate timed], seconds the slowest compile took).
    The candidates are timed on `tune_args`, else on scratch inputs."""
    compiled, seconds = [], 0.0
    for cfg, fut in zip(configs, futures):
        try:
            ck, s = fut.result()
        except Exception:
            try:  # a compile that failed in a worker thread gets one more try here
                ck, s = _compile_one(fn, meta, cfg, path, target, None)
            except Exception as e:
                raise KernelCompileError(name, f"{type(e).__name__}: {e}", path) from e
        compiled.append((cfg, ck))
        seconds = max(seconds, s)
    index = device.index or 0

    def fast(cfg, ck, use_c):
        return _fast_launcher(ck, meta, cfg, _jit_launcher(fn, meta, cfg, False, workspace), index, use_c, workspace)

    # a kernel that combines values atomically, in any order, cannot be compared bit
    # for bit: the check waits for another kernel, and until it has passed such
    # kernels launch through Triton's launcher (a scatter compiled first made every
    # later kernel of the process take Triton's, the check having failed on rounding)
    exact = not meta.get("atomic")
    if "ok" not in _c_checked and exact and _c_fits(compiled[0][1]):
        cfg, ck = compiled[0]
        _c_checked["ok"] = _check_c_launcher(fast(cfg, ck, True), fast(cfg, ck, False), meta, device)
    use_c = exact or "ok" in _c_checked
    launchers = [(cfg, fast(cfg, ck, use_c)) for cfg, ck in compiled]
    how = "c" if use_c and _c_fits(compiled[0][1]) else "triton"
    if len(launchers) == 1:
        return launchers[0][0], launchers[0][1], how, [], seconds
    args = tune_args or _scratch_args(meta, device)
    timed = sorted((_time(launch, args), i) for i, (cfg, launch) in enumerate(launchers))
    best_cfg, best = launchers[timed[0][1]]
    write_entry(tune_path, json.dumps(best_cfg).encode())
    return best_cfg, best, how, [[launchers[i][0], round(ms * 1e3, 2)] for ms, i in timed], seconds


def build(name: str, source: str, meta: dict):
    """(launcher, source path, cache hit) for one kernel module."""
    interpret = interpreting(meta["device"])
    mod, path, hit = load_module(name, source, interpret)
    fn = getattr(mod, name)
    configs = meta["configs"]
    device = torch.device("cpu") if interpret else torch.device("cuda", torch.cuda.current_device())
    if configs[0]["grid"] == 0:  # an empty output: nothing to run, and CUDA rejects a grid of 0 programs
        launcher = TritonLauncher(name, lambda args: lambda *args: None)
        launcher.wait()
        return launcher, path, hit
    with real_tensors():
        workspace = [torch.zeros(w["numel"], dtype=DTYPES[w["dtype"]], device=device) for w in meta["workspace"]]
    if interpret:
        launch = _jit_launcher(fn, meta, configs[0], True, workspace)
        launcher = TritonLauncher(name, lambda args: launch, _info(configs[0], "interpreter"))
        launcher.wait()
        return launcher, path, hit
    tune_path = _tune_path(path, device)
    chosen = None
    if len(configs) > 1 and valid_entry(tune_path):
        chosen = json.loads(tune_path.read_text())
        configs = [chosen]
    hit = hit and (len(meta["configs"]) == 1 or chosen is not None)
    target = _target()
    pool = compile_workers.workers(config.compile_workers, target, str(cache_dir() / "libdevice"))
    futures = [_executor().submit(_compile_one, fn, meta, cfg, path, target, pool) for cfg in configs]

    def resolve(args):
        # gathers are timed on the first call's tensors (see TritonKernel._tunes_on_call)
        on_call = meta.get("tune_on_call", False) and _reruns_alike(args)
        try:
            with real_tensors():
                cfg, launch, how, timed, seconds = _resolve(name, fn, meta, configs, futures, device, path, tune_path,
                                                            workspace, target, args if on_call else None)
        except KernelCompileError:
            raise
        except Exception as e:  # our fast path broke on this Triton: its own launch is correct
            print(f"pytest-fusion: {name}: plain Triton launch ({type(e).__name__}: {str(e)[:300]})", file=sys.stderr)
            cfg, launch, how, timed, seconds = configs[0], _jit_launcher(fn, meta, configs[0], False, workspace), "jit", [], None
        launcher.info = _info(cfg, how, timed, tuned_earlier=chosen is not None, compile_s=seconds,
                              dependent=meta.get("pdl", False), timed_on=("call" if on_call else "scratch") if timed else None)
        return launch

    launcher = TritonLauncher(name, resolve)
    return launcher, path, hit


def _info(cfg: dict, how: str, timed: list = (), tuned_earlier: bool = False, compile_s: float | None = None,
          dependent: bool = False, timed_on: str | None = None) -> dict:
    """KernelRecord.launch (`dependent`: launched with programmatic dependent launch)."""
    return dict(config=cfg, launcher=how, timed=list(timed), timed_on=timed_on, tuned_earlier=tuned_earlier,
                compile_s=None if compile_s is None else round(compile_s, 3), dependent=dependent)


def real_tensors():
    """Compiling may run inside Dynamo/AOTAutograd's fake-tensor tracing: the
    tensors built here to tune and check kernels must be real."""
    from torch.utils._python_dispatch import _disable_current_modes

    return _disable_current_modes()
