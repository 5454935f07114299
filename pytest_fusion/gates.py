"""Markers + measurements -> verdicts: one gate entry per checked quantity, a
one-line reason per failure (`expected 1 kernel, generated 3 (+2)`), and the
report section that shows why (kernels, fused ATen ops, launches, bytes, times,
what broke fusion)."""
from __future__ import annotations

import dataclasses

from .units import format_ms, format_size, launch_summary, plural

NOTHING_TO_MEASURE = "nothing to measure: the test made no call of a compiled function"


@dataclasses.dataclass
class Context:
    device: str  # "cpu" | "cuda"
    backend: str  # "fusion" | "inductor"
    measured: bool  # some compiled call was profiled
    timing_off: str | None = None  # why timing gates are not evaluated, by the user's choice
    timing_skip: str | None = None  # why timing cannot be trusted here (skips the test)
    ncu: bool = False  # --fusion-ncu: DRAM bytes measured by Nsight Compute gate too


@dataclasses.dataclass
class Verdict:
    gates: list[dict]
    failures: list[str]
    skips: list[str]

    def line(self) -> str:
        return "; ".join(self.failures)


def _gate(marker, expected, measured, passed, message) -> dict:
    return {"marker": marker, "expected": expected, "measured": measured, "passed": passed, "message": message}


def _exact(marker, expected, measured, noun, verb, detail="", per=""):
    if measured == expected:
        return _gate(marker, expected, measured, True, f"{verb} {plural(measured, noun)}{per}, as expected")
    extra = f": {detail}" if detail else ""
    return _gate(marker, expected, measured, False,
                 f"expected {plural(expected, noun)}{per}, {verb} {measured} ({measured - expected:+d}){extra}")


def _at_most(marker, limit, measured, fmt, what, verb="measured"):
    if measured <= limit:
        return _gate(marker, limit, measured, True, f"{verb} {fmt(measured)}{what} (at most {fmt(limit)})")
    if fmt is str:
        over = f"{measured - limit:+d}"
    else:
        frac = (measured - limit) / limit if limit else None
        over = f"+{fmt(measured - limit)}" if frac is None else f"+{frac:.1%}" if frac < 0.1 else f"+{frac:.0%}"
    return _gate(marker, limit, measured, False, f"expected at most {fmt(limit)}{what}, {verb} {fmt(measured)} ({over})")


def _unmeasured(marker, expected, reason, skip=True) -> dict:
    g = _gate(marker, expected, None, None, reason)
    g["skip"] = skip
    return g


def label(g: dict) -> str:
    """A gate's name in one-line reasons: stacked min_speedup gates say which reference."""
    return f"{g['marker']} over {g['over']}" if "over" in g else g["marker"]


def _launches(marker, spec, metrics, ctx, exact: bool) -> dict:
    n = spec["n"]
    if metrics.get("launches") is None:
        reason = "nothing to profile: the test made no call of a compiled function (use fusion.run, or call what fusion.compile or torch.compile returned)"
        return _gate(marker, n, None, False, reason)
    if exact:
        return _exact(marker, n, metrics["launches"], "launch", "measured", per=" per call")
    return _at_most(marker, n, metrics["launches"], str, " launches per call")


def _speedup(spec, metrics, ctx) -> dict:
    g = _speedup_verdict(spec, metrics, ctx)
    g.update(over=spec["over"], device=spec["device"])  # which of the stacked marks
    return g


def _speedup_verdict(spec, metrics, ctx) -> dict:
    over, x = spec["over"], spec["x"]
    marker = "min_speedup"
    if spec["device"] is not None and spec["device"] != ctx.device:
        # not applicable here by the marker's own terms: recorded as n/a, the test's
        # other gates decide (a CPU CI run still checks counts and bytes)
        return _unmeasured(marker, x, f"n/a: applies on {spec['device']} only (device={spec['device']!r}); this run is on {ctx.device}", skip=False)
    if over == "inductor" and ctx.backend == "inductor":
        return _unmeasured(marker, x, "over='inductor' with --fusion-backend=inductor would compare TorchInductor with itself")
    if ctx.timing_off:
        return _unmeasured(marker, x, f"not measured: {ctx.timing_off}", skip=False)
    if ctx.timing_skip:
        return _unmeasured(marker, x, f"not measured: {ctx.timing_skip}")
    speedup = metrics.get("speedup", {}).get(over)
    if speedup is None:
        return _gate(marker, x, None, False, "nothing was timed: the test made no call of a compiled function")
    med = metrics["median_ms"]
    ours = "inductor" if ctx.backend == "inductor" else "fusion"
    how = f"{over} {format_ms(med[over])}, {ours} {format_ms(med[ours])}, median of {len(metrics['times_ms'][ours])}"
    if speedup >= x:
        return _gate(marker, x, speedup, True, f"{speedup:.2f}x over {over}, at least {x:g}x ({how})")
    return _gate(marker, x, speedup, False, f"expected at least {x:g}x over {over}, measured {speedup:.2f}x ({how})")


def _dram(limit: int, metrics: dict, ctx: Context) -> dict:
    """max_memory_traffic against the DRAM bytes ncu measured: the hardware's figure
    beside the compiler's count."""
    marker = "max_memory_traffic.dram"
    if ctx.device != "cuda":
        return _unmeasured(marker, limit, f"n/a: ncu measures CUDA kernels; this run is on {ctx.device}", skip=False)
    dram = metrics.get("dram_bytes")
    if dram is None:
        return _gate(marker, limit, None, False, NOTHING_TO_MEASURE)
    return _at_most(marker, limit, dram["read"] + dram["write"], format_size, " of DRAM traffic per call (ncu)")


def evaluate(spec: list[tuple[str, dict]], metrics: dict, ctx: Context) -> Verdict:
    gates: list[dict] = []
    for name, args in spec:
        if name in ("max_memory_traffic", "expect_graph_breaks") and not ctx.measured:
            # no call: 0 bytes and 0 graph breaks would pass a gate that judged nothing
            gates.append(_gate(name, args.get("n", args.get("bytes")), None, False, NOTHING_TO_MEASURE))
            continue
        if name == "expect_kernels":
            gates.append(_exact(name, args["n"], metrics["kernels"], "kernel", "generated"))
            for key, noun in (("extern", "extern call"), ("fallback", "fallback")):
                if args[key] is None:
                    continue
                measured = metrics.get(key + "s")
                if measured is None:
                    gates.append(_unmeasured(f"{name}.{key}", args[key], f"TorchInductor's {noun} count is not measured"))
                else:
                    detail = ", ".join(metrics.get("fallback_ops", [])) if key == "fallback" else ""
                    gates.append(_exact(f"{name}.{key}", args[key], measured, noun, "made", detail))
        elif name in ("expect_launches", "max_launches"):
            gates.append(_launches(name, args, metrics, ctx, exact=name == "expect_launches"))
        elif name == "max_memory_traffic":
            total = metrics.get("bytes_total")
            if total is None:
                gates.append(_unmeasured(name, args["bytes"], "TorchInductor reported no byte count (it counts the graphs it compiles, not those from its FX graph cache)"))
            else:
                gates.append(_at_most(name, args["bytes"], total, format_size, " of memory traffic per call", "moved"))
            if ctx.ncu:
                gates.append(_dram(args["bytes"], metrics, ctx))
        elif name == "expect_graph_breaks":
            reasons = metrics.get("graph_break_reasons", [])
            gates.append(_exact(name, args["n"], metrics["graph_breaks"], "graph break", "Dynamo made", "; ".join(reasons[:3])))
        elif name == "max_peak_memory":
            peak = metrics.get("peak_memory_bytes")
            if peak is None:
                gates.append(_gate(name, args["bytes"], None, False, NOTHING_TO_MEASURE))
            else:
                gates.append(_at_most(name, args["bytes"], peak, format_size, " peak memory per call"))
        elif name == "min_speedup":
            gates.append(_speedup(args, metrics, ctx))
    failures = [f"{g['marker']}: {g['message']}" if "." in g["marker"] else g["message"] for g in gates if g["passed"] is False]
    skips = [f"{label(g)}: {g['message']}" for g in gates if g["passed"] is None and g.pop("skip")]
    for g in gates:
        g.pop("skip", None)
    return Verdict(gates, failures, skips)


def speed_failed(verdict: Verdict) -> bool:
    """A min_speedup gate failed: the one verdict that timing the test again can change."""
    return any(g["marker"] == "min_speedup" and g["passed"] is False and g["measured"] is not None
               for g in verdict.gates)


def section(verdict: Verdict | None, graphs: list, metrics: dict) -> str:
    """The failure's report section: gates, then what was compiled and measured."""
    lines = []
    if verdict is not None and verdict.gates:
        lines.append("gates:")
        for g in verdict.gates:
            mark = {True: "ok  ", False: "FAIL", None: "skip"}[g["passed"]]
            lines.append(f"  {mark} {label(g)}: {g['message']}")
    for g in graphs:
        lines.append(
            f"graph {g.graph_id} ({g.kind}, {g.device}): {plural(g.aten_nodes, 'ATen op')} -> {plural(len(g.kernels), 'kernel')}, "
            f"{plural(len(g.externs), 'extern')}, {plural(len(g.fallbacks), 'fallback')}, compiled in {g.compile_time_s:.2f} s"
            + (f" [{g.note}]" if g.note else "")
        )
        for k in g.kernels:
            lines.append(
                f"  {k.name}: {k.kind}, {k.numel}x{k.rnumel}, fuses {', '.join(k.aten_ops) or '-'}"
                f" ({', '.join(k.aten_nodes)}), reads {format_size(k.bytes_read)}, writes {format_size(k.bytes_written)}"
            )
            if k.launch:
                lines.append(f"    launch: {launch_summary(k.launch)}")
            if k.split_reason:
                lines.append(f"    not fused with the kernel before: {k.split_reason}")
        for c in g.externs + g.fallbacks:
            why = f": {c.reason}" if c.reason else ""
            lines.append(f"  {c.kind} {c.op} ({c.aten_node or c.name}){why}")
    if not graphs and metrics.get("externs") is None and metrics.get("kernels") is not None:
        lines.append(f"kernels: {metrics['kernels']} (TorchInductor's count)")
    if metrics.get("launches") is not None:
        names = metrics.get("launch_names", [])
        shown = ", ".join(n[:60] for n in names[:12]) + (", ..." if len(names) > 12 else "")
        lines.append(f"launches per call: {metrics['launches']}" + (f": {shown}" if names else ""))
    if metrics.get("bytes_total") is not None:
        lines.append(
            f"bytes per call: {format_size(metrics['bytes_total'])}"
            + (f" (read {format_size(metrics['bytes_read'])}, written {format_size(metrics['bytes_written'])})"
               if metrics.get("bytes_read") is not None else "")
        )
    if metrics.get("dram_bytes"):
        d = metrics["dram_bytes"]
        lines.append(f"DRAM bytes per call (ncu): {format_size(d['read'] + d['write'])} (read {format_size(d['read'])}, "
                     f"written {format_size(d['write'])}, {plural(d['kernels'], 'kernel')})")
    if metrics.get("peak_memory_bytes") is not None:
        lines.append(f"peak memory per call: {format_size(metrics['peak_memory_bytes'])}")
    if metrics.get("median_ms"):
        times = ", ".join(f"{k} {format_ms(v)}" for k, v in metrics["median_ms"].items())
        speed = ", ".join(f"{v:.2f}x over {k}" for k, v in metrics.get("speedup", {}).items())
        lines.append(f"median time per call: {times}" + (f" ({speed})" if speed else ""))
    for line in metrics.get("retimed_after", []):
        lines.append(f"timed again after: {line}")
    if metrics.get("compile_s"):
        lines.append("compile (first call): " + ", ".join(f"{k} {v:.2f} s" for k, v in metrics["compile_s"].items()))
    if metrics.get("graph_breaks"):
        lines.append(f"graph breaks: {metrics['graph_breaks']}: " + "; ".join(metrics["graph_break_reasons"]))
    return "\n".join(lines)
