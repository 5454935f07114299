"""Sizes and times: parsing marker arguments and printing measurements."""
from __future__ import annotations

import re

# exact, case-sensitive units: "KB" is 1000 bytes, "KiB" 1024; "kb" or "XB" is an error
SIZE_UNITS = {
    "B": 1,
    "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
    "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([A-Za-z]+)\s*$")


def parse_size(value) -> int:
    """A byte count from an int (bytes) or a string such as "80 MB" or "1.5 GiB"."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"a size is an int of bytes or a string like '80 MB', not {type(value).__name__} {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"a size cannot be negative: {value}")
        return value
    m = _SIZE.match(value)
    if not m:
        raise ValueError(f"cannot read {value!r} as a size: write a number and a unit, like '80 MB'")
    number, unit = m.groups()
    if unit not in SIZE_UNITS:
        raise ValueError(f"unknown size unit {unit!r} in {value!r} (units: {', '.join(SIZE_UNITS)})")
    return round(float(number) * SIZE_UNITS[unit])


def format_size(n: int | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GB", 10**9), ("MB", 10**6), ("KB", 10**3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{n} B"


def format_ms(ms: float | None) -> str:
    if ms is None:
        return "-"
    if ms >= 1000:
        return f"{ms / 1000:.3g} s"
    if ms >= 1:
        return f"{ms:.3g} ms"
    if ms >= 1e-3:
        return f"{ms * 1e3:.3g} us"
    return f"{ms * 1e6:.3g} ns"


def plural(n: int, word: str) -> str:
    if n == 1:
        return f"{n} {word}"
    return f"{n} {word}" + ("es" if word.endswith(("ch", "sh", "s", "x")) else "s")


def launch_summary(launch: dict | None) -> str:
    """One line on a kernel's launch: its configuration and, when several were
    timed, how the others did, and how long compiling took ("XBLOCK=1 RBLOCK=4096
    num_warps=16, 2048 programs; fastest of 3 timed: 33.1 us (others 35.0, 41.2 us);
    compiled in 0.21 s (the slowest of 3 candidates, compiled at once)")."""
    if not launch:
        return ""
    cfg = launch["config"]
    blocks = " ".join(f"{k}={v}" for k, v in cfg.items() if k.endswith("BLOCK") or k == "num_warps")
    text = f"{blocks}, {cfg.get('grid', '?')} program{'s' if cfg.get('grid') != 1 else ''}"
    timed = sorted(us for _, us in launch.get("timed") or [])
    if len(timed) > 1:
        text += f"; fastest of {len(timed)} timed: {timed[0]:.1f} us (others {', '.join(f'{t:.1f}' for t in timed[1:])} us)"
        text += " on the first call's tensors" if launch.get("timed_on") == "call" else ""
    elif launch.get("tuned_earlier"):
        text += "; chosen by an earlier run's timing (cache)"
    if launch.get("compile_s") is not None:
        text += f"; compiled in {launch['compile_s']:.2f} s"
        text += f" (the slowest of {len(timed)} candidates, compiled at once)" if len(timed) > 1 else ""
    if launch.get("dependent"):
        text += "; launched while the kernel before it finishes (PDL)"
    how = {"interpreter": "Triton's interpreter", "jit": "plain Triton launch: the fast path failed"}.get(launch.get("launcher"))
    return text + (f"; {how}" if how else "")
