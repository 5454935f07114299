"""Replay a compiled graph as one CUDA graph (config.cuda_graphs, off by default).

The graph is captured on the second call (the first warms up: compiled kernels,
cuBLAS handles) with the caller's own tensors, so it replays only when a call
passes tensors at the same addresses (the usual loop over fixed buffers and
parameters); other calls run the graph's kernels as usual. Outputs live in
the CUDA graph's memory pool and are overwritten by the next replay."""
from __future__ import annotations

import torch


def wrap(call):
    state: dict = {"calls": 0, "graph": None, "key": None, "outs": None}

    def run(args):
        key = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else a for a in args)
        if state["graph"] is not None and key == state["key"]:
            args.clear()
            state["graph"].replay()
            return state["outs"]
        state["calls"] += 1
        if state["calls"] < 2 or state["graph"] is not None:
            return call(args)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outs = call(list(args))
        args.clear()
        state.update(graph=graph, key=key, outs=outs)
        graph.replay()
        return outs

    run._boxed_call = True
    return run
