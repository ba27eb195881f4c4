"""A mid-run policy change in the simulator (``sim.swap``): when it happens, what runs after, its effect."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
from test_engine import PROFILE, Recorder, _drain, _requests

from specpolicy.cli import main
from specpolicy.errors import ConfigError
from specpolicy.sim.comparators import PolicyDecider
from specpolicy.sim.engine import DeciderSwap, EngineConfig, simulate
from specpolicy.sim.run import SimulationSpec, run_simulation
from specpolicy.sim.swap import PolicySwap


def _run(swap: DeciderSwap, first: Recorder) -> object:
    return simulate(
        _drain(_requests(16, 200, gap=0.001)),
        PROFILE,
        PolicyDecider(first),
        EngineConfig(max_running=16),
        swap=swap,
    )


def test_a_swap_at_a_step_hands_every_later_decision_to_the_new_policy() -> None:
    first, second = Recorder([3]), Recorder([1])
    res = _run(DeciderSwap(PolicyDecider(second), at_step=50), first)
    assert res.swap_step == 50  # type: ignore[attr-defined]
    assert len(first.seen) == 49 and len(second.seen) > 0
    # the new policy's first StepStats report the old policy's last step: the controller carries on
    assert second.seen[0].last_num_steps == 3
    assert all(s.last_num_steps == 1 for s in second.seen[2:])


def test_a_swap_at_a_time_happens_at_the_first_decision_from_then() -> None:
    first, second = Recorder([3]), Recorder([0])
    res = _run(DeciderSwap(PolicyDecider(second), at_s=0.2), first)
    assert res.swap_s is not None and res.swap_step is not None  # type: ignore[attr-defined]
    step_s = PROFILE.step_time_s(16, 3) * 1.1 + PROFILE.prefill_s(16 * 100)
    assert 0.2 <= res.swap_s < 0.2 + step_s  # type: ignore[attr-defined]
    assert len(first.seen) == res.swap_step - 1  # type: ignore[attr-defined]


def test_a_swap_never_reached_changes_nothing() -> None:
    first, second = Recorder([3]), Recorder([0])
    res = _run(DeciderSwap(PolicyDecider(second), at_step=10**9), first)
    assert res.swap_step is None and second.seen == []  # type: ignore[attr-defined]


def test_the_swap_is_validated_naming_the_option() -> None:
    with pytest.raises(ConfigError, match="exactly one"):
        PolicySwap.build("static", at_s=1.0, at_step=5)
    with pytest.raises(ConfigError, match="exactly one"):
        PolicySwap.build("static")
    with pytest.raises(ConfigError, match=r"--swap-at-step.*>= 1"):
        PolicySwap.build("static", at_step=0)
    with pytest.raises(ConfigError, match=r"--swap-at:.*>= 0"):
        PolicySwap.build("static", at_s=float("nan"))
    with pytest.raises(ConfigError, match=r"--swap-to: .*num_steps"):
        PolicySwap.build({"name": "static", "num_steps": 999}, at_s=1.0)


def _tok_s(spec: SimulationSpec, label: str) -> float:
    sim = run_simulation(spec, progress=False)
    return next(o.result.output_tok_s for o in sim.outcomes if o.comparator.label == label)


def test_the_effect_of_a_swap_lies_between_either_policy_alone() -> None:
    """At concurrency 64 on h200-llama8b speculating 4 deep and not speculating differ in throughput; a run
    that turns speculation off partway lands between the two, and the static reference rows run
    unchanged."""
    base = SimulationSpec(
        profile="h200-llama8b",
        workload="sweep",
        policies=({"name": "static", "num_steps": 4},),
        duration_s=6.0,
        concurrency=(64,),
        decide_cost_us=1.0,
        jobs=1,
    )
    label = 'static{"num_steps":4}'
    on = _tok_s(base, label)
    off_spec = dataclasses.replace(base, policies=({"name": "static", "num_steps": 0},))
    off = _tok_s(off_spec, 'static{"num_steps":0}')
    swap = PolicySwap.build({"name": "static", "num_steps": 0}, at_s=3.0)
    sim = run_simulation(dataclasses.replace(base, swap=swap), progress=False)
    swapped = next(o.result for o in sim.outcomes if o.comparator.label == label)
    assert swapped.swap_s is not None and swapped.swap_s >= 3.0
    assert min(on, off) < swapped.output_tok_s < max(on, off), (on, swapped.output_tok_s, off)
    static4 = next(o.result for o in sim.outcomes if o.comparator.label == "static-4")
    assert static4.swap_step is None  # a reference row runs unchanged
    assert any("replaced by" in n for n in sim.notes)


def test_the_command_line_takes_the_swap(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "sim.json"
    argv = [
        "simulate",
        "--profile", "h200-llama8b",
        "--policy", "hysteresis",
        "--duration", "2",
        "--concurrency", "4",
        "--jobs", "1",
        "--no-progress",
        "--swap-to", '{"name": "static", "num_steps": 0}',
        "--swap-at-step", "100",
        "--json", str(out),
    ]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["swap"] == {"to": {"name": "static", "num_steps": 0}, "at_s": None, "at_step": 100}
    assert main(["simulate", "--swap-at", "3", "--no-progress"]) == 1
    assert "need --swap-to" in capsys.readouterr().err
