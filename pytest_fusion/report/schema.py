"""The report JSON: schema version, validation, summary, commit.

The JSON is the source of truth; HTML, merge and compare all read it. Validation
is hand-written (no jsonschema dependency) and checks what the readers rely on."""
from __future__ import annotations

import contextlib
import datetime
import json
import math
import os
import subprocess

SCHEMA_VERSION = 1
OUTCOMES = ("passed", "failed", "skipped", "error")


class SchemaError(ValueError):
    """A report document that does not follow the schema."""


def now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def git_commit(cwd: str | os.PathLike | None = None) -> str | None:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.strip() or None


def geomean(values) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float)) and v > 0 and math.isfinite(v)]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def bytes_total(m: dict) -> int | None:
    """Bytes moved per call: the plugin's total (TorchInductor's has no read/write
    split), else read + written (reports written by hand or by older versions)."""
    if m.get("bytes_total") is not None:
        return m["bytes_total"]
    if m.get("bytes_read") is None and m.get("bytes_written") is None:
        return None
    return (m.get("bytes_read") or 0) + (m.get("bytes_written") or 0)


def summarize(tests: list[dict]) -> dict:
    """The summary block, always recomputed from the tests (never trusted from input)."""
    count = {o: sum(t["outcome"] == o for t in tests) for o in OUTCOMES}
    gates: dict[str, dict[str, int]] = {}
    for t in tests:
        for g in t.get("gates", []):
            key = {True: "passed", False: "failed", None: "skipped"}[g.get("passed")]
            gates.setdefault(g["marker"], {"passed": 0, "failed": 0, "skipped": 0})[key] += 1
    metrics = [t.get("metrics") or {} for t in tests]
    return {
        "passed": count["passed"], "failed": count["failed"], "skipped": count["skipped"], "errors": count["error"],
        "gates": gates,
        "geomean_speedup": {ref: geomean((m.get("speedup") or {}).get(ref) for m in metrics)
                            for ref in ("eager", "inductor")},
        "bytes_total": sum(bytes_total(m) or 0 for m in metrics),
        "kernels_total": sum(m.get("kernels") or 0 for m in metrics),
        "graph_breaks_total": sum(m.get("graph_breaks") or 0 for m in metrics),
    }


def document(tests: list[dict], machine: dict, options: dict, commit: str | None, **extra) -> dict:
    """A report document (not yet validated); `machine` is
    pytest_fusion.machine.machine_info(device). `extra`: e.g. merge's "sources"."""
    return {"schema_version": SCHEMA_VERSION, "created": now(), "commit": commit, "machine": machine,
            "options": options, "tests": tests, "summary": summarize(tests), **extra}


# --- validation -----------------------------------------------------------

_NUM = (int, float)


def _check(errors: list, where: str, value, types, optional=False) -> bool:
    if value is None and optional:
        return False
    if isinstance(value, bool) and bool not in (types if isinstance(types, tuple) else (types,)):
        errors.append(f"{where}: expected {_names(types)}, got bool")
        return False
    if not isinstance(value, types):
        errors.append(f"{where}: expected {_names(types)}, got {type(value).__name__}")
        return False
    return True


def _names(types) -> str:
    types = types if isinstance(types, tuple) else (types,)
    return " or ".join(t.__name__ for t in types)


def _check_graph(errors: list, where: str, g) -> None:
    if not _check(errors, where, g, dict):
        return
    for key, types in (("aten_graph", str), ("kernels", list), ("externs", list), ("fallbacks", list)):
        _check(errors, f"{where}.{key}", g.get(key), types)
    for i, k in enumerate(g.get("kernels") or []):
        kw = f"{where}.kernels[{i}]"
        if _check(errors, kw, k, dict):
            for key, types in (("name", str), ("kind", str), ("aten_nodes", list), ("bytes_read", int),
                               ("bytes_written", int), ("source", str)):
                _check(errors, f"{kw}.{key}", k.get(key), types)
    for part in ("externs", "fallbacks"):
        for i, c in enumerate(g.get(part) or []):
            cw = f"{where}.{part}[{i}]"
            if _check(errors, cw, c, dict):
                for key in ("name", "op", "aten_node"):
                    _check(errors, f"{cw}.{key}", c.get(key), str)


def _check_metrics(errors: list, where: str, m) -> None:
    if not _check(errors, where, m, dict):
        return
    _check(errors, f"{where}.graph_breaks", m.get("graph_breaks"), int)
    # null under --fusion-backend=inductor, where our compiler's counts do not exist
    for key in ("kernels", "externs", "fallbacks", "bytes_read", "bytes_written", "launches", "peak_memory_bytes"):
        _check(errors, f"{where}.{key}", m.get(key), int, optional=True)
    for key in ("times_ms", "median_ms", "speedup", "compile_s"):
        d = m.get(key)
        if d is not None and _check(errors, f"{where}.{key}", d, dict):
            for ref, v in d.items():
                if key == "times_ms":
                    if _check(errors, f"{where}.{key}.{ref}", v, list):
                        for j, s in enumerate(v):
                            _check(errors, f"{where}.{key}.{ref}[{j}]", s, _NUM)
                else:
                    _check(errors, f"{where}.{key}.{ref}", v, _NUM, optional=True)
    for key in ("bandwidth", "nvml"):
        _check(errors, f"{where}.{key}", m.get(key), dict, optional=True)
    if _check(errors, f"{where}.launch_names", m.get("launch_names", []), list):
        for j, n in enumerate(m.get("launch_names", [])):
            _check(errors, f"{where}.launch_names[{j}]", n, str)


def _check_test(errors: list, where: str, t) -> None:
    if not _check(errors, where, t, dict):
        return
    _check(errors, f"{where}.nodeid", t.get("nodeid"), str)
    if t.get("outcome") not in OUTCOMES:
        errors.append(f"{where}.outcome: expected one of {', '.join(OUTCOMES)}, got {t.get('outcome')!r}")
    _check(errors, f"{where}.duration_s", t.get("duration_s"), _NUM)
    _check(errors, f"{where}.message", t.get("message"), str)
    if _check(errors, f"{where}.gates", t.get("gates"), list):
        for i, g in enumerate(t["gates"]):
            gw = f"{where}.gates[{i}]"
            if _check(errors, gw, g, dict):
                _check(errors, f"{gw}.marker", g.get("marker"), str)
                if g.get("passed") not in (True, False, None):
                    errors.append(f"{gw}.passed: expected true, false or null")
                if "expected" not in g or "measured" not in g:
                    errors.append(f"{gw}: needs 'expected' and 'measured'")
    if _check(errors, f"{where}.graphs", t.get("graphs"), list):
        for i, g in enumerate(t["graphs"]):
            _check_graph(errors, f"{where}.graphs[{i}]", g)
    _check_metrics(errors, f"{where}.metrics", t.get("metrics"))
    b = t.get("baseline")
    if b is not None and _check(errors, f"{where}.baseline", b, dict):
        if b.get("status") not in ("match", "regressed", "improved", "missing", "new"):
            errors.append(f"{where}.baseline.status: unknown {b.get('status')!r}")


def validate(doc) -> None:
    """Raise SchemaError listing every problem found (not only the first)."""
    errors: list[str] = []
    if not _check(errors, "$", doc, dict):
        raise SchemaError("; ".join(errors))
    if doc.get("schema_version") != SCHEMA_VERSION:
        raise SchemaError(f"$.schema_version: this reader knows version {SCHEMA_VERSION}, "
                          f"got {doc.get('schema_version')!r}")
    _check(errors, "$.created", doc.get("created"), str)
    _check(errors, "$.commit", doc.get("commit"), str, optional=True)
    if _check(errors, "$.machine", doc.get("machine"), dict):
        for key in ("hostname", "python", "torch", "device", "device_class"):
            _check(errors, f"$.machine.{key}", doc["machine"].get(key), str)
    _check(errors, "$.options", doc.get("options"), dict)
    if _check(errors, "$.tests", doc.get("tests"), list):
        for i, t in enumerate(doc["tests"]):
            _check_test(errors, f"$.tests[{i}]", t)
    _check(errors, "$.summary", doc.get("summary"), dict)
    if errors:
        shown = errors[:20] + ([f"... and {len(errors) - 20} more"] if len(errors) > 20 else [])
        raise SchemaError("report does not follow schema version 1:\n  " + "\n  ".join(shown))


def load(path: str | os.PathLike) -> dict:
    with open(path, encoding="utf-8") as f:
        try:
            doc = json.load(f)
        except json.JSONDecodeError as e:
            raise SchemaError(f"{path}: not JSON: {e}") from None
    try:
        validate(doc)
    except SchemaError as e:
        raise SchemaError(f"{path}: {e}") from None
    return doc


def write_atomic(path: str | os.PathLike, write, opener=open) -> str:
    """Write through `write(file)` into a temporary file (opened as text by
    `opener`: gzip.open compresses) renamed into place, so a reader (or a merge)
    never sees half a file; a failed write leaves no temporary."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with opener(tmp, "wt", encoding="utf-8") as f:
            write(f)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


def dump(doc: dict, path: str | os.PathLike) -> None:
    def write(f):
        json.dump(doc, f, indent=1, default=_jsonable)
        f.write("\n")

    write_atomic(path, write)


def _jsonable(o):
    # options may hold paths or other plain objects; the report keeps their text
    return str(o)


__all__ = ["SCHEMA_VERSION", "SchemaError", "validate", "load", "dump", "document", "summarize", "bytes_total",
           "git_commit", "geomean", "now"]
