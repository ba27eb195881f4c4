"""benchmarks/bench_control_check.py stays runnable, and what it times is an unchanged file (no timings)."""

from __future__ import annotations

from pathlib import Path

from _benchmarks import load


def test_a_tiny_run_reports_every_policy_and_interval(tmp_path: Path) -> None:
    bench = load("bench_control_check")
    res = bench.run(["static", "cost_model"], [4, 16], steps=64, repeats=3, root=tmp_path)
    assert set(res["policies"]) == {"static", "cost_model"}
    for row in res["policies"].values():
        assert set(row["every"]) == {"4", "16"} and row["decide_ns"] > 0
        # the check's share per step falls with the interval
        assert row["every"]["4"]["check_per_step_ns"] > row["every"]["16"]["check_per_step_ns"] > 0
    assert res["check_ns"] > 0
    text = bench.format_report(res)
    assert "cost_model" in text and "os.stat" in text
