"""Turns a report document into what the templates show: per-test kernels with
their colours, the parsed ATen graph, formatted verdicts, the "why not fused" list.
Templates only lay this out; all decisions about content are made here."""
from __future__ import annotations

import json
import re

from ..units import launch_summary
from . import svg
from .highlight import highlight
from .merge import device_class_of
from .schema import bytes_total, summarize

VIEW_OPS = {"view", "_unsafe_view", "reshape", "permute", "expand", "squeeze", "unsqueeze", "t", "transpose",
            "slice", "select", "as_strided", "alias", "getitem", "unbind", "split", "split_with_sizes"}
BYTE_MARKERS = {"max_memory_traffic", "max_memory_traffic.dram", "max_peak_memory"}
TIMING = (("eager", "eager", "#8a8f98"), ("fusion", "fusion (ours)", "#2563eb"), ("inductor", "inductor", "#e07b00"))
NVML_UNITS = {"clock_sm_mhz": ("SM clock", "MHz"), "clock_mem_mhz": ("memory clock", "MHz"),
              "temperature_c": ("temperature", "°C"), "power_w": ("power", "W"),
              "energy_j_per_call": ("energy per call", "J"), "throttle_reasons": ("throttle reasons", "")}

_ASSIGN = re.compile(r'^\s*(\w+)(?:\s*:\s*"([^"]*)")?\s*=\s*(.+)$')
_ATEN = re.compile(r"torch\.ops\.(\w+)\.(\w+)(?:\.(\w+))?\(")
_IDENT = re.compile(r"\b[A-Za-z_]\w*\b")


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower()[:120] or "test"


def parse_aten_graph(code: str) -> list[dict]:
    """Nodes of an FX graph printed as code (GraphModule.print_readable), in order:
    [{name, op, type, inputs, line}]. Placeholders come from forward's signature;
    a final "output" node reads what is returned."""
    nodes: list[dict] = []
    known: set[str] = set()
    for raw in code.splitlines():
        line = raw.strip()
        if line.startswith("def forward("):
            params = line[len("def forward("):].rsplit(")", 1)[0]
            for m in re.finditer(r'(\w+)\s*(?::\s*"([^"]*)")?', params):
                if m.group(1) != "self":
                    nodes.append({"name": m.group(1), "op": "input", "type": m.group(2) or "", "inputs": [],
                                  "line": m.group(0)})
                    known.add(m.group(1))
            continue
        if line.startswith("return"):
            ins = [t for t in _IDENT.findall(line[6:]) if t in known]
            nodes.append({"name": "output", "op": "output", "type": f"{len(ins)} value(s)", "inputs": ins,
                          "line": line})
            continue
        stmt = line.split(";", 1)[0]  # drops the "x = None" frees print_readable appends
        m = _ASSIGN.match(stmt)
        if not m or line.startswith("#"):
            continue
        name, typ, rhs = m.groups()
        a = _ATEN.search(rhs)
        if a:
            op = a.group(2) if a.group(1) == "aten" else f"{a.group(1)}.{a.group(2)}"
            args = rhs[a.end():]
        elif re.match(r"^\w+\[\d+\]$", rhs.strip()) or rhs.startswith("operator.getitem"):
            op, args = "getitem", rhs
        else:
            op, args = rhs.split("(", 1)[0].split(".")[-1], rhs
        ins = list(dict.fromkeys(t for t in _IDENT.findall(args) if t in known))
        nodes.append({"name": name, "op": op, "type": typ or "", "inputs": ins, "line": stmt})
        known.add(name)
    return nodes


def fmt_value(marker: str, v) -> str:
    if v is None:
        return "not measured"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (int, float)) and marker in BYTE_MARKERS:
        return f"{svg.fmt_bytes(v)} ({int(v):,} B)"
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, dict):
        return ", ".join(f"{k}={fmt_value(marker, x)}" for k, x in v.items())
    if isinstance(v, list):
        return ", ".join(fmt_value(marker, x) for x in v)
    return str(v)


def _nvml_value(v) -> str:
    if isinstance(v, list):
        return ", ".join(map(str, v)) or "none"
    if isinstance(v, float):
        return f"{v:.4g}"
    return "—" if v is None else str(v)


def _kernel_language(k: dict) -> str:
    return k.get("target") or ("triton" if k["name"].startswith("triton") else "cpp")


def _split_source(source: str, name: str) -> tuple[str, str]:
    """(preamble, kernel): includes and declarations first, folded away in the page."""
    lines = source.strip("\n").splitlines()
    for i, ln in enumerate(lines):
        if name in ln:
            if i and lines[i - 1].lstrip().startswith("@"):
                i -= 1
            return "\n".join(lines[:i]).strip("\n"), "\n".join(lines[i:])
    return "", "\n".join(lines)


def _launch_plan(g: dict) -> list[str]:
    """Kernel and ATen calls in the order the wrapper makes them."""
    names = {k["name"] for k in g["kernels"]}
    calls = {c["name"]: c for c in g["externs"] + g["fallbacks"]}
    order = []
    for line in g.get("wrapper_source", "").splitlines():
        hit = next((n for n in names if re.search(rf"\b{re.escape(n)}\(", line)), None)
        if hit:
            order.append(hit)
            continue
        m = re.match(r"\s*(\w+)\s*=.*#\s*(\S+) \((extern|fallback)\)", line)
        if m and m.group(1) in calls:
            order.append(calls[m.group(1)]["op"])
    return order


def _graph_view(g: dict, colors: dict[str, str], uid: str) -> dict:
    members: dict[str, list[str]] = {}
    for k in g["kernels"]:
        for n in k["aten_nodes"]:
            members.setdefault(n, []).append(colors[k["name"]])
    roles = {c["aten_node"]: c["kind"] for c in g["externs"] + g["fallbacks"]}
    nodes = parse_aten_graph(g.get("aten_graph", ""))
    for n in nodes:
        n["colors"] = members.get(n["name"], [])
        if n["op"] in ("input", "output"):
            n["role"] = n["op"]
        elif n["colors"]:
            n["role"] = "kernel"
        else:
            n["role"] = roles.get(n["name"], "view")
        where = {"kernel": f"in {len(n['colors'])} kernel(s)", "extern": "extern call (library kernel)",
                 "fallback": "fallback: run through ATen", "view": "no kernel of its own (view or folded into users)"}
        n["title"] = f"{n['line']}\n{where.get(n['role'], '')}".strip()
    kernels = []
    for k in g["kernels"]:
        preamble, body = _split_source(k["source"], k["name"])
        lang = _kernel_language(k)
        kernels.append(dict(k, color=colors[k["name"]], language=lang, body_html=highlight(body, lang),
                            preamble_html=highlight(preamble, lang) if preamble else None,
                            preamble_lines=len(preamble.splitlines()), bytes_total=k["bytes_read"] + k["bytes_written"],
                            launch_text=launch_summary(k.get("launch")),
                            shape=f"{k.get('numel', 0):,}" + (f" × {k['rnumel']:,}" if k.get("rnumel", 1) > 1 else "")))
    calls = [dict(c, color=svg.EXTERN if c["kind"] == "extern" else svg.FALLBACK)
             for c in g["externs"] + g["fallbacks"]]
    bars = [(k["name"], k["bytes_read"], k["bytes_written"], k["color"]) for k in kernels]
    bars += [(c["op"], c.get("bytes_read", 0), c.get("bytes_written", 0), c["color"]) for c in calls]
    return dict(g, uid=uid, kernels_view=kernels, calls=calls, node_count=len(nodes),
                picture=svg.fusion_graph(nodes, f"fusion groups of graph {g.get('graph_id')}", uid),
                bytes_svg=svg.bytes_bars(bars, "bytes per kernel"),
                aten_html=highlight(g.get("aten_graph", ""), "python"),
                wrapper_html=highlight(g.get("wrapper_source", ""), "python"),
                ir_html=highlight(g.get("ir", ""), "text"), plan=_launch_plan(g))


def _why_not_fused(t: dict) -> list[dict]:
    out = []
    m = t.get("metrics") or {}
    for reason in m.get("graph_break_reasons") or []:
        out.append({"kind": "graph break", "what": "Dynamo", "reason": reason})
    for g in t.get("graphs", []):
        if g.get("note"):
            out.append({"kind": "not compiled", "what": f"graph {g.get('graph_id')}", "reason": g["note"]})
        for k in g["kernels"]:
            if k.get("split_reason"):
                out.append({"kind": "split", "what": k["name"], "reason": k["split_reason"]})
        for c in g["fallbacks"]:
            out.append({"kind": "fallback", "what": c["op"], "reason": c.get("reason") or "no lowering"})
    return out


def _bandwidth_rows(t: dict, kernel_colors: dict[str, str], kernel_bytes: dict[str, int]) -> list:
    m = t.get("metrics") or {}
    bw = m.get("bandwidth") or {}
    peak = bw.get("peak_gbps")
    if not peak:
        return []
    rows = []
    for name, ms in (m.get("kernel_times_ms") or {}).items():
        if ms and name in kernel_bytes:
            rows.append((name, kernel_bytes[name] / (ms * 1e-3) / 1e9, peak, kernel_colors.get(name, svg.EXTERN)))
    if bw.get("achieved_gbps") is not None:
        rows.append(("whole call", bw["achieved_gbps"], peak, "#2563eb"))
    return rows


def test_view(t: dict, uid: str) -> dict:
    m = t.get("metrics") or {}
    colors: dict[str, str] = {}
    for g in t.get("graphs", []):
        for k in g["kernels"]:
            colors.setdefault(k["name"], svg.color(len(colors)))
    graphs = [_graph_view(g, colors, f"{uid}-g{i}") for i, g in enumerate(t.get("graphs", []))]
    kernel_bytes = {k["name"]: k["bytes_read"] + k["bytes_written"] for g in t.get("graphs", []) for k in g["kernels"]}
    measured = m.get("launch_names") or []
    launches = [(n, colors.get(n, svg.EXTERN)) for n in (measured or [n for g in graphs for n in g["plan"]])]
    times = m.get("times_ms") or {}
    medians = m.get("median_ms") or {}
    floor_ms = None
    peak = (m.get("bandwidth") or {}).get("peak_gbps")
    if peak:
        floor_ms = (bytes_total(m) or 0) / (peak * 1e9) * 1e3
    gates = [dict(g, expected_text=fmt_value(g["marker"], g.get("expected")),
                  measured_text=fmt_value(g["marker"], g.get("measured")),
                  verdict={True: "passed", False: "failed", None: "skipped"}[g.get("passed")],
                  # stacked min_speedup gates: which reference each one is over
                  marker=f"{g['marker']} over {g['over']}" if g.get("over") else g["marker"])
             for g in t.get("gates", [])]
    nvml = [(NVML_UNITS.get(k, (k, ""))[0], _nvml_value(v), NVML_UNITS.get(k, (k, ""))[1])
            for k, v in (m.get("nvml") or {}).items()]
    baseline = t.get("baseline")
    deltas = []
    if baseline:
        for k, v in (baseline.get("deltas") or {}).items():
            if isinstance(v, dict):
                deltas.append((k, fmt_value(k, v.get("baseline", v.get("old"))),
                               fmt_value(k, v.get("measured", v.get("new"))),
                               fmt_value(k, v.get("delta", v.get("change")))))
            else:
                deltas.append((k, "", "", fmt_value(k, v)))
    return dict(
        t, uid=uid, graphs_view=graphs, gates_view=gates, why=_why_not_fused(t), launches=launches,
        launches_measured=bool(measured), m=m, nvml_rows=nvml, deltas=deltas, floor_ms=floor_ms,
        bytes_total=bytes_total(m) or 0,
        timing_svg=svg.timing([(label, times.get(key) or [], c) for key, label, c in TIMING], "timing per round"),
        medians=[(label, medians.get(key), c) for key, label, c in TIMING if medians.get(key) is not None],
        bandwidth_svg=svg.bandwidth(_bandwidth_rows(t, colors, kernel_bytes), "achieved bandwidth against peak"),
        gate_counts={v: [g["marker"] for g in gates if g["verdict"] == v] for v in ("failed", "passed", "skipped")},
    )


def document_view(doc: dict) -> dict:
    used: dict[str, int] = {}
    tests = []
    # failures first: they are what the reader came for; run order otherwise
    rank = {"failed": 0, "error": 0, "passed": 1, "skipped": 2}
    # a merge of several device classes: each test says which it ran on
    several = len({s["device_class"] for s in doc.get("sources") or []}) > 1
    for t in sorted(doc["tests"], key=lambda t: rank[t["outcome"]]):
        label = device_class_of(doc, t) if several else ""
        base = "t-" + slug(f"{t['nodeid']}-{label}" if label else t["nodeid"])
        used[base] = used.get(base, 0) + 1
        tests.append(dict(test_view(t, base if used[base] == 1 else f"{base}-{used[base]}"), device_label=label))
    summary = summarize(doc["tests"])
    total = max(len(tests), 1)
    bar = [(summary[k], k if k != "errors" else "error")
           for k in ("passed", "failed", "errors", "skipped") if summary[k]]
    return {"doc": doc, "tests": tests,
            "show_inductor": any((t["m"].get("speedup") or {}).get("inductor") for t in tests),
            "show_launches": any(t["m"].get("launches") is not None for t in tests), "summary": summary,
            "bar": [(n, cls, 100 * n / total) for n, cls in bar], "machine": doc["machine"],
            "options_text": " ".join(f"{k}={json.dumps(v, default=str)}" for k, v in doc.get("options", {}).items()),
            "sources": doc.get("sources") or [], "fmt_bytes": svg.fmt_bytes, "fmt_ms": svg.fmt_ms,
            "fmt_s": lambda v: "—" if v is None else f"{v:.2f} s"}
