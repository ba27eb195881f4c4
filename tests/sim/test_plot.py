"""``--plot``: each policy its own look, the ratio to the best fixed depth drawn, no third-party log lines."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from specpolicy.sim.run import Simulation, SimulationSpec, run_simulation

plt = pytest.importorskip("matplotlib.pyplot")

from specpolicy.sim.plot import figure  # noqa: E402  (needs matplotlib)

FAST = dict(profile="h200-llama8b", duration_s=3.0, decide_cost_us=0.5, jobs=1)


@pytest.fixture(scope="module")
def sweep() -> Simulation:
    spec = SimulationSpec(workload="sweep", concurrency=(1, 128), **FAST)  # type: ignore[arg-type]
    return run_simulation(spec, progress=False)


def _lines(ax: object) -> dict[str, object]:
    return {line.get_label(): line for line in ax.get_lines()}  # type: ignore[attr-defined]


def test_the_ratio_panel_is_tok_s_over_the_best_static_depth(sweep: Simulation) -> None:
    fig = figure(sweep)
    try:
        _, ratio_ax = fig.axes
        lines = _lines(ratio_ax)
        for level_index, level in enumerate((1, 128)):
            group = [o for o in sweep.outcomes if o.scenario.concurrency == level]
            best = max(o.result.output_tok_s for o in group if o.comparator.label.startswith("static-"))
            for o in group:
                label = o.comparator.label
                if label.startswith("static-"):
                    assert label not in lines  # the fixed depths are the reference, not competitors
                    continue
                y = lines[label].get_ydata()[level_index]  # type: ignore[attr-defined]
                assert y == pytest.approx(o.result.output_tok_s / best)
        assert "x best fixed depth" in ratio_ax.get_ylabel()
    finally:
        plt.close(fig)


def test_every_policy_looks_different(sweep: Simulation) -> None:
    fig = figure(sweep)
    try:
        looks = [
            (str(line.get_color()), line.get_linestyle(), line.get_marker())
            for line in fig.axes[0].get_lines()
        ]
        assert len(looks) >= 8 and len(set(looks)) == len(looks)
    finally:
        plt.close(fig)


def test_time_varying_runs_get_the_ratio_over_time(tmp_path: Path) -> None:
    spec = SimulationSpec(workload="ramp", policies=("cost_model",), timeline_bin_s=1.0, **FAST)  # type: ignore[arg-type]
    sim = run_simulation(spec, progress=False)
    fig = figure(sim)
    try:
        labels = set(_lines(fig.axes[1]))
        assert "cost_model" in labels and "never" in labels
        assert any(lbl.endswith("(best fixed depth)") for lbl in labels)
    finally:
        plt.close(fig)


def test_the_first_plot_prints_no_matplotlib_log_line(tmp_path: Path) -> None:
    env = dict(os.environ, MPLCONFIGDIR=str(tmp_path / "mpl"))  # an empty font cache: matplotlib builds one
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[2]), env.get("PYTHONPATH", "")])
    argv = ["simulate", "--workload", "sweep", "--concurrency", "4", "--duration", "2", "--policy", "static",
            "--decide-cost-us", "0.5", "--jobs", "1", "--no-progress", "--plot", str(tmp_path / "p.png")]
    proc = subprocess.run(
        [sys.executable, "-m", "specpolicy.cli", *argv], capture_output=True, text=True, env=env, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "p.png").stat().st_size > 0
    assert "matplotlib" not in proc.stderr and "INFO" not in proc.stderr, proc.stderr
