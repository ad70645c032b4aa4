"""benchmarks/gpu_real_sglang.py on CPU: the comparison's figures and its report from recorded runs."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MEASURED = ROOT / "docs" / "measurements" / "real-sglang-h200"
_spec = importlib.util.spec_from_file_location("gpu_real_sglang", ROOT / "benchmarks" / "gpu_real_sglang.py")
assert _spec is not None and _spec.loader is not None
grs = importlib.util.module_from_spec(_spec)
sys.modules["gpu_real_sglang"] = grs
_spec.loader.exec_module(grs)


def _run(throughput: float, ttfts: list[float], tpots: list[float]) -> dict[str, object]:
    ordered = sorted(ttfts)
    return {
        "output_throughput": throughput,
        "ttft_median_ms": ordered[len(ordered) // 2],
        "tpot_median_ms": sorted(tpots)[len(tpots) // 2],
        "ttfts_ms": ttfts,
        "tpots_ms": tpots,
    }


def test_compare_takes_tuner_over_bench_serving_and_flags_what_is_beyond_two_percent() -> None:
    runs = {
        "tuner": [_run(101.0, [10.0, 11.0, 12.0], [5.0, 5.0, 5.0]) for _ in range(3)],
        "bench_serving": [_run(100.0, [10.0, 10.0, 10.0], [5.0, 5.0, 5.0]) for _ in range(3)],
        "tuner_completions": [],
    }
    got = grs.compare(runs)
    assert got["diff"]["output_throughput"] == pytest.approx(0.01)
    assert got["within"] == {"output_throughput": True, "ttft_median_ms": False, "tpot_median_ms": True}
    # pooled over every request: the tuner's 11 ms median against 10 ms, and rounds that are all alike
    # leave no spread to the bootstrap
    assert got["pooled_diff"]["ttft_median_ms"]["diff"] == pytest.approx(0.10)
    assert got["pooled_diff"]["ttft_median_ms"]["interval95"] == pytest.approx((0.10, 0.10))
    assert "tuner_completions" not in got["medians"]


def test_the_report_reads_a_file_of_several_workloads_and_one_of_the_single_workload_layout(
    tmp_path: Path,
) -> None:
    for name, heading in (
        ("bench-2026-12-02-1248-long1.json", "### long1"),
        ("bench-2026-12-02-0220.json", "### closed16"),  # written before there were workloads
    ):
        out = tmp_path / name
        out.mkdir()
        shutil.copy(MEASURED / name, out / "bench.json")
        grs.write_report(out)
        report = (out / "report.md").read_text()
        assert heading in report
        assert "| ttft_median_ms |" in report
    long1 = json.loads((MEASURED / "bench-2026-12-02-1248-long1.json").read_text())
    assert long1["workloads"]["long1"]["workload"] == grs.WORKLOADS["long1"].as_dict()


def test_an_unknown_workload_is_refused_with_the_choices(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        grs.main(["bench", "--model", "m", "--out", "o", "--workloads", "long1,nope"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "unknown workload nope" in err and "closed16" in err
