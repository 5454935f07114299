"""Compile Triton kernels in worker processes.

Triton's front end is Python and holds the GIL, so threads compiling a kernel's
candidate configurations (and a graph's kernels) mostly wait for one another.
A worker is this file run as a script: it imports Triton only (not torch, not
this package), so it starts in about half a second, in the background, when the
first kernel is built for a GPU; until one is ready, kernels compile in threads.
A worker compiles into Triton's on-disk cache; the parent then compiles the same
source with the same arguments (`compile_kernel`), which Triton finds there.

Jobs arrive on the worker's stdin and answers leave on its stdout, each pickled
behind its length: None when the kernel compiled, else why it did not (the
parent then compiles it itself, and raises what Triton raises). A worker exits
when its stdin closes, so none outlives the process that started it. A worker
links libdevice's float32 functions from a small library (slim_libdevice.py)."""
from __future__ import annotations

import os
import pickle
import struct
import sys

# torch dtype name -> Triton's name for a pointer's element type
TRITON_TYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float64": "fp64", "bool": "i1",
                "uint8": "u8", "int8": "i8", "int16": "i16", "int32": "i32", "int64": "i64"}


def compile_kernel(fn, dtypes: list, blocks: dict, options: dict, target: tuple):
    """Triton's compile of kernel `fn` for `target` (backend, arch, warp size):
    its pointer arguments point to `dtypes` (torch names), each 16-byte aligned
    (the launcher checks that before it takes the compiled kernel), and `blocks`
    are its constexpr block sizes."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    signature = {p: "*" + TRITON_TYPES[d] for p, d in zip(fn.arg_names, dtypes)}
    signature.update({b: "constexpr" for b in blocks})
    aligned = {(i,): [["tt.divisibility", 16]] for i in range(len(dtypes))}
    return triton.compile(ASTSource(fn, signature, constexprs=blocks, attrs=aligned),
                          target=GPUTarget(*target), options=options)


# what a worker compiles before it says it is ready: a first compile in a process
# pays about 0.4 s of Triton's own set-up, which a job must not wait for
WARM_UP = """import triton
import triton.language as tl


@triton.jit
def warm_up(in_ptr, out_ptr, XBLOCK: tl.constexpr):
    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    tl.store(out_ptr + i, tl.erf(tl.load(in_ptr + i)))
"""


def _send(stream, obj) -> None:
    data = pickle.dumps(obj)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _recv(stream):
    head = stream.read(8)
    if len(head) < 8:
        raise EOFError("the other end closed the pipe")
    (n,) = struct.unpack("<Q", head)
    return pickle.loads(stream.read(n))


# -- the parent's side ---------------------------------------------------------------------------


class Workers:
    """Worker processes and a queue of compile jobs, each served by the next free
    worker. `submit` gives None while no worker is ready."""

    def __init__(self, count: int, target: tuple, libdevice_dir: str = ""):
        import queue
        import threading

        self.ready = 0
        self.compiled = self.failed = 0  # answers so far (tests read them)
        self.processes: list = []
        self._argv = [sys.executable, __file__, *map(str, target)] + ([libdevice_dir] if libdevice_dir else [])
        self._jobs = queue.SimpleQueue()
        self._lock = threading.Lock()
        for i in range(count):
            threading.Thread(target=self._serve, daemon=True, name=f"fusion-compile-worker-{i}").start()

    def submit(self, job: dict):
        """A future of the answer to `job`, or None (compile it here)."""
        from concurrent.futures import Future

        with self._lock:
            if not self.ready:
                return None
            future = Future()
            self._jobs.put((job, future))
            return future

    def _serve(self) -> None:
        """Start one worker and feed it jobs until it or the parent goes."""
        import subprocess

        env = dict(os.environ, CUDA_VISIBLE_DEVICES="")  # a worker needs no GPU, and takes none
        proc = None
        try:
            proc = subprocess.Popen(self._argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
            self.processes.append(proc)
            if _recv(proc.stdout) != "ready":
                raise EOFError("no greeting")
        except Exception:  # no worker here: jobs compile in the parent's threads
            if proc is not None:
                proc.kill()
            return
        with self._lock:
            self.ready += 1
        try:
            while True:
                job, future = self._jobs.get()
                if not future.set_running_or_notify_cancel():
                    continue
                try:
                    _send(proc.stdin, job)
                    answer = _recv(proc.stdout)
                except (OSError, EOFError, pickle.UnpicklingError) as e:
                    future.set_result(f"the compile worker stopped: {e}")
                    return
                with self._lock:
                    self.compiled += answer is None
                    self.failed += answer is not None
                future.set_result(answer)
        finally:
            proc.kill()
            with self._lock:
                self.ready -= 1
                if not self.ready:  # the last worker is gone: what is queued compiles in the parent
                    while not self._jobs.empty():
                        self._jobs.get()[1].set_result("no compile worker left")


_workers: Workers | None = None


def _forget() -> None:
    """A forked child has the parent's Workers but not its threads or pipes."""
    global _workers
    _workers = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget)


def workers(count: int, target: tuple, libdevice_dir: str = "") -> Workers | None:
    """The process's workers for `target`, started by the first call (None when
    count is 0), keeping their small libdevice (slim_libdevice.py) in `libdevice_dir`."""
    global _workers
    if count <= 0:
        return None
    if _workers is None:
        _workers = Workers(count, target, libdevice_dir)
    return _workers


# -- the worker's side -----------------------------------------------------------------------------


def _kernel(modules: dict, path: str, name: str):
    import importlib.util

    mod = modules.get(path)
    if mod is None:
        spec = importlib.util.spec_from_file_location(os.path.basename(path)[:-3], path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        modules[path] = mod
    return getattr(mod, name)


def _warm_up(target: tuple) -> None:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="fusion-worker-") as d:
        path = os.path.join(d, "warm_up.py")
        with open(path, "w") as f:
            f.write(WARM_UP)
        os.environ["TRITON_CACHE_DIR"] = d
        try:
            compile_kernel(_kernel({}, path, "warm_up"), ["float32", "float32"], {"XBLOCK": 128}, {"num_warps": 4, "enable_fp_fusion": True}, target)
        except Exception as e:  # its jobs will fail the same way, and the parent compile them itself
            print(f"pytest-fusion compile worker: {type(e).__name__}: {e}", file=sys.stderr)


def _link_slim_libdevice(directory: str) -> None:
    """Kernels compiled here link a small libdevice (slim_libdevice.py, loaded by
    its path: this package's __init__ imports torch, which a worker does without)."""
    import importlib.util

    try:
        spec = importlib.util.spec_from_file_location("fusion_slim_libdevice",
                                                      os.path.join(os.path.dirname(os.path.abspath(__file__)), "slim_libdevice.py"))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        mod.install(directory)
    except Exception as e:  # kernels link the whole library, as Triton does
        print(f"pytest-fusion compile worker: no small libdevice ({type(e).__name__}: {e})", file=sys.stderr)


def main() -> None:
    if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
        sys.path.pop(0)  # this package's modules are not top-level ones
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what Triton prints goes to stderr, not into the answers
    inp = sys.stdin.buffer
    target = (sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))
    if len(sys.argv) > 4:
        _link_slim_libdevice(sys.argv[4])  # before the warm-up, whose erf has it built
    _warm_up(target)
    _send(out, "ready")
    modules: dict = {}
    while True:
        try:
            job = _recv(inp)
        except EOFError:
            return
        try:
            os.environ["TRITON_CACHE_DIR"] = job["cache_dir"]
            fn = _kernel(modules, job["path"], job["name"])
            compile_kernel(fn, job["dtypes"], job["blocks"], job["options"], target)
            answer = None
        except Exception as e:  # the parent compiles it again and reports the error
            answer = f"{type(e).__name__}: {e}"[:2000]
        _send(out, answer)


if __name__ == "__main__":
    main()
