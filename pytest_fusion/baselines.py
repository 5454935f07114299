"""Baselines: what each test measured last time on this device class, committed as
reports/baselines/<device-class>.json, and the gates that compare a run with it.

Per test (keyed by node id, with a hash of the test function's source): counts
(kernels, externs, fallbacks, graph breaks, launches) must match exactly; bytes and
times must stay within the file's tolerances. A regression fails the test; an
improvement passes with a note (and fails under --fusion-strict, so baselines are
kept current). A test with no entry, or whose source changed, is recorded into the
file when run locally and fails when the CI environment variable is set.

Suite level: the geometric-mean speedup over eager and over TorchInductor per
device class, in the terminal summary, compared with the baseline's over the same
tests; --fusion-min-geomean sets absolute floors.
"""
from __future__ import annotations

import dataclasses
import hashlib
import inspect
import json
import math
import os
from pathlib import Path

import pytest

from . import machine, settings
from .fixture import STATE
from .report.schema import write_atomic
from .units import format_ms, format_size, plural

# metric -> (kind, better): counts compare exactly, the others within the file's
# tolerance for their kind
METRICS = {
    "kernels": ("count", "lower"),
    "externs": ("count", "lower"),
    "fallbacks": ("count", "lower"),
    "graph_breaks": ("count", "lower"),
    "launches": ("count", "lower"),
    "bytes": ("bytes", "lower"),
    "fusion_ms": ("ms", "lower"),
    "speedup_eager": ("speedup", "higher"),
    "speedup_inductor": ("speedup", "higher"),
}
# relative tolerances of new baseline files; None: not recorded, not compared.
# The "cpu" class spans every CI machine, so only counts and bytes gate there.
# Speedups are ratios of interleaved timings and steadier than absolute times.
DEFAULT_TOLERANCE = {
    "cpu": {"bytes": 0.02, "ms": None, "speedup": None},
    # Times are not compared by default: two unchanged runs on an H100 differed by
    # up to 56% in a test's median time and 34% in a speedup. The markers' absolute
    # floors still gate speed; set "ms"/"speedup" in a file's tolerance block where
    # the timer is steadier.
    "gpu": {"bytes": 0.02, "ms": None, "speedup": None},
}
REFS = ("eager", "inductor")


class BaselineError(Exception):
    """A baseline file that cannot be read or written."""


# --- options ---------------------------------------------------------------------

def parse_geomean_floor(raw: str) -> dict[str, float]:
    """"eager:2,inductor:1.0" -> {"eager": 2.0, "inductor": 1.0}."""
    out = {}
    for part in filter(None, (p.strip() for p in raw.split(","))):
        ref, sep, value = part.partition(":")
        if not sep or ref not in REFS:
            raise ValueError(f"write REF:X with REF one of {', '.join(REFS)}, not {part!r}")
        try:
            x = float(value)
        except ValueError:
            raise ValueError(f"{value!r} in {part!r} is not a number") from None
        if not x > 0:
            raise ValueError(f"the floor in {part!r} must be positive")
        out[ref] = x
    return out


def pytest_addoption(parser):
    group = parser.getgroup("fusion", "pytest-fusion: compiler gates")
    flags = {
        "baseline": "compare each fusion test with its baseline in <baseline-dir>/<device-class>.json",
        "update": "write what was measured into the baselines and print what changed (implies --fusion-baseline)",
        "strict": "fail on improvements beyond tolerance too, so baselines are kept current (implies --fusion-baseline)",
    }
    for name, help_ in flags.items():
        group.addoption(f"--fusion-{name}", action="store_true", default=None, dest=f"fusion_{name}", help=help_)
        parser.addini(f"fusion_{name}", help_, default=None)
    help_ = "directory of the baseline files, relative to the rootdir (default: reports/baselines)"
    group.addoption("--fusion-baseline-dir", default=None, dest="fusion_baseline_dir", metavar="DIR", help=help_)
    parser.addini("fusion_baseline_dir", help_, default=None)
    help_ = "suite gate: geometric-mean speedup over eager/inductor at least X per device class, e.g. inductor:1.0"
    group.addoption("--fusion-min-geomean", default=None, dest="fusion_min_geomean", metavar="REF:X,...", help=help_)
    parser.addini("fusion_min_geomean", help_, default=None)


@dataclasses.dataclass(frozen=True)
class Options:
    compare: bool = False
    update: bool = False
    strict: bool = False
    directory: Path = Path("reports/baselines")
    min_geomean: tuple = ()  # ((ref, floor), ...)


def options_from(config) -> Options:
    """Option > ini > default; a bad value is a usage error."""
    def get(name, parse):
        value = config.getoption(f"fusion_{name}")
        if value is None:
            value = config.getini(f"fusion_{name}")
            if value in (None, ""):
                return None
        try:
            return parse(value) if isinstance(value, str) else value
        except ValueError as e:
            raise pytest.UsageError(f"--fusion-{name.replace('_', '-')} / ini fusion_{name} = {value!r}: {e}") from None

    update, strict = bool(get("update", settings._bool)), bool(get("strict", settings._bool))
    directory = Path(get("baseline_dir", str) or "reports/baselines")
    return Options(
        compare=bool(get("baseline", settings._bool)) or update or strict,
        update=update,
        strict=strict,
        directory=directory if directory.is_absolute() else Path(config.rootpath) / directory,
        min_geomean=tuple((get("min_geomean", parse_geomean_floor) or {}).items()),
    )


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


# --- entries and comparison ---------------------------------------------------------

def source_hash(item) -> str | None:
    """sha256 of the test function's source, decorators included (so its markers)."""
    try:
        src = inspect.getsource(item.function)
    except (AttributeError, OSError, TypeError):
        return None
    return hashlib.sha256(src.encode()).hexdigest()[:16]


def entry_of(result: dict, tolerance: dict) -> dict:
    """The baseline values of one test's fusion_result: what was measured and is compared."""
    m = result.get("metrics") or {}
    values = {k: m.get(k) for k in ("kernels", "externs", "fallbacks", "graph_breaks", "launches")}
    values["bytes"] = m.get("bytes_total")
    values["fusion_ms"] = (m.get("median_ms") or {}).get("fusion")
    for ref in REFS:
        values[f"speedup_{ref}"] = (m.get("speedup") or {}).get(ref)
    entry = {}
    for name, v in values.items():
        kind = METRICS[name][0]
        if v is not None and (kind == "count" or tolerance.get(kind) is not None):
            entry[name] = v if kind in ("count", "bytes") else round(v, 5)
    return entry


@dataclasses.dataclass
class Verdict:
    status: str  # match | regressed | improved | missing | new
    deltas: dict  # metric -> {baseline, measured, change, tolerance, verdict}
    note: str = ""  # why there is no entry to compare with

    def changed(self, verdict: str) -> list[str]:
        return [k for k, d in self.deltas.items() if d["verdict"] == verdict]


def compare(old: dict, new: dict, tolerance: dict) -> Verdict:
    """Metric by metric, where both have a value and the file has a tolerance for it."""
    deltas = {}
    for name, (kind, better) in METRICS.items():
        if old.get(name) is None or new.get(name) is None:
            continue
        a, b = old[name], new[name]
        if kind == "count":
            tol, change, beyond = 0, b - a, b != a
        else:
            tol = tolerance.get(kind)
            if tol is None:
                continue
            change = (b - a) / a if a else (0.0 if b == a else math.inf)
            beyond = abs(change) > tol
        worse = b > a if better == "lower" else b < a
        verdict = ("regressed" if worse else "improved") if beyond else "match"
        deltas[name] = {"baseline": a, "measured": b, "change": change, "tolerance": tol, "verdict": verdict}
    verdicts = {d["verdict"] for d in deltas.values()}
    status = "regressed" if "regressed" in verdicts else "improved" if "improved" in verdicts else "match"
    return Verdict(status, deltas)


def _value(name: str, v) -> str:
    kind = METRICS[name][0]
    if kind == "bytes":
        return format_size(v)
    if kind == "ms":
        return format_ms(v)
    if kind == "speedup":
        return f"{v:.2f}x"
    return str(v)


def _change(name: str, d: dict) -> str:
    return f"{d['change']:+d}" if METRICS[name][0] == "count" else f"{d['change']:+.1%}"


def describe(name: str, d: dict) -> str:
    """"kernels 1 -> 3 (+2)", "bytes 80 MB -> 120 MB (+50.0%, tolerance 2%)"."""
    tol = "" if METRICS[name][0] == "count" else f", tolerance {d['tolerance']:.0%}"
    return f"{name} {_value(name, d['baseline'])} -> {_value(name, d['measured'])} ({_change(name, d)}{tol})"


def section(v: Verdict, nodeid: str, device_class: str, shown_path: str) -> str:
    lines = [f"baseline: {shown_path}"]
    if v.deltas:
        lines.append(f"{'metric':<18}{'baseline':>12}{'measured':>12}{'change':>10}  verdict")
    for name, d in v.deltas.items():
        lines.append(f"{name:<18}{_value(name, d['baseline']):>12}{_value(name, d['measured']):>12}"
                     f"{_change(name, d):>10}  {d['verdict']}")
    lines.append(f"if this is intended: pytest '{nodeid}' --fusion-update on a {device_class} machine, "
                 f"then commit {shown_path}")
    return "\n".join(lines)


# --- the baseline files ---------------------------------------------------------------

class BaselineFile:
    """One device class's baselines: {"device_class", "tolerance", "tests": {nodeid: entry}}."""

    def __init__(self, path: Path, device_class: str):
        self.path = path
        kind = "cpu" if device_class == "cpu" else "gpu"
        self.data = {"device_class": device_class, "tolerance": dict(DEFAULT_TOLERANCE[kind]), "tests": {}}
        if path.exists():
            try:
                loaded = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
                raise BaselineError(f"baseline file {path} cannot be read: {e}") from None
            problem = _shape_problem(loaded)
            if problem:
                raise BaselineError(f"baseline file {path} is not a baseline file: {problem}")
            self.data.update(loaded)

    @property
    def tolerance(self) -> dict:
        return self.data["tolerance"]

    def get(self, nodeid: str) -> dict | None:
        return self.data["tests"].get(nodeid)

    def put(self, nodeid: str, entry: dict) -> None:
        self.data["tests"][nodeid] = entry

    def save(self) -> None:
        """Sorted, one key a line, written atomically: the committed text diffs well."""
        write_atomic(self.path, lambda f: f.write(json.dumps(self.data, indent=1, sort_keys=True) + "\n"))


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _shape_problem(data) -> str | None:
    """What in a loaded file the gates could not read (a hand edit), or None."""
    if not isinstance(data, dict) or not isinstance(data.get("tests"), dict):
        return "it needs a 'tests' object"
    tolerance = data.get("tolerance", {})
    if not isinstance(tolerance, dict):
        return "'tolerance' must be an object"
    for kind, v in tolerance.items():
        if v is not None and not (_number(v) and v >= 0):
            return f"tolerance.{kind} must be a fraction (0.02 for 2%) or null, not {v!r}"
    for nodeid, entry in data["tests"].items():
        if not isinstance(entry, dict):
            return f"the entry of {nodeid} must be an object of metrics, not {entry!r}"
        for name, (kind, _) in METRICS.items():
            v = entry.get(name)
            if v is None:
                continue
            if kind == "count" and (isinstance(v, bool) or not isinstance(v, int)):
                return f"{name} of {nodeid} must be an integer, not {v!r}"
            if not _number(v):
                return f"{name} of {nodeid} must be a number, not {v!r}"
        if not isinstance(entry.get("source_hash", ""), (str, type(None))):
            return f"source_hash of {nodeid} must be a string, not {entry['source_hash']!r}"
    return None


def geomean(values) -> float | None:
    vals = [v for v in values if v and v > 0 and math.isfinite(v)]
    return math.exp(sum(map(math.log, vals)) / len(vals)) if vals else None


# --- hooks ------------------------------------------------------------------------------

def pytest_configure(config):
    config.pluginmanager.register(BaselinePlugin(config, options_from(config)), "fusion-baselines")


class BaselinePlugin:
    def __init__(self, config, opts: Options):
        self.config = config
        self.opts = opts
        self.files: dict[str, BaselineFile] = {}
        self.results: list[tuple[str, dict]] = []  # (nodeid, fusion_result) of call phases (controller)
        self.to_write: dict[str, dict[str, tuple[str, dict]]] = {}  # class -> nodeid -> (change, entry)
        self.errors: list[str] = []  # files that could not be read or written
        self.suite_failures: list[str] = []

    def file(self, device_class: str) -> BaselineFile:
        if device_class not in self.files:
            self.files[device_class] = BaselineFile(self.opts.directory / f"{device_class}.json", device_class)
        return self.files[device_class]

    def shown(self, path: Path) -> str:
        try:
            return str(path.relative_to(self.config.rootpath))
        except ValueError:
            return str(path)

    # after the plugin's own makereport wrapper (tryfirst: the outer one) has set
    # report.fusion_result: compare, and fail the report on a regression
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_makereport(self, item, call):
        report = yield
        result = getattr(report, "fusion_result", None)
        if not self.opts.compare or call.when != "call" or not _comparable(result):
            return report
        state = item.stash.get(STATE, None)
        if state is None or state.backend != "fusion":
            return report  # TorchInductor's own figures are no baseline of ours
        device_class = machine.device_class(state.device)
        path = self.opts.directory / f"{device_class}.json"
        try:
            bfile = self.file(device_class)
        except BaselineError as e:
            _fail(report, result, str(e), "fix or delete the file, then run with --fusion-update")
            return report
        digest = source_hash(item)
        old = bfile.get(item.nodeid)
        if old is None or old.get("source_hash") != digest:
            note = "no entry" if old is None else "the test's source changed since its entry was written"
            verdict = Verdict("missing" if in_ci() and not self.opts.update else "new", {}, note)
        else:
            verdict = compare(old, entry_of(result, bfile.tolerance), bfile.tolerance)
        result["baseline"] = {"status": verdict.status, "deltas": verdict.deltas, "note": verdict.note,
                              "device_class": device_class, "source_hash": digest, "file": self.shown(path)}
        failure = self._failure(verdict, item.nodeid, device_class, self.shown(path))
        if failure:
            _fail(report, result, failure, section(verdict, item.nodeid, device_class, self.shown(path)))
        return report

    def _failure(self, v: Verdict, nodeid: str, device_class: str, shown_path: str) -> str:
        if self.opts.update:
            return ""
        if v.status == "missing":
            return (f"no baseline for this test on {device_class} ({v.note}) and CI is set: run "
                    f"pytest '{nodeid}' --fusion-update on a {device_class} machine and commit {shown_path}")
        moved = lambda verdict: "; ".join(describe(k, v.deltas[k]) for k in v.changed(verdict))  # noqa: E731
        if v.status == "regressed":
            return f"baseline ({device_class}) regressed: {moved('regressed')}"
        if v.status == "improved" and self.opts.strict:
            return f"baseline ({device_class}) out of date (--fusion-strict): {moved('improved')}: run --fusion-update"
        return ""

    # controller side (the only side without xdist): collect, then write and summarize
    def pytest_runtest_logreport(self, report):
        result = getattr(report, "fusion_result", None)
        if report.when != "call" or not result:
            return
        self.results.append((report.nodeid, result))
        b = result.get("baseline")
        # record what passed its gates: a failing test's numbers are no baseline
        if not b or report.failed or not (b["status"] == "new" or self.opts.update):
            return
        try:
            bfile = self.file(b["device_class"])
        except BaselineError:
            return  # the worker failed the test with the reason
        entry = entry_of(result, bfile.tolerance)
        old = bfile.get(report.nodeid)
        if old and old.get("source_hash") == b["source_hash"]:
            entry = {**old, **entry}  # keep what this run did not measure (--fusion-no-perf)
        entry["source_hash"] = b["source_hash"]
        change = "added" if old is None else "changed" if _moved(b, old, entry) else "unchanged"
        self.to_write.setdefault(b["device_class"], {})[report.nodeid] = (change, entry)

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session):
        if hasattr(self.config, "workerinput"):
            return  # the controller writes the files and judges the suite
        for device_class, entries in self.to_write.items():
            bfile = self.file(device_class)
            for nodeid, (_, entry) in entries.items():
                bfile.put(nodeid, entry)
            try:
                bfile.save()
            except OSError as e:
                self.errors.append(f"could not write {bfile.path}: {e}")
        self.suite_failures = self._suite_gates()
        if (self.suite_failures or self.errors) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def _geomeans(self) -> dict[str, dict]:
        """device class -> {ref: (ours, the baseline's over the same tests or None, tests)}."""
        by_class: dict[str, dict] = {}
        for nodeid, r in self.results:
            speedup = (r.get("metrics") or {}).get("speedup") or {}
            cls = (r.get("baseline") or {}).get("device_class") or _session_class(self.config)
            for ref in REFS:
                if speedup.get(ref):
                    by_class.setdefault(cls, {}).setdefault(ref, []).append((nodeid, speedup[ref]))
        out: dict[str, dict] = {}
        for cls, refs in by_class.items():
            for ref, pairs in refs.items():
                base = None
                if self.opts.compare and cls in self.files:
                    olds = [(self.files[cls].get(n) or {}).get(f"speedup_{ref}") for n, _ in pairs]
                    if all(olds):  # only a comparison over the very same tests means anything
                        base = geomean(olds)
                out.setdefault(cls, {})[ref] = (geomean(v for _, v in pairs), base, len(pairs))
        return out

    def _suite_gates(self) -> list[str]:
        failures = []
        floors = dict(self.opts.min_geomean)
        for cls, refs in self._geomeans().items():
            tol = self.files[cls].tolerance.get("speedup") if cls in self.files else None
            for ref, (ours, base, n) in refs.items():
                if ref in floors and ours < floors[ref]:
                    failures.append(f"{cls}: geomean speedup over {ref} {ours:.2f}x is below {floors[ref]:g}x ({plural(n, 'test')})")
                if base and tol is not None and not self.opts.update and ours < base * (1 - tol):
                    failures.append(f"{cls}: geomean speedup over {ref} {ours:.2f}x regressed from the baseline's "
                                    f"{base:.2f}x over the same {plural(n, 'test')} ({ours / base - 1:+.1%}, tolerance {tol:.0%})")
        return failures

    def pytest_terminal_summary(self, terminalreporter):
        if hasattr(self.config, "workerinput"):
            return
        tr = terminalreporter
        geo = self._geomeans()
        if geo or self.opts.min_geomean:
            tr.write_sep("=", "fusion suite")
            for cls, refs in geo.items():
                for ref, (ours, base, n) in refs.items():
                    vs = f" (baseline {base:.2f}x, {ours / base - 1:+.1%})" if base else ""
                    tr.write_line(f"{cls}: geomean speedup over {ref}: {ours:.2f}x over {plural(n, 'test')}{vs}")
            missed = [ref for ref, _ in self.opts.min_geomean if not any(ref in refs for refs in geo.values())]
            if missed:
                tr.write_line(f"--fusion-min-geomean: no speedup over {', '.join(missed)} was measured (no GPU "
                              "for CUDA-only gates, --fusion-no-perf, or no test asked for it): not checked", yellow=True)
            for f in self.suite_failures:
                tr.write_line(f"FAILED suite gate: {f}", red=True)
        if self.to_write:
            tr.write_sep("=", "fusion baselines")
            for cls, entries in sorted(self.to_write.items()):
                counts = {c: sum(ch == c for ch, _ in entries.values()) for c in ("added", "changed", "unchanged")}
                tr.write_line(f"{self.shown(self.files[cls].path)}: " + ", ".join(f"{n} {c}" for c, n in counts.items()))
                for nodeid, (change, entry) in sorted(entries.items()):
                    if change != "unchanged":
                        tr.write_line(f"  {'+' if change == 'added' else '~'} {nodeid}: {self._what(nodeid, entry)}")
        for e in self.errors:
            tr.write_line(f"fusion baselines: {e}", red=True)
        improved = [n for n, r in self.results if (r.get("baseline") or {}).get("status") == "improved"]
        if improved and not self.opts.update:
            tr.write_line(f"{plural(len(improved), 'test')} improved beyond their baseline (record it with --fusion-update): "
                          + ", ".join(improved), green=True)
        missing = sum((r.get("baseline") or {}).get("status") == "missing" for _, r in self.results)
        if missing:
            tr.write_line(f"{plural(missing, 'test')} {'has' if missing == 1 else 'have'} no baseline for their device class "
                          "and CI is set: run them with --fusion-update on that machine and commit the file", red=True)

    def _what(self, nodeid: str, entry: dict) -> str:
        """What changed in a rewritten entry, or what a new entry holds."""
        b = next((r.get("baseline") for n, r in self.results if n == nodeid), None) or {}
        moved = [describe(k, d) for k, d in (b.get("deltas") or {}).items() if d["baseline"] != d["measured"]
                 and (d["verdict"] != "match" or METRICS[k][0] in ("count", "bytes"))]
        return "; ".join(moved) or ", ".join(f"{k} {_value(k, entry[k])}" for k in METRICS if k in entry)


# --- helpers -------------------------------------------------------------------------------

def _comparable(result) -> bool:
    """Measured, and no gate failed. A test skipped for its CUDA-only speed gate on the
    CPU had its other gates evaluated: its counts and bytes are compared too."""
    if not result or not result.get("metrics"):
        return False
    if result["metrics"].get("launches") is None:
        return False  # no compiled call was profiled: its zeros are no baseline
    gates = [g.get("passed") for g in result.get("gates") or []]
    if result.get("outcome") == "skipped":
        return True in gates and False not in gates
    return result.get("outcome") == "passed" and False not in gates


def _fail(report, result: dict, reason: str, text: str) -> None:
    """Turn the call report into a failure (or add to one): a one-line reason and a section."""
    if not report.failed:  # passed, or skipped for a CUDA-only gate
        report.outcome = "failed"
        report.longrepr = reason
        result["outcome"] = "failed"
        result["message"] = reason
    else:
        result["message"] = f"{result.get('message') or ''}; {reason}".lstrip("; ")
    report.sections.append(("fusion baseline", text))


def _moved(b: dict, old: dict, entry: dict) -> bool:
    """Worth printing on update: counts or bytes changed, or a time beyond tolerance."""
    return any(d["verdict"] != "match" for d in (b.get("deltas") or {}).values()) or any(
        old.get(k) != entry.get(k) for k, (kind, _) in METRICS.items() if kind in ("count", "bytes"))


def _session_class(config) -> str:
    """The device class when no test said (baselines off): the session's device."""
    device = machine.resolve_device(settings.from_config(config).device)
    return machine.device_class(device) if device is not None else "cpu"
