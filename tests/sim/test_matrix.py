"""The goals matrix, small: its ratios are the reports', the daily cycle is a day, the script runs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _benchmarks import load_script

from specpolicy.errors import ConfigError
from specpolicy.sim.acceptance import BetaAcceptance
from specpolicy.sim.matrix import command_inputs, daily_cycle_file, format_matrix, run_matrix
from specpolicy.sim.report import to_json
from specpolicy.sim.run import SimulationSpec, resolve_profile, run_simulation


def test_a_small_matrix_reports_the_simulations_own_ratios(tmp_path: Path) -> None:
    low = BetaAcceptance.from_mean(0.35)
    cells = run_matrix(
        ["h200-llama8b"],
        workloads={"sweep": 3.0, "ramp": 8.0},
        populations={"low": low},
        workdir=tmp_path,
        jobs=1,
        sweep_levels=(1, 16),
    )
    assert [(c.workload, c.population) for c in cells] == [("sweep", "low"), ("ramp", "low")]
    # The same sweep through the public API and its JSON: the cell is the worst level's ratios.
    spec = SimulationSpec(
        profile="h200-llama8b",
        workload="sweep",
        policies=("cost_model",),
        duration_s=3.0,
        concurrency=(1, 16),
        decide_cost_us=1.0,
        acceptance=low,
        jobs=1,
    )
    doc = to_json(run_simulation(spec, progress=False))
    mine = [r for r in doc["runs"] if r["policy"] == "cost_model"]
    worst = min(mine, key=lambda r: r["vs_best_fixed"])
    sweep = cells[0]
    assert sweep.vs_best_fixed == pytest.approx(worst["vs_best_fixed"], abs=1e-4)
    # the cell's level is a worst level (the JSON rounds to 3 decimals: two levels can tie there)
    at_level = next(r for r in mine if r["concurrency"] == sweep.worst_level)
    assert at_level["vs_best_fixed"] == worst["vs_best_fixed"]
    assert sweep.vs_oracle == pytest.approx(min(r["vs_oracle"] for r in mine), abs=1e-4)
    assert sweep.vs_lookahead == pytest.approx(min(r["vs_lookahead"] for r in mine), abs=1e-4)
    assert cells[1].worst_level is None and cells[1].vs_best_fixed is not None
    text = format_matrix(cells)
    assert "worst cell per column:" in text
    assert f"x best fixed (worst level): {min(c.vs_best_fixed or 9 for c in cells):.3f}" in text


def test_the_daily_cycle_peaks_mid_day_and_keeps_its_mean_rate(tmp_path: Path) -> None:
    path = daily_cycle_file(tmp_path / "d.jsonl", "h200-llama8b", 600.0, seed=1, in_flight=32)
    reqs = [json.loads(line) for line in path.read_text().splitlines()]
    t = np.array([r["arrival_s"] for r in reqs])
    assert np.all(np.diff(t) >= 0) and t.min() >= 0 and t.max() <= 600
    # Rate mean * (1 - 2/3 cos(2 pi t / T)): the middle half of the day gets (1 + 4/(3 pi)) / 2 of it.
    middle = float(((t > 150) & (t < 450)).mean())
    assert middle == pytest.approx((1 + 4 / (3 * np.pi)) / 2, abs=0.03)
    prof = resolve_profile("h200-llama8b", None)
    latency = prof.prefill_s(512) + 255 * prof.never_step_s(32)
    assert len(t) == pytest.approx(32 / latency * 600, rel=0.05)
    assert all(r["prompt_tokens"] >= 1 and r["output_tokens"] >= 1 and "acceptance" not in r for r in reqs)


def test_the_script_prints_the_matrix(capsys: Any) -> None:
    mod = load_script("goals_matrix")
    argv = ["--profile", "seed-k25-tp8-pcie", "--workload", "daily", "--population", "mixed-0.9/0.2"]
    assert mod.main([*argv, "--scale", "0.2", "--jobs", "1"]) == 0
    out = capsys.readouterr().out
    assert "seed-k25-tp8-pcie  daily     mixed-0.9/0.2" in out and "worst cell per column:" in out


def test_a_configured_policy_is_found_among_the_simulations_rows(tmp_path: Path) -> None:
    """A policy given as a config is labelled by the simulator with what differs from its defaults; the
    matrix must read that row (it once looked for the bare name and reported no ratios at all)."""
    cells = run_matrix(
        ["h200-llama8b"],
        workloads={"sweep": 2.0},
        populations={"reference": BetaAcceptance()},
        policy={"name": "cost_model", "switch_margin": 0.05},
        workdir=tmp_path,
        jobs=1,
        sweep_levels=(4,),
    )
    (cell,) = cells
    assert cell.vs_oracle is not None and cell.vs_best_fixed is not None and 0.5 < cell.vs_oracle < 1.2


def test_default_durations_are_the_simulators_own(monkeypatch: pytest.MonkeyPatch) -> None:
    mod = load_script("goals_matrix")
    seen: dict[str, Any] = {}

    def fake_run_matrix(profiles: Any, **kw: Any) -> list[Any]:
        seen.update(kw)
        return []

    monkeypatch.setattr(mod, "run_matrix", fake_run_matrix)
    monkeypatch.setattr(mod, "format_matrix", lambda cells, name: "")
    assert mod.main(["--profile", "h200-llama8b", "--durations", "default", "--scale", "0.5"]) == 0
    from specpolicy.sim.workloads import BUILTIN, DEFAULT_SWEEP_LEVELS

    assert seen["workloads"] == {
        "sweep": BUILTIN["sweep"].duration_s * 0.5,
        "ramp": BUILTIN["ramp"].duration_s * 0.5,
        "bursty": BUILTIN["bursty"].duration_s * 0.5,
        "transition": BUILTIN["transition"].duration_s * 0.5,
        "daily": 300.0,
    }
    assert tuple(seen["sweep_levels"]) == DEFAULT_SWEEP_LEVELS
    assert mod.main(["--profile", "h200-llama8b", "--workload", "ramp"]) == 0
    assert seen["workloads"] == {"ramp": 60.0} and tuple(seen["sweep_levels"]) == (1, 8, 64)


def test_command_inputs_label_a_config_and_refuse_unknown_names_before_any_run() -> None:
    policy, label = command_inputs('{"name": "cost_model", "switch_margin": 0.03}', ["h200-llama8b"])
    assert policy == {"name": "cost_model", "switch_margin": 0.03} and label != "cost_model"
    assert "0.03" in label  # the simulator labels a config by what differs from the defaults
    assert command_inputs("static", []) == ("static", "static")
    with pytest.raises(ConfigError, match="unknown policy 'nosuch'"):
        command_inputs("nosuch", [])
    with pytest.raises(ValueError, match="unknown profile 'nope'"):
        command_inputs("cost_model", ["h200-llama8b", "nope"])


def test_the_script_refuses_an_unknown_profile_before_running(
    monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    mod = load_script("goals_matrix")
    ran: list[Any] = []
    monkeypatch.setattr(mod, "run_matrix", lambda *a, **kw: ran.append(a) or [])
    with pytest.raises(SystemExit) as exc:
        mod.main(["--profile", "h200-llama8b", "--profile", "nope"])
    assert exc.value.code == 2 and ran == []
    assert "unknown profile 'nope'" in capsys.readouterr().err
