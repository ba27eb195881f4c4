"""scripts/sweep_seeds.py: its per-level ratios are the simulations' own, over the seeds asked for."""

from __future__ import annotations

import statistics
from typing import Any

import pytest
from _benchmarks import load_script

from specpolicy.sim.matrix import POPULATIONS
from specpolicy.sim.run import SimulationSpec, run_simulation

SS = load_script("sweep_seeds")


def _tok_s(seed: int, level: int) -> dict[str, tuple[float, int]]:
    spec = SimulationSpec(
        profile="h200-llama8b",
        workload="sweep",
        policies=("cost_model",),
        seed=seed,
        duration_s=6.0,
        concurrency=(level,),
        decide_cost_us=1.0,
        acceptance=POPULATIONS["low-0.35"],
        jobs=1,
    )
    sim = run_simulation(spec, progress=False)
    return {o.comparator.label: (o.result.output_tok_s, o.result.spec_steps) for o in sim.outcomes}


def test_the_table_holds_each_levels_ratio_over_the_seeds(capsys: Any) -> None:
    argv = ["--profile", "h200-llama8b", "--population", "low-0.35", "--levels", "1,64", "--seeds", "2"]
    assert SS.main([*argv, "--duration-s", "6"]) == 0
    lines = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("| h200-llama8b")]
    assert [ln.split("|")[3].strip() for ln in lines] == ["1", "64"]
    for line, level in zip(lines, (1, 64), strict=True):
        runs = [_tok_s(seed, level) for seed in (0, 1)]
        ratios = [r["cost_model"][0] / r["static-0"][0] for r in runs]
        cells = [c.strip() for c in line.split("|")]
        assert cells[5].startswith(f"{statistics.mean(ratios):.4f} (sd {statistics.stdev(ratios):.4f},")
        assert f"{min(ratios):.4f}-{max(ratios):.4f})" in cells[5]
        assert cells[6] == ", ".join(str(r["cost_model"][1]) for r in runs)


def test_a_workload_that_is_not_a_sweep_is_refused() -> None:
    spec = SimulationSpec(profile="h200-llama8b", workload="ramp", policies=("cost_model",), duration_s=3.0)
    with pytest.raises(ValueError, match="not a sweep"):
        SS.level_runs(run_simulation(spec, progress=False), "cost_model")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--levels", "0,8"], "--levels must be >= 1"),
        (["--levels", "a"], "comma-separated"),
        (["--seeds", "0"], "--seeds must be >= 1"),
        (["--profile", "nope"], "unknown profile 'nope'"),
        (["--policy", "nosuch"], "unknown policy 'nosuch'"),
        (["--policy", "{nojson"], "Expecting property name"),
    ],
)
def test_bad_arguments_name_the_option(args: list[str], message: str, capsys: Any) -> None:
    with pytest.raises(SystemExit):
        SS.main(["--profile", "h200-llama8b", *args])
    assert message in capsys.readouterr().err
