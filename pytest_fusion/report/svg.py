"""Inline SVG charts for the HTML report: no scripts, no external assets.

Every function returns markupsafe.Markup; all text that goes in is escaped here."""
from __future__ import annotations

import math

from markupsafe import Markup, escape

# Distinct, print-safe hues; a kernel keeps its colour across every chart of a test.
PALETTE = ["#4e79a7", "#f28e2b", "#59a14f", "#b07aa1", "#e15759", "#76b7b2",
           "#edc948", "#9c755f", "#ff9da7", "#637939", "#3182bd", "#d6616b"]
EXTERN = "#8c8c9a"
FALLBACK = "#d62728"
FONT = 'font-family="system-ui,-apple-system,Segoe UI,Roboto,Helvetica,Arial,sans-serif"'


def color(i: int) -> str:
    return PALETTE[i % len(PALETTE)]


def fmt_bytes(n: float | None) -> str:
    """Decimal units, as the markers read them ("80 MB" = 80e6 bytes)."""
    if not isinstance(n, (int, float)):  # None or absent: not measured
        return "—"
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1000
    return ""


def fmt_ms(v: float) -> str:
    if v >= 100:
        return f"{v:.0f} ms"
    if v >= 1:
        return f"{v:.3g} ms"
    if v >= 0.001:
        return f"{v * 1000:.3g} µs"
    return f"{v * 1e6:.3g} ns"


def _gbps(v: float) -> str:
    return f"{v:,.0f}" if v >= 100 else f"{v:.3g}"


def _svg(width: float, height: float, body: list[str], label: str) -> Markup:
    return Markup(
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width:.0f} {height:.0f}" '
        f'width="{width:.0f}" height="{height:.0f}" role="img" aria-label="{escape(label)}" {FONT}>'
        + "".join(body) + "</svg>")


def _text(x, y, s, size=12, anchor="start", fill="#1f2328", weight="normal", cls="") -> str:
    c = f' class="{cls}"' if cls else ""
    return (f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" '
            f'fill="{fill}" font-weight="{weight}"{c}>{escape(s)}</text>')


def _nice_ticks(hi: float, n: int = 5) -> list[float]:
    if hi <= 0:
        return [0.0]
    raw = hi / n
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    return [i * step for i in range(int(hi / step) + 2) if i * step <= hi * 1.0001 + step * 0.5]


# --- fusion groups ------------------------------------------------------------

NODE_W, NODE_H, GAP_X, GAP_Y, PAD = 132, 36, 14, 26, 12
MAX_NODES = 400


def fusion_graph(nodes: list[dict], label: str, uid: str) -> Markup:
    """The ATen graph as a layered DAG, each node filled with the colour(s) of the
    kernel(s) it went into. nodes: [{name, op, type, inputs, colors, role, title}]
    where role is "input" | "kernel" | "extern" | "fallback" | "view" | "output".
    Edges between nodes of one kernel are drawn in its colour (the value stays in
    registers); other edges are grey (the value goes through memory)."""
    if not nodes:
        return Markup("")
    if len(nodes) > MAX_NODES:
        return Markup(f'<p class="muted">Graph too large to draw ({len(nodes)} nodes).</p>')
    by_name = {n["name"]: n for n in nodes}
    layer: dict[str, int] = {}
    for n in nodes:  # nodes come in topological order (FX graph order)
        layer[n["name"]] = 1 + max((layer[i] for i in n["inputs"] if i in layer), default=-1)
    # inputs sit just above their first reader, not all in one wide top row
    first_use: dict[str, int] = {}
    for n in nodes:
        for i in n["inputs"]:
            first_use[i] = min(first_use.get(i, layer[n["name"]]), layer[n["name"]])
    for n in nodes:
        if n["role"] == "input" and n["name"] in first_use:
            layer[n["name"]] = first_use[n["name"]] - 1
    layers: dict[int, list[dict]] = {}
    for n in nodes:
        layers.setdefault(layer[n["name"]], []).append(n)
    pos: dict[str, tuple[float, float]] = {}
    width = max(len(v) for v in layers.values()) * (NODE_W + GAP_X) - GAP_X + 2 * PAD
    for li in sorted(layers):
        row = layers[li]
        # order by where the parents sit (fewer crossings), then by kernel
        row.sort(key=lambda n: (_mean([pos[i][0] for i in n["inputs"] if i in pos], 0), n["colors"][:1]))
        row_w = len(row) * (NODE_W + GAP_X) - GAP_X
        x0 = (width - row_w) / 2
        for j, n in enumerate(row):
            pos[n["name"]] = (x0 + j * (NODE_W + GAP_X), PAD + li * (NODE_H + GAP_Y))
    height = PAD * 2 + (max(layers) + 1) * (NODE_H + GAP_Y) - GAP_Y
    body: list[str] = []
    for n in nodes:
        x2, y2 = pos[n["name"]]
        for i in n["inputs"]:
            if i not in pos:
                continue
            x1, y1 = pos[i]
            shared = set(by_name[i]["colors"]) & set(n["colors"])
            stroke = (sorted(shared)[0] if shared and n["role"] == "kernel" else "#b4b9c1")
            w = 2 if shared and n["role"] == "kernel" else 1.2
            ax, ay, bx, by = x1 + NODE_W / 2, y1 + NODE_H, x2 + NODE_W / 2, y2
            my = (ay + by) / 2
            body.append(f'<path d="M{ax:.1f},{ay:.1f} C{ax:.1f},{my:.1f} {bx:.1f},{my:.1f} {bx:.1f},{by:.1f}" '
                        f'fill="none" stroke="{stroke}" stroke-width="{w}"/>')
    for k, n in enumerate(nodes):
        x, y = pos[n["name"]]
        body.append(_node(n, x, y, f"{uid}-{k}"))
    return _svg(width, height, body, label)


def _mean(xs, default):
    return sum(xs) / len(xs) if xs else default


def _node(n: dict, x: float, y: float, clip_id: str) -> str:
    role, colors = n["role"], n["colors"]
    out = [f'<g class="node {role}"><title>{escape(n["title"])}</title>']
    if role in ("input", "output"):
        out.append(f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="18" '
                   f'fill="#ffffff" stroke="#9aa1ab" stroke-dasharray="{"" if role == "input" else "4 3"}"/>')
        fg = "#3b4048"
    elif role == "view":
        out.append(f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="5" '
                   f'fill="#f4f5f7" stroke="#c3c8cf" stroke-dasharray="3 3"/>')
        fg = "#59606b"
    elif role in ("extern", "fallback"):
        fill = EXTERN if role == "extern" else FALLBACK
        out.append(f'<rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" rx="5" fill="{fill}"/>')
        fg = "#ffffff"
    else:
        stripe = NODE_W / max(len(colors), 1)
        out.append(f'<clipPath id="{clip_id}"><rect x="{x}" y="{y}" width="{NODE_W}" height="{NODE_H}" '
                   f'rx="5"/></clipPath>')
        for k, c in enumerate(colors or ["#c3c8cf"]):
            out.append(f'<rect clip-path="url(#{clip_id})" x="{x + k * stripe:.1f}" y="{y}" '
                       f'width="{stripe + 0.5:.1f}" height="{NODE_H}" fill="{c}"/>')
        fg = "#ffffff" if colors else "#3b4048"
    if role in ("input", "output"):
        title, sub = n["name"], n["type"]
    else:
        title = n["op"]
        sub = n["name"] if n["name"] != n["op"] else ""
        sub = f"{sub} {n['type']}".strip()
    out.append(_text(x + NODE_W / 2, y + 15, _clip(title, 20), 12, "middle", fg, "600"))
    out.append(_text(x + NODE_W / 2, y + 29, _clip(sub, 26), 10, "middle", fg))
    out.append("</g>")
    return "".join(out)


def _clip(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


# --- bars and distributions ------------------------------------------------------

def bytes_bars(rows: list[tuple[str, int, int, str]], label: str) -> Markup:
    """Per kernel: bytes read (light) and written (solid), one row each."""
    if not rows:
        return Markup("")
    lab_w = min(max(len(r[0]) for r in rows), 40) * 7 + 12
    bar_w, row_h, val_w = 240, 22, 190
    hi = max(r + w for _, r, w, _ in rows) or 1
    body = []
    for i, (name, rd, wr, c) in enumerate(rows):
        y = 6 + i * row_h
        body.append(_text(lab_w - 8, y + 14, _clip(name, 40), 11.5, "end", cls="mono"))
        wr_w, rd_w = bar_w * wr / hi, bar_w * rd / hi
        body.append(f'<rect x="{lab_w}" y="{y + 3}" width="{rd_w:.1f}" height="{row_h - 8}" fill="{c}" '
                    f'fill-opacity="0.45"><title>read {escape(fmt_bytes(rd))} ({rd} B)</title></rect>')
        body.append(f'<rect x="{lab_w + rd_w:.1f}" y="{y + 3}" width="{wr_w:.1f}" height="{row_h - 8}" fill="{c}">'
                    f'<title>written {escape(fmt_bytes(wr))} ({wr} B)</title></rect>')
        body.append(_text(lab_w + rd_w + wr_w + 6, y + 14,
                          f"{fmt_bytes(rd + wr)} · r {fmt_bytes(rd)} · w {fmt_bytes(wr)}", 11, fill="#57606a"))
    return _svg(lab_w + bar_w + val_w, 12 + len(rows) * row_h, body, label)


def _quantile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    f = math.floor(k)
    return xs[f] if f == k else xs[f] + (xs[f + 1] - xs[f]) * (k - f)


def timing(series: list[tuple[str, list[float], str]], label: str) -> Markup:
    """Box plot (quartiles, whiskers to min/max) with every round as a dot, on an axis
    that starts at zero so bar lengths compare honestly."""
    series = [(n, xs, c) for n, xs, c in series if xs]
    if not series:
        return Markup("")
    lab_w, plot_w, row_h, top = 112, 460, 34, 8
    # a few slow rounds (a page fault, a context switch) must not squash the boxes:
    # the axis ends a little past the 90th percentiles; rounds beyond sit at its edge
    top_all = max(max(xs) for _, xs, _ in series)
    cap = max(_quantile(xs, .9) for _, xs, _ in series) * 1.4
    hi = min(top_all * 1.08, cap)
    ticks = _nice_ticks(hi)
    hi = max(hi, ticks[-1])
    sx = lambda v: lab_w + plot_w * min(v, hi) / hi  # noqa: E731
    body = []
    axis_y = top + len(series) * row_h + 4
    for t in ticks:
        body.append(f'<line x1="{sx(t):.1f}" x2="{sx(t):.1f}" y1="{top}" y2="{axis_y}" stroke="#eaeef2"/>')
        body.append(_text(sx(t), axis_y + 14, fmt_ms(t) if t else "0", 10.5, "middle", "#57606a"))
    for i, (name, xs, c) in enumerate(series):
        y = top + i * row_h + row_h / 2
        q1, med, q3 = _quantile(xs, .25), _quantile(xs, .5), _quantile(xs, .75)
        body.append(_text(lab_w - 10, y + 4, name, 12, "end", weight="600"))
        body.append(f'<line x1="{sx(min(xs)):.1f}" x2="{sx(max(xs)):.1f}" y1="{y}" y2="{y}" stroke="{c}"/>')
        body.append(f'<rect x="{sx(q1):.1f}" y="{y - 9}" width="{max(sx(q3) - sx(q1), 1):.1f}" height="18" '
                    f'fill="{c}" fill-opacity="0.18" stroke="{c}"/>')
        body.append(f'<line x1="{sx(med):.1f}" x2="{sx(med):.1f}" y1="{y - 11}" y2="{y + 11}" stroke="{c}" '
                    f'stroke-width="2.5">'
                    f'<title>{escape(name)}: median {escape(fmt_ms(med))} of {len(xs)} rounds</title></line>')
        for j, v in enumerate(xs):
            jitter = ((j * 7) % 11 - 5) * 0.9
            body.append(f'<circle cx="{sx(v):.1f}" cy="{y + jitter:.1f}" r="2" fill="{c}" fill-opacity="0.7"/>')
        beyond = sum(v > hi for v in xs)
        if beyond:
            body.append(f'<path d="M{sx(hi) + 3:.1f},{y - 5} l7,5 l-7,5 z" fill="{c}">'
                        f'<title>{beyond} round(s) above {escape(fmt_ms(hi))}, '
                        f'up to {escape(fmt_ms(max(xs)))}</title></path>')
        body.append(_text(lab_w + plot_w + 16, y + 4, f"median {fmt_ms(med)}", 11.5, fill="#1f2328"))
    return _svg(lab_w + plot_w + 130, axis_y + 22, body, label)


def bandwidth(rows: list[tuple[str, float, float, str]], label: str) -> Markup:
    """Achieved bandwidth against the device's peak: how close each kernel sits to
    the memory floor (100% = the time moving its bytes at peak would take)."""
    if not rows:
        return Markup("")
    lab_w, bar_w, row_h = 250, 360, 24
    body = []
    for i, (name, achieved, peak, c) in enumerate(rows):
        y = 6 + i * row_h
        frac = achieved / peak if peak else 0
        body.append(_text(lab_w - 8, y + 15, _clip(name, 38), 11.5, "end", cls="mono"))
        body.append(f'<rect x="{lab_w}" y="{y + 3}" width="{bar_w}" height="{row_h - 8}" fill="#eef1f4"/>')
        body.append(f'<rect x="{lab_w}" y="{y + 3}" width="{bar_w * min(frac, 1):.1f}" height="{row_h - 8}" '
                    f'fill="{c}"/>')
        body.append(_text(lab_w + bar_w + 8, y + 15,
                          f"{frac:.0%} of peak · {_gbps(achieved)} of {_gbps(peak)} GB/s", 11, fill="#57606a"))
    return _svg(lab_w + bar_w + 230, 12 + len(rows) * row_h, body, label)
