"""The report JSON: a real run's report follows the schema; validation names
every problem; the summary is computed from the tests."""
import json

import pytest

from pytest_fusion.report import schema


def test_real_report_follows_the_schema(tiny_run):
    doc = tiny_run["doc"]
    schema.validate(doc)
    assert doc["schema_version"] == schema.SCHEMA_VERSION
    assert doc["machine"]["device_class"] == "cpu"
    assert doc["options"]["rounds"] == 3 and doc["options"]["json"] == "out/fusion.json"
    # the compiler's settings that change results (FUSION_FAST_MATH, FUSION_ENABLE, ...), not its paths
    settings = doc["options"]["compiler"]
    assert {"fusion", "fast_math", "cuda_graphs", "pdl", "index_checks", "cpu_target"} <= settings.keys()
    assert isinstance(settings["fast_math"], bool) and "cache_dir" not in settings
    # plain tests (no fusion fixture or marker) are not in the report
    assert sorted(t["nodeid"] for t in doc["tests"]) == sorted([tiny_run["failing"], tiny_run["passing"]])
    failing = next(t for t in doc["tests"] if t["nodeid"] == tiny_run["failing"])
    assert failing["outcome"] == "failed"
    assert failing["gates"][0]["marker"] == "expect_kernels" and failing["gates"][0]["passed"] is False
    assert failing["metrics"]["kernels"] == 2
    assert [len(g["kernels"]) for g in failing["graphs"]] == [2]
    assert doc["summary"]["failed"] == 1 and doc["summary"]["passed"] == 1
    assert doc["summary"]["gates"]["expect_kernels"] == {"passed": 1, "failed": 1, "skipped": 0}
    assert doc["summary"]["kernels_total"] == 3


def test_validation_lists_every_problem(tiny_doc):
    t = tiny_doc["tests"][0]
    del t["nodeid"]
    t["outcome"] = "crashed"
    t["metrics"]["kernels"] = "two"
    t["graphs"][0]["kernels"][0]["bytes_read"] = 1.5
    with pytest.raises(schema.SchemaError) as e:
        schema.validate(tiny_doc)
    text = str(e.value)
    for where in ("$.tests[0].nodeid", "$.tests[0].outcome", "$.tests[0].metrics.kernels",
                  "$.tests[0].graphs[0].kernels[0].bytes_read"):
        assert where in text


def test_other_schema_version_is_refused(tiny_doc):
    tiny_doc["schema_version"] = 2
    with pytest.raises(schema.SchemaError, match="version 1"):
        schema.validate(tiny_doc)


def test_booleans_are_not_counts(make_test, make_doc):
    doc = make_doc([make_test("t.py::a")])
    doc["tests"][0]["metrics"]["kernels"] = True
    with pytest.raises(schema.SchemaError, match="kernels: expected int"):
        schema.validate(doc)


def test_summary_geomean_and_totals(make_test):
    tests = [make_test("t.py::a", speedup=2.0), make_test("t.py::b", outcome="failed", kernels=3, speedup=8.0),
             make_test("t.py::c", outcome="skipped", speedup=None)]
    s = schema.summarize(tests)
    assert s["geomean_speedup"]["eager"] == pytest.approx(4.0)
    assert s["geomean_speedup"]["inductor"] is None
    assert (s["passed"], s["failed"], s["skipped"], s["errors"]) == (1, 1, 1, 0)
    assert s["kernels_total"] == 5 and s["bytes_total"] == 3 * 8000
    assert s["gates"]["expect_kernels"] == {"passed": 2, "failed": 1, "skipped": 0}


def test_load_refuses_what_is_not_a_report(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    with pytest.raises(schema.SchemaError, match="not JSON"):
        schema.load(tmp_path / "a.json")
    (tmp_path / "b.json").write_text(json.dumps({"schema_version": 1}))
    with pytest.raises(schema.SchemaError, match="b.json"):
        schema.load(tmp_path / "b.json")


def test_dump_then_load_round_trips(tmp_path, tiny_doc):
    schema.dump(tiny_doc, tmp_path / "sub" / "r.json")
    assert schema.load(tmp_path / "sub" / "r.json") == tiny_doc
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["r.json"]  # no temporary left behind
