"""Compare two reports and gate on regressions:
`--fail=kernels:0,bytes:2%,speedup:-5%` allows no extra kernel, 2% more bytes and
a 5% lower speedup per test. A limit is the change allowed in the worse direction,
absolute (a number) or relative to OLD (with %); its sign is only a reminder of
that direction. A test that failed or errored in NEW, and not in OLD, fails too."""
from __future__ import annotations

import dataclasses
import math

from ..units import plural
from .merge import device_class_of
from .schema import bytes_total
from .svg import fmt_bytes, fmt_ms


def _median(m: dict, key: str):
    return (m.get("median_ms") or {}).get(key)


# name -> (value from a test's metrics, True when a larger value is worse, formatter)
METRICS = {
    "kernels": (lambda m: m.get("kernels"), True, str),
    "launches": (lambda m: m.get("launches"), True, str),
    "fallbacks": (lambda m: m.get("fallbacks"), True, str),
    "graph_breaks": (lambda m: m.get("graph_breaks"), True, str),
    "bytes": (bytes_total, True, fmt_bytes),
    "peak_memory": (lambda m: m.get("peak_memory_bytes"), True, fmt_bytes),
    "time": (lambda m: _median(m, "fusion"), True, fmt_ms),
    "speedup": (lambda m: (m.get("speedup") or {}).get("eager"), False, lambda v: f"{v:.3g}×"),
    "speedup_inductor": (lambda m: (m.get("speedup") or {}).get("inductor"), False, lambda v: f"{v:.3g}×"),
    "compile_time": (lambda m: (m.get("compile_s") or {}).get("fusion"), True, lambda v: f"{v:.2f} s"),
}


class SpecError(ValueError):
    pass


@dataclasses.dataclass(frozen=True)
class Limit:
    metric: str
    amount: float  # allowed change in the worse direction, >= 0
    relative: bool

    def text(self) -> str:
        sign = "+" if METRICS[self.metric][1] else "-"
        return f"{sign}{self.amount:g}{'%' if self.relative else ''}"


def parse_fail(spec: str) -> list[Limit]:
    limits = []
    for part in filter(None, (p.strip() for p in spec.split(","))):
        name, sep, amount = part.partition(":")
        name = name.strip()
        if not sep or name not in METRICS:
            raise SpecError(f"--fail: {part!r} should be METRIC:LIMIT with METRIC one of {', '.join(METRICS)}")
        amount = amount.strip()
        relative = amount.endswith("%")
        try:
            value = abs(float(amount.rstrip("%")))
        except ValueError:
            raise SpecError(f"--fail: {part!r}: the limit must be a number or a percentage") from None
        if not math.isfinite(value):
            raise SpecError(f"--fail: {part!r}: the limit must be finite")
        limits.append(Limit(name, value, relative))
    if not limits:
        raise SpecError("--fail: no limits given")
    return limits


@dataclasses.dataclass
class Row:
    nodeid: str
    metric: str
    old: object
    new: object
    change: str
    limit: str
    verdict: str  # "ok" | "FAIL" | "n/a" | "info"


def _worse_by(old: float, new: float, higher_is_worse: bool) -> float:
    return (new - old) if higher_is_worse else (old - new)


def _check(nodeid: str, limit: Limit | None, metric: str, om: dict, nm: dict) -> Row | None:
    get, higher_is_worse, fmt = METRICS[metric]
    old, new = get(om), get(nm)
    if old is None or new is None:
        if limit is None or (old is None and new is None):
            return None
        return Row(nodeid, metric, fmt(old) if old is not None else "—", fmt(new) if new is not None else "—",
                   "", limit.text(), "n/a")
    worse = _worse_by(old, new, higher_is_worse)
    if old:
        change = f"{(new - old) / abs(old):+.1%}"
    else:
        change = "new" if new else "0"
    if fmt is str:
        change = f"{new - old:+d}"
    if limit is None:
        return None if new == old else Row(nodeid, metric, fmt(old), fmt(new), change, "", "info")
    if limit.relative:
        failed = worse > abs(old) * limit.amount / 100 if old else worse > 0
    else:
        failed = worse > limit.amount
    return Row(nodeid, metric, fmt(old), fmt(new), change, limit.text(), "FAIL" if failed else "ok")


@dataclasses.dataclass
class Comparison:
    rows: list[Row]
    compared: int
    missing: list[str]  # in OLD, not in NEW
    added: list[str]  # in NEW, not in OLD
    notes: list[str]

    @property
    def failures(self) -> list[Row]:
        return [r for r in self.rows if r.verdict == "FAIL"]


def _tests(doc: dict) -> dict[tuple[str, str], dict]:
    return {(t["nodeid"], device_class_of(doc, t)): t for t in doc["tests"]}


def _broke(old_outcome: str, new_outcome: str) -> bool:
    bad = ("failed", "error")
    return new_outcome in bad and old_outcome not in bad


def _changed_settings(old: dict, new: dict) -> str:
    """The compiler settings (options.compiler) that differ between two reports,
    as "fast_math False -> True"; reports from before they were recorded have none."""
    a, b = (d.get("options", {}).get("compiler") or {} for d in (old, new))
    return ", ".join(f"{k} {a[k]} -> {b[k]}" for k in sorted(a.keys() & b.keys()) if a[k] != b[k])


def compare(old: dict, new: dict, limits: list[Limit]) -> Comparison:
    """Every limited metric of every test in both reports; unlimited metrics that
    changed come along as "info" rows."""
    by_metric = {lim.metric: lim for lim in limits}
    a, b = _tests(old), _tests(new)
    rows: list[Row] = []
    notes: list[str] = []
    if old["machine"]["device_class"] != new["machine"]["device_class"]:
        notes.append(f"the reports come from different devices ({old['machine']['device_class']} and "
                     f"{new['machine']['device_class']}): tests are matched per device class")
    settings = _changed_settings(old, new)
    if settings:
        notes.append(f"the reports' compiler settings differ ({settings}): the figures may differ for that")
    for key in [k for k in b if k in a]:
        nodeid = key[0] if len({k[1] for k in b}) == 1 else f"{key[0]} [{key[1]}]"
        was, now = a[key]["outcome"], b[key]["outcome"]
        if _broke(was, now):
            # a test that stopped passing fails the comparison; the figures of a
            # failed run (fewer kernels, none measured) say nothing of the code
            rows.append(Row(nodeid, "outcome", was, now, "", "", "FAIL"))
            continue
        om, nm = a[key].get("metrics") or {}, b[key].get("metrics") or {}
        for metric in METRICS:
            row = _check(nodeid, by_metric.get(metric), metric, om, nm)
            if row is not None:
                rows.append(row)
        if was != now:
            rows.append(Row(nodeid, "outcome", was, now, "", "", "info"))
    missing = [k[0] for k in a if k not in b]
    added = [k[0] for k in b if k not in a]
    return Comparison(rows, sum(k in a for k in b), missing, added, notes)


def _clip_left(s: str, n: int) -> str:
    return s if len(s) <= n else "…" + s[-(n - 1):]


def format_table(c: Comparison, show_all: bool) -> str:
    """Failures first, then the rest (or only failures and changes)."""
    order = {"FAIL": 0, "n/a": 1, "ok": 2, "info": 3}
    rows = [r for r in c.rows if show_all or r.verdict in ("FAIL", "n/a") or r.change not in ("", "+0", "+0.0%")]
    rows.sort(key=lambda r: order[r.verdict])
    header = ("test", "metric", "old", "new", "change", "limit", "verdict")
    cells = [header] + [(_clip_left(r.nodeid, 64), r.metric, str(r.old), str(r.new), r.change, r.limit, r.verdict)
                        for r in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(header))]
    lines = []
    for i, row in enumerate(cells):
        lines.append("  ".join(cell.ljust(w) if j < 2 or j == 6 else cell.rjust(w)
                               for j, (cell, w) in enumerate(zip(row, widths))).rstrip())
        if i == 0:
            lines.append("  ".join("-" * w for w in widths))
    if not rows:
        lines = ["no metric changed"]
    for nodeid in c.missing:
        lines.append(f"missing in NEW: {nodeid}")
    for nodeid in c.added:
        lines.append(f"new in NEW: {nodeid}")
    lines += [f"note: {n}" for n in c.notes]
    fails = len(c.failures)
    lines.append(f"{plural(c.compared, 'test')} compared, {len(c.missing)} missing, {len(c.added)} new: "
                 + (f"{fails} gate{'s' if fails != 1 else ''} failed" if fails else "all gates passed"))
    return "\n".join(lines)
