"""pytester runs of small fusion tests. In-process (torch is imported once) unless
a test needs a process of its own (xdist, Dynamo state); tiny tensors and few
timing rounds keep the whole folder quick on a 2-core machine."""
from __future__ import annotations

import pytest
import torch


def pytest_configure(config):
    # pytester's in-process runs drop the modules first imported inside them; Dynamo
    # registers its backends at import and would see them twice. Import them here.
    import compiler  # noqa: F401

    torch._dynamo.list_backends(exclude_tags=())
    torch.compile(lambda x: x.sin(), backend="fusion", dynamic=False)(torch.randn(3))
    torch._dynamo.reset()


# the CPU's figures (kernel names, launches) unless a test asks for cuda
FAST = ["-p", "no:cacheprovider", "--fusion-device=cpu", "--fusion-rounds=2", "--fusion-warmup=1"]


def _fusion_results(run) -> dict[str, dict]:
    reports = run.reprec.getreports("pytest_runtest_logreport")
    return {r.nodeid: r.fusion_result for r in reports if getattr(r, "fusion_result", None)}


@pytest.fixture
def results():
    """results(run_result) -> {nodeid: the fusion_result on that test's report}."""
    return _fusion_results


@pytest.fixture
def run(pytester):
    """run(source, *args) -> RunResult of the test file `source`, in this process."""

    def go(source: str, *args: str, name: str = "test_it"):
        pytester.makepyfile(**{name: source})
        return pytester.runpytest_inprocess(*FAST, *args)

    return go
