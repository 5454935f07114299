"""The HTML report: one self-contained file (nothing fetched from anywhere),
rendered from the JSON, showing what fused and why not."""
import copy
import html as html_lib
import re

from pytest_fusion.report import schema
from pytest_fusion.report.html import render


def test_report_is_self_contained(tiny_run):
    html = tiny_run["html"].read_text()
    assert not re.search(r"""(?:src|href|action)\s*=\s*["']?\s*(?:https?:)?//""", html, re.I)
    assert not re.search(r"<link\b|@import|url\(\s*['\"]?(?:https?:)?//", html, re.I)
    assert "<style>" in html and "<script>" in html  # inlined, not referenced


def test_html_is_rendered_from_the_json(tiny_run):
    assert tiny_run["html"].read_text() == render(schema.load(tiny_run["json"]))


def test_failing_test_shows_kernels_source_and_reasons(tiny_run):
    html = tiny_run["html"].read_text()
    failing = next(t for t in tiny_run["doc"]["tests"] if t["nodeid"] == tiny_run["failing"])
    kernels = failing["graphs"][0]["kernels"]
    for k in kernels:
        assert k["name"] in html
    # the split reason the compiler gave for the second kernel is in "why did this not fuse"
    assert kernels[1]["split_reason"] and kernels[1]["split_reason"].replace("'", "&#39;") in html
    assert "Why did this not fuse" in html
    assert 'class="kt">float</span>' in html  # highlighted C++ source
    assert "<svg" in html and "fusion groups" in html


def test_ids_are_unique(tiny_run):
    ids = re.findall(r'\bid="([^"]+)"', tiny_run["html"].read_text())
    assert len(ids) == len(set(ids))


def test_text_from_tests_is_escaped(make_test, make_doc):
    t = make_test('t.py::test_x[<script>alert(1)</script>]', outcome="failed")
    t["message"] = "<img src=x onerror=alert(2)>"
    html = render(make_doc([t]))
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)" in html


def test_unmeasured_figures_show_as_dashes(make_test, make_doc):
    """--fusion-backend=inductor: our compiler's counts are null, not zero."""
    t = make_test("t.py::a", speedup=None)
    for key in ("kernels", "externs", "fallbacks", "bytes_read", "bytes_written", "launches"):
        t["metrics"][key] = None
    html = render(make_doc([t]))
    assert "None" not in re.sub(r"<script>.*</script>", "", html, flags=re.S)


def test_gpu_figures_are_drawn(tiny_doc):
    """Bandwidth against peak, per-kernel times, NVML and the baseline delta: what
    a GPU run adds to the JSON (values as the plugin writes them)."""
    t = next(t for t in tiny_doc["tests"] if t["nodeid"] == "test_tiny.py::test_sin_chain_fuses")
    name = t["graphs"][0]["kernels"][0]["name"]
    t["metrics"].update(bandwidth={"achieved_gbps": 2100.0, "peak_gbps": 3350.0}, kernel_times_ms={name: 0.004},
                        nvml={"clock_sm_mhz": 1980, "power_w": 212.5, "energy_j_per_call": 0.0031,
                              "throttle_reasons": []})
    t["baseline"] = {"status": "regressed", "deltas": {"kernels": {"baseline": 1, "measured": 2, "delta": 1}}}
    html = render(tiny_doc)
    assert "63% of peak" in html and "Against the memory floor" in html
    assert "SM clock" in html and "1980 MHz" in html
    assert 'class="badge regressed"' in html


def test_merged_report_labels_each_test_with_its_device(make_test, make_doc):
    from pytest_fusion.report.merge import merge

    merged, _ = merge([("cpu.json", make_doc([make_test("t.py::a")])),
                       ("gpu.json", make_doc([make_test("t.py::a")], device_class="nvidia-h100-sm90"))])
    html = render(merged)
    assert html.count('id="t-t-py-a') == 2  # one section per device class, distinct anchors
    assert "nvidia-h100-sm90</span>" in html and "cpu.json" in html


def test_kernels_show_their_launch_and_the_candidates_timed(tiny_doc):
    """A kernel launched with one of several timed configurations says which, how
    the others did and how long compiling them took; a C++ kernel (no launch
    record) says nothing of it."""
    doc = copy.deepcopy(tiny_doc)
    kernel = doc["tests"][0]["graphs"][0]["kernels"][0]
    cfg = dict(XBLOCK=1, RBLOCK=4096, num_warps=16, num_stages=1, grid=8192)
    kernel["launch"] = dict(config=cfg, launcher="c", tuned_earlier=False, compile_s=0.214,
                            timed=[[cfg, 33.1], [dict(cfg, num_warps=8), 41.25], [dict(cfg, XBLOCK=2), 35.0]])
    html = render(doc)
    assert ("launch: XBLOCK=1 RBLOCK=4096 num_warps=16, 8192 programs; fastest of 3 timed: 33.1 us (others 35.0, 41.2 us); "
            "compiled in 0.21 s (the slowest of 3 candidates, compiled at once)") in html
    assert html.count("launch: ") == 1
    assert "(PDL)" not in html
    kernel["launch"]["dependent"] = True  # programmatic dependent launch (sm_90+)
    assert "compiled at once); launched while the kernel before it finishes (PDL)" in render(doc)
    kernel["launch"]["timed_on"] = "call"  # a gather, timed on its first call's tensors
    assert "(others 35.0, 41.2 us) on the first call's tensors; compiled in" in html_lib.unescape(render(doc))


def test_inductor_bytes_are_shown(make_test, make_doc):
    """--fusion-backend=inductor: TorchInductor counts bytes per call without a
    read/write split; the index, the test's header, the summary card and the JSON
    summary show that total, as the gate and the terminal do."""
    t = make_test("t.py::test_inductor")
    t["metrics"].update(bytes_read=None, bytes_written=None, bytes_total=2056, externs=None, fallbacks=None)
    doc = make_doc([t])
    assert doc["summary"]["bytes_total"] == 2056
    html = render(doc)
    assert html.count('title="2056 B">2.06 KB<') == 2  # the summary card and the index row
    assert re.search(r"<span>2\.06 KB</span>", html)  # the test's header
