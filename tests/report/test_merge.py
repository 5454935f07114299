"""merge: shards and xdist-like splits become one report; the same test on two
device classes stays twice; a test in two runs keeps the later one."""
import json

from pytest_fusion.__main__ import main
from pytest_fusion.report import schema
from pytest_fusion.report.merge import device_class_of, merge


def test_shards_merge_into_the_whole(tiny_doc):
    shards = [dict(tiny_doc, tests=[t]) for t in tiny_doc["tests"]]  # one test per worker
    merged, notes = merge([(f"gw{i}.json", d) for i, d in enumerate(shards)])
    assert notes == []
    assert sorted(t["nodeid"] for t in merged["tests"]) == sorted(t["nodeid"] for t in tiny_doc["tests"])
    assert merged["summary"] == schema.summarize(tiny_doc["tests"])
    assert [s["path"] for s in merged["sources"]] == [f"gw{i}.json" for i in range(len(shards))]
    assert [s["tests"] for s in merged["sources"]] == [1] * len(shards)
    schema.validate(merged)


def test_same_test_twice_keeps_the_later_run(make_test, make_doc):
    old = make_doc([make_test("t.py::a", kernels=2)], created="2026-01-01T00:00:00+00:00")
    new = make_doc([make_test("t.py::a", kernels=1)], created="2026-02-01T00:00:00+00:00")
    for order in ([("old", old), ("new", new)], [("new", new), ("old", old)]):
        merged, notes = merge(order)
        assert [t["metrics"]["kernels"] for t in merged["tests"]] == [1]
        assert len(notes) == 1 and "t.py::a" in notes[0]


def test_device_classes_stay_apart_and_merges_merge_again(make_test, make_doc):
    cpu = make_doc([make_test("t.py::a"), make_test("t.py::b")], device_class="cpu")
    gpu = make_doc([make_test("t.py::a", kernels=3)], device_class="nvidia-h100-sm90", commit="def456")
    merged, _ = merge([("cpu.json", cpu), ("gpu.json", gpu)])
    assert sorted((t["nodeid"], device_class_of(merged, t)) for t in merged["tests"]) == [
        ("t.py::a", "cpu"), ("t.py::a", "nvidia-h100-sm90"), ("t.py::b", "cpu")]
    assert merged["commit"] is None  # two commits: none of them is the merge's
    again, _ = merge([("merged.json", merged), ("extra.json", make_doc([make_test("t.py::c")]))])
    assert len(again["tests"]) == 4
    assert [s["path"] for s in again["sources"]] == ["cpu.json", "gpu.json", "extra.json"]
    assert {device_class_of(again, t) for t in again["tests"] if t["nodeid"] == "t.py::a"} == {
        "cpu", "nvidia-h100-sm90"}


def test_merge_command_writes_json_and_html(tmp_path, tiny_doc, capsys):
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    schema.dump(dict(tiny_doc, tests=tiny_doc["tests"][:1]), a)
    schema.dump(dict(tiny_doc, tests=tiny_doc["tests"][1:]), b)
    rc = main(["merge", str(a), str(b), "--html", str(tmp_path / "m.html"), "--json", str(tmp_path / "m.json")])
    assert rc == 0
    assert len(json.loads((tmp_path / "m.json").read_text())["tests"]) == len(tiny_doc["tests"])
    html = (tmp_path / "m.html").read_text()
    assert all(t["nodeid"] in html for t in tiny_doc["tests"])
    assert f"{len(tiny_doc['tests'])} tests from 2 reports" in capsys.readouterr().out


def test_merge_command_refuses_a_file_that_is_not_a_report(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"tests": []}')
    assert main(["merge", str(bad), "--json", str(tmp_path / "out.json")]) == 2
    assert "bad.json" in capsys.readouterr().err
    assert not (tmp_path / "out.json").exists()
