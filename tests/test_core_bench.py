"""benchmarks/bench_decide.py stays runnable: a tiny run covers every registered policy (no timings)."""

from __future__ import annotations

import json
from pathlib import Path

from _benchmarks import load

from specpolicy import available_policies


def test_benchmark_reports_every_policy_at_every_batch_size(tmp_path: Path) -> None:
    bench = load("bench_decide")
    out = tmp_path / "bench.json"
    assert bench.main(["--steps", "4", "--repeats", "1", "--distinct", "2", "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["per_step_s"]
    for name in available_policies():
        assert set(rows[f"decide: {name}"]) == {"1", "64", "256"}
    assert rows["StepStats.fast"]["256"] > 0
