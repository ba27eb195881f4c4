"""benchmarks/bench_decide.py stays runnable: a tiny run covers every registered policy (no timings)."""

from __future__ import annotations

import json
from pathlib import Path

from _benchmarks import load

from specpolicy import MAX_NUM_STEPS, available_policies


def test_benchmark_reports_every_policy_at_every_batch_size(tmp_path: Path) -> None:
    bench = load("bench_decide")
    out = tmp_path / "bench.json"
    assert bench.main(["--steps", "4", "--repeats", "1", "--distinct", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["per_step_s"]
    for name in available_policies():
        assert set(rows[f"decide: {name}"]) == {"1", "64", "256"}
    assert rows["StepStats.fast"]["256"] > 0


def test_closed_loop_rows_report_the_depth_that_was_decided() -> None:
    """The closed loop hands each step the outcome of the decided depth: its counts capped there (none
    when off) and a time that grows with the depth; deeper than the engine runs gets its deepest."""
    bench = load("bench_decide")
    raw = bench._inputs(64, 3, 2, seed=1)
    rows = bench._closed_rows(raw)
    deepest = bench.CLOSED_MAX_DEPTH
    for a, row in zip(raw, rows, strict=True):
        assert len(row) == MAX_NUM_STEPS + 1
        assert row[0].accepted_draft_tokens is None and row[0].last_num_steps == 0
        for k in range(1, MAX_NUM_STEPS + 1):
            s = row[k]
            ran = min(k, deepest)
            assert s.last_num_steps == ran == s.last_decided_steps
            assert s.accepted_draft_tokens == [min(x, ran) for x in a[4]]
            assert s.request_ids == a[-1] and s.last_request_ids == a[-2]
        times = [row[k].last_step_time_s for k in range(deepest + 1)]
        assert times == sorted(times) and times[0] < times[-1]


def test_both_loops_report_ratios_of_paired_loops(tmp_path: Path) -> None:
    bench = load("bench_decide")
    for extra in ([], ["--open-loop"]):
        out = tmp_path / "bench.json"
        argv = ["--steps", "4", "--repeats", "3", "--distinct", "2", "--policies", "static"]
        assert bench.main([*argv, "--json", str(out), *extra]) == 0
        data = json.loads(out.read_text())
        assert data["loop"] == ("open" if extra else "closed")
        assert set(data["vs_sglang_default"]["decide: static"]) == {"1", "64", "256"}
        assert all(v > 0 for v in data["vs_sglang_default"]["decide: static"].values())
