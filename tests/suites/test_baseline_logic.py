"""The comparison rules on their own: plain data in, verdicts out."""
import math

from pytest_fusion.baselines import compare, describe, entry_of, geomean, parse_geomean_floor

GPU = {"bytes": 0.02, "ms": 0.25, "speedup": 0.10}
OLD = {"kernels": 2, "externs": 1, "launches": 3, "bytes": 1000, "fusion_ms": 1.0, "speedup_eager": 2.0}


def test_identical_values_match():
    v = compare(OLD, dict(OLD), GPU)
    assert v.status == "match" and set(v.deltas) == set(OLD)


def test_counts_are_exact_in_both_directions():
    worse = compare(OLD, {**OLD, "kernels": 3}, GPU)
    assert worse.status == "regressed" and worse.changed("regressed") == ["kernels"]
    assert describe("kernels", worse.deltas["kernels"]) == "kernels 2 -> 3 (+1)"
    better = compare(OLD, {**OLD, "externs": 0}, GPU)
    assert better.status == "improved" and better.changed("improved") == ["externs"]


def test_bytes_and_times_within_tolerance():
    assert compare(OLD, {**OLD, "bytes": 1020, "fusion_ms": 1.2, "speedup_eager": 1.81}, GPU).status == "match"
    v = compare(OLD, {**OLD, "bytes": 1500}, GPU)
    assert v.status == "regressed"
    assert describe("bytes", v.deltas["bytes"]) == "bytes 1 KB -> 1.5 KB (+50.0%, tolerance 2%)"
    slower = compare(OLD, {**OLD, "speedup_eager": 1.5}, GPU)  # higher is better for speedups
    assert slower.changed("regressed") == ["speedup_eager"]
    faster = compare(OLD, {**OLD, "fusion_ms": 0.5, "speedup_eager": 3.0}, GPU)
    assert faster.status == "improved" and faster.changed("improved") == ["fusion_ms", "speedup_eager"]


def test_a_regression_outweighs_an_improvement():
    assert compare(OLD, {**OLD, "kernels": 1, "bytes": 2000}, GPU).status == "regressed"


def test_metrics_without_tolerance_or_value_are_not_compared():
    cpu = {"bytes": 0.02, "ms": None, "speedup": None}
    v = compare(OLD, {**OLD, "fusion_ms": 50.0, "speedup_eager": 0.1}, cpu)
    assert v.status == "match" and "fusion_ms" not in v.deltas and "speedup_eager" not in v.deltas
    assert "launches" not in compare(OLD, {k: x for k, x in OLD.items() if k != "launches"}, GPU).deltas


def test_zero_baseline_bytes():
    assert compare({"bytes": 0}, {"bytes": 0}, GPU).status == "match"
    grew = compare({"bytes": 0}, {"bytes": 8}, GPU)
    assert grew.status == "regressed" and math.isinf(grew.deltas["bytes"]["change"])


def test_entry_keeps_what_is_measured_and_compared():
    result = {"metrics": {"kernels": 1, "externs": 0, "fallbacks": 0, "graph_breaks": 0, "launches": None,
                          "bytes_total": 800, "median_ms": {"eager": 3.0, "fusion": 1.0},
                          "speedup": {"eager": 3.0}}}
    assert entry_of(result, GPU) == {"kernels": 1, "externs": 0, "fallbacks": 0, "graph_breaks": 0,
                                     "bytes": 800, "fusion_ms": 1.0, "speedup_eager": 3.0}
    assert "speedup_eager" not in entry_of(result, {"bytes": 0.02, "ms": None, "speedup": None})


def test_geomean_and_floors():
    assert math.isclose(geomean([1.0, 4.0]), 2.0)
    assert geomean([]) is None and geomean([None, 0.0]) is None
    assert parse_geomean_floor("eager:2, inductor:1.0") == {"eager": 2.0, "inductor": 1.0}
