"""pytester runs of small fusion tests. In-process (torch is imported once) unless
a test needs a process of its own (xdist, Dynamo state); tiny tensors and few
timing rounds keep the whole folder quick on a 2-core machine."""
from __future__ import annotations

import pytest
import torch

pytest_plugins = ["pytester"]


def pytest_configure(config):
    # pytester's in-process runs drop the modules first imported inside them; Dynamo
    # registers its backends at import and would see them twice. Import them here.
    import compiler  # noqa: F401

    torch._dynamo.list_backends(exclude_tags=())
    torch.compile(lambda x: x.sin(), backend="fusion", dynamic=False)(torch.randn(3))
    torch._dynamo.reset()


FAST = ["-p", "no:cacheprovider", "--fusion-rounds=2", "--fusion-warmup=1"]
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def fusion_results(run) -> dict[str, dict]:
    """nodeid -> the fusion_result dict on that test's report (in-process runs)."""
    reports = run.reprec.getreports("pytest_runtest_logreport")
    return {r.nodeid: r.fusion_result for r in reports if getattr(r, "fusion_result", None)}


@pytest.fixture
def run(pytester):
    """run(source, *args) -> RunResult of the test file `source`, in this process."""

    def go(source: str, *args: str, name: str = "test_it"):
        pytester.makepyfile(**{name: source})
        return pytester.runpytest_inprocess(*FAST, *args)

    return go
