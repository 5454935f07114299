"""The --fusion-* options, each also an ini key. Precedence: the test's
`fusion_options` marker > command line option > ini key > default."""
from __future__ import annotations

import argparse
import dataclasses

import pytest


@dataclasses.dataclass(frozen=True)
class Settings:
    device: str = "auto"  # auto | cpu | cuda
    backend: str = "fusion"  # fusion | inductor
    rounds: int = 20  # timing rounds (the median is reported)
    warmup: int = 3  # calls of each variant before timing and profiling
    no_perf: bool = False  # count gates only: no timing, no NVML energy loop
    tolerance_scale: float = 1.0  # scales the per-dtype tolerances of the eager comparison
    nvml_seconds: float = 2.0  # length of the NVML energy loop on GPU (0: off)
    retimes: int = 1  # a test whose speed gate failed is timed again this many times first
    ncu: bool = False  # DRAM bytes per call from Nsight Compute (CUDA; one child process per test)


def _choice(*choices):
    def parse(s: str) -> str:
        if s not in choices:
            raise ValueError(f"must be one of {', '.join(choices)}, not {s!r}")
        return s
    return parse


def _int(minimum: int):
    def parse(s) -> int:
        try:
            v = int(s)
        except (TypeError, ValueError):
            raise ValueError(f"must be an integer, not {s!r}") from None
        if v < minimum:
            raise ValueError(f"must be at least {minimum}, not {v}")
        return v
    return parse


def _float(positive: bool):
    def parse(s) -> float:
        try:
            v = float(s)
        except (TypeError, ValueError):
            raise ValueError(f"must be a number, not {s!r}") from None
        if v < 0 or (positive and v == 0) or v != v:
            raise ValueError(f"must be {'positive' if positive else 'zero or more'}, not {s}")
        return v
    return parse


def _bool(s) -> bool:
    if isinstance(s, bool):
        return s
    v = str(s).strip().lower()
    if v in ("1", "true", "yes", "on"):
        return True
    if v in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"must be true or false, not {s!r}")


# name -> (parser, help)
OPTIONS = {
    "device": (_choice("auto", "cpu", "cuda"), "device for fusion tests: auto (cuda when available), cpu or cuda"),
    "backend": (_choice("fusion", "inductor"), "compile with our compiler (fusion) or run the same gates against TorchInductor"),
    "rounds": (_int(1), "timing rounds per variant; the median is reported"),
    "warmup": (_int(0), "calls of each variant before profiling and timing"),
    "no_perf": (_bool, "count gates only: skip timing and NVML"),
    "tolerance_scale": (_float(True), "scale the per-dtype tolerances of the comparison with eager"),
    "nvml_seconds": (_float(False), "seconds of the NVML energy-per-call loop on GPU (0 turns it off)"),
    "retimes": (_int(0), "times a test whose speed gate failed is timed again before it fails (0: never): "
                         "a stall of a shared machine, not the code, may have slowed the first timing; "
                         "every failed attempt is reported"),
    "ncu": (_bool, "measure DRAM bytes per call with Nsight Compute (ncu) on CUDA, re-running each measured test "
                   "under ncu; max_memory_traffic gates them too"),
}


def _argparse_type(name, parse):
    def convert(s):
        try:
            return parse(s)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    convert.__name__ = name
    return convert


def add_options(parser) -> None:
    group = parser.getgroup("fusion", "pytest-fusion: compiler gates")
    defaults = Settings()
    for name, (parse, help_) in OPTIONS.items():
        flag = "--fusion-" + name.replace("_", "-")
        default = getattr(defaults, name)
        if parse is _bool:
            group.addoption(flag, action="store_true", default=None, dest=f"fusion_{name}", help=help_)
        else:
            group.addoption(flag, default=None, dest=f"fusion_{name}", type=_argparse_type(name, parse),
                            help=f"{help_} (default: {default})")
        parser.addini(f"fusion_{name}", f"{help_} (default: {default})", default=None)
    # internal: the run under ncu that --fusion-ncu starts (see measure/ncu.py)
    group.addoption("--fusion-ncu-child", action="store_true", default=False, dest="fusion_ncu_child",
                    help=argparse.SUPPRESS)


def from_config(config) -> Settings:
    """The session's settings: option > ini > default. A bad ini value is a usage error."""
    values = {}
    for name, (parse, _) in OPTIONS.items():
        value = config.getoption(f"fusion_{name}")
        if value is None:
            raw = config.getini(f"fusion_{name}")
            if raw is None or raw == "":
                continue
            try:
                value = parse(raw.strip() if isinstance(raw, str) else raw)
            except ValueError as e:
                raise pytest.UsageError(f"ini key fusion_{name} = {raw!r}: {e}") from None
        values[name] = value
    return Settings(**values)


def for_item(base: Settings, item) -> Settings:
    from .markers import options_of

    return dataclasses.replace(base, **options_of(item))
