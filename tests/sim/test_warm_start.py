"""The simulator replays a run that starts warm: a policy loaded with a saved state runs on as the policy
that saved it would have."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specpolicy.cli import main
from specpolicy.errors import ConfigError
from specpolicy.registry import make_policy, parse_config
from specpolicy.sim.comparators import Comparator, PolicyDecider, build_decider
from specpolicy.sim.engine import EngineConfig, simulate
from specpolicy.sim.run import SimulationSpec, resolve_profile, run_simulation
from specpolicy.sim.scenario import Scenario
from specpolicy.sim.warm import read_state

FAST = ["--profile", "h200-llama8b", "--duration", "4", "--concurrency", "2", "--jobs", "1", "--no-progress"]


def _scenario(concurrency: int, seconds: float = 4.0) -> Scenario:
    return Scenario("steady", seconds, closed_loop=((0.0, concurrency),), prewarmed=True)


def _summary(res: Any) -> tuple[int, int, int, int]:
    return res.output_tokens, res.decode_steps_total, res.spec_steps, res.switches


def test_a_warm_run_is_the_saved_policy_running_on() -> None:
    profile = resolve_profile("h200-llama8b", None)
    cfg = EngineConfig(seed=3, save_state=True)
    policy = make_policy(parse_config({"name": "cost_model"}))
    first = simulate(_scenario(8), profile, PolicyDecider(policy), cfg)
    assert first.policy_state == policy.state_dict()  # type: ignore[attr-defined]
    state = json.loads(json.dumps(first.policy_state))
    on = simulate(_scenario(8), profile, PolicyDecider(policy), cfg)  # the same object, running on
    comp = Comparator("cost_model", "policy", {"name": "cost_model"})
    warm = simulate(_scenario(8), profile, build_decider(comp, profile, state), cfg)
    cold = simulate(_scenario(8), profile, build_decider(comp, profile, None), cfg)
    assert _summary(warm) == _summary(on)
    assert warm.policy_state == on.policy_state
    assert _summary(cold) != _summary(warm)  # the state made a difference: the test can tell


def test_the_state_goes_to_its_own_policy_only() -> None:
    common: dict[str, Any] = {
        "profile": "h200-llama8b", "workload": "sweep", "concurrency": (2,), "duration_s": 2.0, "jobs": 1,
        "references": False,
    }  # fmt: skip
    first = run_simulation(
        SimulationSpec(**common, policies=("cost_model",), save_state=True), progress=False
    )
    state = first.outcomes[0].result.policy_state
    assert state is not None and state["policy"] == "cost_model"
    spec = SimulationSpec(**common, policies=("cost_model", "acceptance"), warm_start=state)
    sim = run_simulation(spec, progress=False)
    assert any(n.startswith("warm start: cost_model start from the saved state") for n in sim.notes)
    with pytest.raises(ConfigError, match="--warm-start: the state is 'cost_model'"):
        run_simulation(SimulationSpec(**common, policies=("acceptance",), warm_start=state), progress=False)


def test_read_state_takes_a_state_or_a_warm_start_file(tmp_path: Path) -> None:
    state = make_policy(parse_config({"name": "hysteresis"})).state_dict()  # type: ignore[attr-defined]
    bare, file = tmp_path / "s.json", tmp_path / "w.json"
    bare.write_text(json.dumps(state))
    file.write_text(json.dumps({"format": "specpolicy-warm-start", "version": 1, "state": state}))
    assert read_state(bare) == read_state(file) == state
    for text in ("{", json.dumps({"a": 1}), json.dumps([1])):
        bare.write_text(text)
        with pytest.raises(ConfigError, match="--warm-start"):
            read_state(bare)
    with pytest.raises(ConfigError, match="cannot read"):
        read_state(tmp_path / "missing.json")


def test_the_cli_saves_a_state_and_starts_warm_from_it(tmp_path: Path, capsys: Any) -> None:
    path = tmp_path / "state.json"
    assert main(["simulate", "--policy", "cost_model", "--save-state", str(path), *FAST]) == 0
    saved = json.loads(path.read_text())
    assert saved["policy"] == "cost_model" and saved["state"]["$o"]["step"] > 0
    capsys.readouterr()
    assert main(["simulate", "--policy", "cost_model", "acceptance", "--warm-start", str(path), *FAST]) == 0
    assert "warm start: cost_model start from the saved state" in capsys.readouterr().out
    assert main(["simulate", "--policy", "acceptance", "--warm-start", str(path), *FAST]) != 0
