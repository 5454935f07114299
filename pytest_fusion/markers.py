"""The fusion markers: their signatures, help lines and validation.

Each marker is a function with the marker's signature that checks its arguments
and returns them normalized (sizes in bytes). A bad argument is a usage error
naming the test and the marker, raised at collection.
"""
from __future__ import annotations

import inspect
import math

from .units import parse_size


class MarkerError(ValueError):
    pass


def _count(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise MarkerError(f"{what} must be an int, not {type(value).__name__} {value!r}")
    if value < 0:
        raise MarkerError(f"{what} cannot be negative: {value}")
    return value


def _size(value, what: str) -> int:
    try:
        return parse_size(value)
    except ValueError as e:
        raise MarkerError(f"{what}: {e}") from None


def _choice(value, what: str, choices: tuple):
    if value not in choices:
        raise MarkerError(f"{what} must be one of {', '.join(map(repr, choices))}, not {value!r}")
    return value


def expect_kernels(n, *, extern=None, fallback=None):
    """the compiled graphs generate exactly n kernels (externs, fallbacks: exact counts when given)"""
    return {
        "n": _count(n, "n"),
        "extern": None if extern is None else _count(extern, "extern"),
        "fallback": None if fallback is None else _count(fallback, "fallback"),
    }


def expect_launches(n):
    """exactly n device kernel launches per call, profiled after warm-up"""
    return {"n": _count(n, "n")}


def max_launches(n):
    """at most n device kernel launches per call, profiled after warm-up"""
    return {"n": _count(n, "n")}


def max_memory_traffic(size):
    """bytes read + written per call at most size ("80 MB", "1 GiB", or an int of bytes)"""
    return {"bytes": _size(size, "size")}


def min_speedup(x, *, over="eager", device=None):
    """median time of `over` ("eager"|"inductor") / median time of ours >= x; device="cuda"|"cpu" limits it to that device; marks with different over or device stack"""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x < math.inf:  # NaN fails too
        raise MarkerError(f"x must be a positive finite number, not {x!r}")
    return {
        "x": float(x),
        "over": _choice(over, "over", ("eager", "inductor")),
        "device": _choice(device, "device", (None, "cpu", "cuda")),
    }


def expect_graph_breaks(n):
    """Dynamo makes exactly n graph breaks"""
    return {"n": _count(n, "n")}


def max_peak_memory(size):
    """peak memory allocated during a call, above what was live before it, at most size"""
    return {"bytes": _size(size, "size")}


def fusion_options(*, rounds=None, warmup=None, tolerance_scale=None, no_perf=None, device=None):
    """per-test settings that override the --fusion-* options and ini keys"""
    out = {}
    if rounds is not None:
        if _count(rounds, "rounds") < 1:
            raise MarkerError("rounds must be at least 1")
        out["rounds"] = rounds
    if warmup is not None:
        out["warmup"] = _count(warmup, "warmup")
    if tolerance_scale is not None:
        if isinstance(tolerance_scale, bool) or not isinstance(tolerance_scale, (int, float)) or not tolerance_scale > 0:
            raise MarkerError(f"tolerance_scale must be a positive number, not {tolerance_scale!r}")
        out["tolerance_scale"] = float(tolerance_scale)
    if no_perf is not None:
        if not isinstance(no_perf, bool):
            raise MarkerError(f"no_perf must be True or False, not {no_perf!r}")
        out["no_perf"] = no_perf
    if device is not None:
        out["device"] = _choice(device, "device", ("auto", "cpu", "cuda"))
    return out


GATES = {f.__name__: f for f in (
    expect_kernels, expect_launches, max_launches, max_memory_traffic,
    min_speedup, expect_graph_breaks, max_peak_memory,
)}
MARKERS = {**GATES, "fusion_options": fusion_options}


def help_lines() -> list[str]:
    """`markers` ini lines: what `pytest --markers` shows and --strict-markers accepts."""
    return [f"{name}{_signature(fn)}: {fn.__doc__}" for name, fn in MARKERS.items()]


def _signature(fn) -> str:
    return str(inspect.signature(fn))


def _normalize(mark):
    fn = MARKERS[mark.name]
    try:
        inspect.signature(fn).bind(*mark.args, **mark.kwargs)
    except TypeError as e:
        raise MarkerError(f"{e} (signature: {mark.name}{_signature(fn)})") from None
    return fn(*mark.args, **mark.kwargs)


def problems(item) -> list[str]:
    """Usage errors of every fusion marker that applies to `item` (closest or not)."""
    out = []
    for name in MARKERS:
        for mark in item.iter_markers(name):
            try:
                _normalize(mark)
            except MarkerError as e:
                out.append(f"{item.nodeid}: @pytest.mark.{name}{_call_repr(mark)}: {e}")
            except Exception as e:  # an argument too odd to compare (a tensor, say)
                out.append(f"{item.nodeid}: @pytest.mark.{name}{_call_repr(mark)}: {type(e).__name__}: {e}")
    return out + _stacking_problems(item)


def speed_key(args: dict) -> tuple:
    """What tells stacked min_speedup marks apart: one gate per key."""
    return args["over"], args["device"]


def _stacking_problems(item) -> list[str]:
    """Two marks of one marker on one node (function, class or module) leave no
    closer one to win: one would be dropped silently. min_speedup marks stack by
    (over, device), so for them two with the same key."""
    out = []
    for node in item.listchain():
        seen = {}
        where = f"on one {type(node).__name__.lower()}"
        for mark in (m for m in node.own_markers if m.name in MARKERS):
            try:
                args = _normalize(mark)
            except Exception:
                continue  # a bad argument: reported by problems()
            key = (mark.name, speed_key(args) if mark.name == "min_speedup" else None)
            if key in seen:
                both = f"{item.nodeid}: @pytest.mark.{mark.name}{_call_repr(seen[key])} and @pytest.mark.{mark.name}{_call_repr(mark)}"
                if mark.name == "min_speedup":
                    over, device = key[1]
                    out.append(f"{both}: two marks over={over!r} with device={device!r} {where}; "
                               "keep one, or give each its own device")
                else:
                    out.append(f"{both}: two {mark.name} marks {where}; keep one")
            seen.setdefault(key, mark)
    return out


def _call_repr(mark) -> str:
    parts = [repr(a) for a in mark.args] + [f"{k}={v!r}" for k, v in mark.kwargs.items()]
    return f"({', '.join(parts)})"


def gates_of(item) -> list[tuple[str, dict]]:
    """(marker name, normalized arguments) of each gate: the closest mark of each
    marker (function over class over module), except min_speedup, where marks
    stack: one gate per (over, device), the closest mark with that key."""
    out = []
    for name in GATES:
        if name == "min_speedup":
            speeds: dict[tuple, dict] = {}
            for mark in item.iter_markers(name):  # closest first
                args = _normalize(mark)
                speeds.setdefault(speed_key(args), args)
            out += [(name, speeds[k]) for k in sorted(speeds, key=lambda k: (k[0], k[1] or ""))]
        elif (mark := item.get_closest_marker(name)) is not None:
            out.append((name, _normalize(mark)))
    return out


def options_of(item) -> dict:
    mark = item.get_closest_marker("fusion_options")
    return _normalize(mark) if mark is not None else {}
