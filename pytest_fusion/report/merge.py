"""Several reports as one: CI shards, xdist runs, or runs on several machines.

Tests are keyed by (nodeid, device class): the same test run on a CPU and on an
H100 stays twice; the same test in two reports of one device class keeps the
later run. Each test records which input it came from ("source": index into
the document's "sources")."""
from __future__ import annotations

from . import schema


def device_class_of(doc: dict, test: dict) -> str:
    """The device class a test ran on (a merged document keeps one per source)."""
    sources = doc.get("sources")
    if sources and isinstance(test.get("source"), int) and test["source"] < len(sources):
        return sources[test["source"]]["device_class"]
    return doc["machine"]["device_class"]


def merge(docs: list[tuple[str, dict]]) -> tuple[dict, list[str]]:
    """(merged document, notes for the user). docs: [(path, validated document)]."""
    if not docs:
        raise ValueError("merge needs at least one report")
    sources: list[dict] = []
    kept: dict[tuple[str, str], tuple[str, dict]] = {}  # key -> (created, test)
    notes: list[str] = []
    for path, doc in docs:
        # inputs that are merges themselves contribute their own sources
        inner = doc.get("sources") or [{"path": path, "created": doc["created"], "commit": doc["commit"],
                                        "device_class": doc["machine"]["device_class"],
                                        "hostname": doc["machine"]["hostname"]}]
        base = len(sources)
        for src in inner:
            sources.append(dict(src, tests=0))
        for t in doc["tests"]:
            src_index = base + (t["source"] if doc.get("sources") else 0)
            created = sources[src_index]["created"]
            key = (t["nodeid"], sources[src_index]["device_class"])
            if key in kept:
                notes.append(f"{t['nodeid']} [{key[1]}] is in several reports: "
                             f"kept the run of {max(kept[key][0], created)}")
                if created < kept[key][0]:
                    continue
            kept[key] = (created, dict(t, source=src_index))
    tests = [t for _, t in kept.values()]
    for t in tests:
        sources[t["source"]]["tests"] += 1
    first = docs[0][1]
    commits = {s["commit"] for s in sources}
    doc = schema.document(tests, first["machine"], first["options"],
                          commits.pop() if len(commits) == 1 else None, sources=sources)
    schema.validate(doc)
    return doc, notes
