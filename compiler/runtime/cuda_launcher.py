"""A minimal CUDA kernel launcher (a C extension built once per machine and cached).

Triton's own launcher does Python work on every call (scratch allocators,
hooks); ours is one C call: read each argument's device pointer, call
cuLaunchKernel (cuLaunchKernelEx with programmatic stream serialization for a
kernel that waits for its predecessor itself: triton_config.dependent_launch).
It serves kernels whose arguments are all pointers and that need no scratch
memory, one CTA per program (what our codegen emits); anything else uses
Triton's launcher. `load()` returns None where the extension cannot
be built (no C compiler or Python headers): callers fall back then too."""
from __future__ import annotations

import functools
import importlib.machinery
import importlib.util
import os
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from .cache import cache_dir, content_hash, valid_entry, write_entry

SOURCE = r"""
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>
#include <stdint.h>

typedef int (*launch_t)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                        unsigned, void*, void**, void**);
typedef int (*ctx_get_t)(void**);
/* cuLaunchKernelEx's configuration, laid out as cuda.h declares it */
typedef struct { int id; char pad[4]; union { char bytes[64]; int value; void* align; } value; } launch_attr_t;
typedef struct {
    unsigned grid_x, grid_y, grid_z, block_x, block_y, block_z, shared;
    void* stream;
    launch_attr_t* attrs;
    unsigned n_attrs;
} launch_config_t;
typedef int (*launch_ex_t)(const launch_config_t*, void*, void**, void**);
#define PROGRAMMATIC_STREAM_SERIALIZATION 6
static launch_t cu_launch;
static launch_ex_t cu_launch_ex; /* in every driver that runs sm_90 (CUDA 11.8 on) */
static ctx_get_t cu_ctx_get;
static PyObject* data_ptr_name;

#define MAX_ARGS 120

/* launch(function, grid_x, threads, shared_bytes, stream, dependent, *pointers)
   `dependent`: the kernel may launch before the one ahead of it in the stream
   has finished (it waits for it with griddepcontrol.wait). A pointer is an int
   or an object with data_ptr(). Two null pointers follow them: Triton kernels
   take global and profile scratch pointers last. */
static PyObject* launch(PyObject* self, PyObject* const* args, Py_ssize_t nargs) {
    if (nargs < 6 || nargs - 6 > MAX_ARGS) {
        PyErr_SetString(PyExc_TypeError, "launch(function, grid_x, threads, shared, stream, dependent, *pointers)");
        return NULL;
    }
    void* fn = PyLong_AsVoidPtr(args[0]);
    unsigned long grid = PyLong_AsUnsignedLong(args[1]);
    unsigned long threads = PyLong_AsUnsignedLong(args[2]);
    unsigned long shared = PyLong_AsUnsignedLong(args[3]);
    void* stream = PyLong_AsVoidPtr(args[4]);
    int dependent = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred()) return NULL;
    Py_ssize_t n = nargs - 6;
    uint64_t ptrs[MAX_ARGS + 2];
    void* params[MAX_ARGS + 2];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject* a = args[6 + i];
        if (PyLong_Check(a)) {
            ptrs[i] = PyLong_AsUnsignedLongLong(a);
        } else {
            PyObject* p = PyObject_CallMethodNoArgs(a, data_ptr_name);
            if (!p) return NULL;
            ptrs[i] = PyLong_AsUnsignedLongLong(p);
            Py_DECREF(p);
        }
        if (PyErr_Occurred()) return NULL;
        params[i] = &ptrs[i];
    }
    ptrs[n] = 0; ptrs[n + 1] = 0;
    params[n] = &ptrs[n]; params[n + 1] = &ptrs[n + 1];
    void* ctx = NULL;
    if (cu_ctx_get(&ctx) != 0 || ctx == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "no current CUDA context");
        return NULL;
    }
    int err;
    if (dependent && cu_launch_ex) {
        launch_attr_t attr = {0};
        attr.id = PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.value = 1;
        launch_config_t cfg = {(unsigned)grid, 1, 1, (unsigned)threads, 1, 1, (unsigned)shared, stream, &attr, 1};
        err = cu_launch_ex(&cfg, fn, params, NULL);
    } else {
        err = cu_launch(fn, (unsigned)grid, 1, 1, (unsigned)threads, 1, 1, (unsigned)shared, stream, params, NULL);
    }
    if (err != 0) {
        PyErr_Format(PyExc_RuntimeError, "cuLaunchKernel failed with CUDA error %d", err);
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"launch", (PyCFunction)(void (*)(void))launch, METH_FASTCALL, "launch a kernel"},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "fusion_cuda_launcher", NULL, -1, methods};

PyMODINIT_FUNC PyInit_fusion_cuda_launcher(void) {
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (!lib) { PyErr_SetString(PyExc_ImportError, "libcuda.so.1 not found"); return NULL; }
    cu_launch = (launch_t)dlsym(lib, "cuLaunchKernel");
    cu_ctx_get = (ctx_get_t)dlsym(lib, "cuCtxGetCurrent");
    cu_launch_ex = (launch_ex_t)dlsym(lib, "cuLaunchKernelEx");
    if (!cu_launch || !cu_ctx_get) { PyErr_SetString(PyExc_ImportError, "cuLaunchKernel not found"); return NULL; }
    data_ptr_name = PyUnicode_InternFromString("data_ptr");
    return PyModule_Create(&module);
}
"""


@functools.lru_cache(None)
def load():
    """The extension module, or None where it cannot be built or loaded."""
    if os.environ.get("FUSION_TRITON_LAUNCHER", "c") != "c":
        return None
    include = sysconfig.get_paths()["include"]
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    key = content_hash(SOURCE, sys.version, include)
    path = cache_dir() / "launcher" / f"fusion_cuda_launcher_{key}{suffix}"
    try:
        if not valid_entry(path):
            write_entry(path, _compile(include, suffix))
        spec = importlib.util.spec_from_file_location("fusion_cuda_launcher", path,
                                                      loader=importlib.machinery.ExtensionFileLoader("fusion_cuda_launcher", str(path)))
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        return mod
    except Exception as e:  # no compiler, headers or driver: Triton's launcher it is
        print(f"pytest-fusion: using Triton's launcher ({type(e).__name__}: {str(e)[:200]})", file=sys.stderr)
        return None


def _compile(include: str, suffix: str) -> bytes:
    cc = os.environ.get("CC", "gcc")
    with tempfile.TemporaryDirectory(prefix="fusion-launcher-") as tmp:
        src, out = Path(tmp) / "launcher.c", Path(tmp) / f"launcher{suffix}"
        src.write_text(SOURCE)
        proc = subprocess.run([cc, "-O2", "-shared", "-fPIC", f"-I{include}", str(src), "-o", str(out), "-ldl"],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr[-2000:])
        return out.read_bytes()
