"""The per-test result dict (TEAM.md report schema, test part) attached to the
TestReport as `fusion_result`, its user_properties, and the summary table row."""
from __future__ import annotations

from . import markers
from .units import format_size


def _outcome(report, state) -> str:
    if report.passed:
        return "passed"
    if report.skipped:
        return "skipped"
    if report.when != "call" or (state is not None and state.error):
        return "error"
    return "failed"


def _message(report) -> str:
    if report.passed:
        return ""
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    crash = getattr(longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(longrepr or "")
    text = text.removeprefix("Failed: ")
    return text.strip().splitlines()[0] if text.strip() else ""


def _unevaluated(item, why: str) -> list[dict]:
    gates = []
    for name, args in markers.gates_of(item):
        expected = args.get("n", args.get("bytes", args.get("x")))
        gate = {"marker": name, "expected": expected, "measured": None, "passed": None, "message": why}
        if name == "min_speedup":
            gate.update(over=args["over"], device=args["device"])
        gates.append(gate)
    return gates


def build(item, report, state) -> dict:
    """Never raises: a result that cannot be built says why in its message."""
    result = {
        "nodeid": report.nodeid,
        "outcome": _outcome(report, state),
        "duration_s": report.duration,
        "message": _message(report),
        "gates": [],
        "graphs": [],
        "metrics": None,
        "baseline": None,
    }
    try:
        if state is not None and state.verdict is not None:
            result["gates"] = state.verdict.gates
        else:
            result["gates"] = _unevaluated(item, f"not evaluated: the test {result['outcome']} before its gates")
        if state is not None:
            result["graphs"] = [g.to_dict() for g in state.graphs]
            result["metrics"] = state.final_metrics if state.final_metrics is not None else state.metrics
    except Exception as e:  # keep the report; say what went wrong
        result["message"] = (result["message"] + f" [pytest-fusion: result incomplete: {type(e).__name__}: {e}]").strip()
    return result


def user_properties(result: dict) -> list[tuple[str, object]]:
    """Key figures for JUnit XML and xdist."""
    m = result.get("metrics") or {}
    props = [
        ("fusion_kernels", m.get("kernels")),
        ("fusion_launches", m.get("launches")),
        ("fusion_bytes", m.get("bytes_total")),
        ("fusion_dram_bytes", _dram_total(m)),
        ("fusion_graph_breaks", m.get("graph_breaks")),
        ("fusion_peak_memory_bytes", m.get("peak_memory_bytes")),
    ]
    for over, x in (m.get("speedup") or {}).items():
        props.append((f"fusion_speedup_{over}", round(x, 4)))
    props.append(("fusion_verdict", result["outcome"]))
    return [(k, v) for k, v in props if v is not None]


def _dram_total(m: dict) -> int | None:
    d = m.get("dram_bytes")
    return None if d is None else d["read"] + d["write"]


def summary_row(result: dict) -> list[str]:
    """test, kernels, launches, bytes (and what ncu measured), speedup, verdict"""
    m = result.get("metrics") or {}

    def show(v):
        return "-" if v is None else str(v)

    speed = ", ".join(f"{x:.2f}x {over}" for over, x in (m.get("speedup") or {}).items()) or "-"
    dram = _dram_total(m)
    moved = format_size(m.get("bytes_total")) + (f" (ncu {format_size(dram)})" if dram is not None else "")
    return [result["nodeid"], show(m.get("kernels")), show(m.get("launches")), moved, speed, result["outcome"]]
