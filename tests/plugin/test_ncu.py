"""--fusion-ncu without a GPU: the DRAM gate is n/a on a CPU run, ncu's CSV is read
as it prints it, and a missing ncu is a clear error. The measurement itself runs in
test_gpu.py."""
from __future__ import annotations

import pytest

from pytest_fusion.measure import MeasureError, ncu

HEADER = ('"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",'
          '"Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"')
GELU = ('"void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase &, '
        'at::native::GeluType)::[lambda() (instance 1)]::operator ()() const, std::array<char *, 2>>(int, T2, T3)"')


def row(kernel_id: str, kernel: str, metric: str, value: str, unit: str = "byte") -> str:
    return (f'"{kernel_id}","4242","python3.12","127.0.0.1",{kernel},"1","7","(128, 1, 1)","(31250, 1, 1)","0","9.0",'
            f'"Command line profiler metrics","{metric}","{unit}","{value}"')


# what `ncu --csv --print-units base --metrics dram__bytes_read.sum,dram__bytes_write.sum` prints: its own
# "==PROF==" lines, then one row per kernel and metric (names quoted, values with thousands separators)
SAMPLE = "\n".join([
    "==PROF== Connected to process 4242 (/usr/bin/python3.12)",
    '==PROF== Profiling "triton_poi_fused_add_mul_sin_0" - 0: 0%....50%....100% - 1 pass',
    '==PROF== Profiling "vectorized_elementwise_kernel" - 1: 0%....50%....100% - 1 pass',
    "==PROF== Disconnected from process 4242",
    HEADER,
    row("0", '"triton_poi_fused_add_mul_sin_0"', "dram__bytes_read.sum", "16,001,024"),
    row("0", '"triton_poi_fused_add_mul_sin_0"', "dram__bytes_write.sum", "15,990,784"),
    row("1", GELU, "dram__bytes_read.sum", "4,096"),
    row("1", GELU, "dram__bytes_write.sum", "0"),
])


def test_csv_sums_dram_bytes_over_kernels():
    assert ncu.parse_csv(SAMPLE) == {"read": 16_001_024 + 4_096, "write": 15_990_784, "kernels": 2}


def test_csv_without_kernels_and_bad_units():
    assert ncu.parse_csv("==PROF== Disconnected from process 4242\n" + HEADER) == {"read": 0, "write": 0, "kernels": 0}
    with pytest.raises(MeasureError, match="ncu printed no CSV table"):
        ncu.parse_csv("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters")
    kbytes = HEADER + "\n" + row("0", '"k"', "dram__bytes_read.sum", "16.00", unit="Kbyte")
    with pytest.raises(MeasureError, match="in 'Kbyte', not bytes"):
        ncu.parse_csv(kbytes)


def test_missing_ncu_is_a_clear_error(monkeypatch, tmp_path):
    missing = tmp_path / "nsight" / "ncu"
    monkeypatch.setenv("FUSION_NCU", str(missing))
    with pytest.raises(MeasureError, match=f"--fusion-ncu: FUSION_NCU={missing} is not an executable file"):
        ncu.find()


def test_ncu_on_a_cpu_run_is_not_applicable(results, run, monkeypatch):
    monkeypatch.setenv("FUSION_NCU", "/nonexistent/ncu")  # never looked up on a CPU run
    result = run("""
import pytest

@pytest.mark.max_memory_traffic("8008 B")
def test_case(fusion):
    fusion.run(lambda x: ((x + 1) * 2).sin(), fusion.randn(1001))
""", "--fusion-ncu")
    result.assert_outcomes(passed=1)
    (res,) = results(result).values()
    assert [(g["marker"], g["passed"]) for g in res["gates"]] == [("max_memory_traffic", True),
                                                                  ("max_memory_traffic.dram", None)]
    assert res["gates"][1]["message"] == "n/a: ncu measures CUDA kernels; this run is on cpu"
    assert res["metrics"]["dram_bytes"] is None
