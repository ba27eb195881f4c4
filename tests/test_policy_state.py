"""Every built-in policy saves its state and loads it back (``Stateful``): a policy loaded from another's
state decides as that one does from then on, and a state it cannot take is refused, naming the field."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specpolicy import StepStats, available_policies, make_policy, parse_config
from specpolicy.policy import Policy, Stateful
from specpolicy.snapshot import STATE_VERSION, StateError

#: a step: batch size, acceptance level, step time (ms), whether the adapter names the requests
Step = tuple[int, float, float, bool]
STEPS = st.lists(
    st.tuples(st.integers(0, 300), st.floats(0.0, 1.0), st.floats(1.0, 80.0), st.booleans()), max_size=60
)

SPECS: list[Any] = [pytest.param({"name": name}, id=name) for name in available_policies()]
SPECS += [
    pytest.param(
        {"name": "cost_model", "profile": "h200-llama8b", "change_threshold": 3.0}, id="cost_model-tuned"
    ),
    pytest.param({"name": "gate", "inner": {"name": "acceptance"}}, id="gate-acceptance"),
    pytest.param({"name": "clamp", "inner": {"name": "cost_model"}, "depths": [0, 2]}, id="clamp-0-2"),
]


class Driver:
    """Feeds a policy steps whose outcomes follow its own decisions (the depth it chose ran)."""

    def __init__(self) -> None:
        self.last: tuple[int, int] = (0, 0)  # the last step's batch size and depth
        self.n = 0

    def run(self, policy: Policy, steps: list[Step]) -> list[int]:
        out = []
        for batch, level, ms, named in steps:
            last_b, k = self.last
            acc = [min(k, int(level * (k + 1) + (j % 3) - 1) if level > 0.1 else 0) for j in range(last_b)]
            acc = [max(a, 0) for a in acc]
            first = self.n // 7  # requests stay a few steps, then the batch moves on
            ids = list(range(first, first + batch)) if named else None
            last_ids = list(range(first, first + last_b)) if named and k else None
            stats = StepStats(
                batch_size=batch,
                mean_seq_len=400.0 + batch,
                last_num_steps=k,
                accepted_draft_tokens=acc if k and acc else None,
                last_step_time_s=ms * 1e-3 * (1.0 + 0.1 * k),
                last_batch_size=last_b,
                last_decided_steps=k,
                last_mean_seq_len=400.0 + last_b,
                last_request_ids=last_ids if k and acc else None,
                request_ids=ids,
            )
            mode = policy.decide(stats)
            self.last = (batch, mode.num_steps)
            self.n += 1
            out.append(mode.num_steps)
        return out


def _json(state: dict[str, object]) -> Any:
    """The state through JSON, as a file holds it (NaN and infinities refused: strict JSON)."""
    return json.loads(json.dumps(state, allow_nan=False))


def _make(spec: dict[str, Any]) -> Any:
    policy = make_policy(parse_config(spec))
    assert isinstance(policy, Stateful)
    return policy


@pytest.mark.parametrize("spec", SPECS)
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(before=STEPS, after=STEPS)
def test_a_loaded_state_decides_as_the_saved_policy(
    spec: dict[str, Any], before: list[Step], after: list[Step]
) -> None:
    saved = _make(spec)
    driver = Driver()
    driver.run(saved, before)
    state = _json(saved.state_dict())
    assert state["version"] == STATE_VERSION
    loaded = _make(spec)
    loaded.load_state_dict(state)
    twin = copy.copy(driver)
    assert driver.run(saved, after) == twin.run(loaded, after)
    assert _json(saved.state_dict()) == _json(loaded.state_dict())


def test_every_builtin_policy_keeps_a_state() -> None:
    for name in available_policies():
        assert isinstance(make_policy(parse_config({"name": name})), Stateful), name


def _learned(spec: dict[str, Any]) -> tuple[Any, Any]:
    policy = _make(spec)
    Driver().run(policy, [(1, 0.8, 10.0, True)] * 40 + [(64, 0.5, 30.0, True)] * 40)
    return policy, _json(policy.state_dict())


def _refused(spec: dict[str, Any], state: Any) -> str:
    """The field a fresh policy names in refusing ``state``; the policy still decides as a fresh one."""
    policy, fresh = _make(spec), _make(spec)
    with pytest.raises(StateError) as info:
        policy.load_state_dict(state)
    steps = [(4, 0.7, 12.0, True)] * 30
    assert Driver().run(policy, steps) == Driver().run(fresh, steps)
    return info.value.field


@pytest.mark.parametrize("spec", SPECS)
def test_a_state_of_another_version_policy_or_config_is_refused(spec: dict[str, Any]) -> None:
    _, state = _learned(spec)
    assert _refused(spec, {**state, "version": STATE_VERSION + 1}) == "version"
    assert _refused(spec, {**state, "version": str(STATE_VERSION)}) == "version"
    assert _refused(spec, {**state, "policy": "someone_else"}) == "policy"
    if state["config"] is not None:
        assert _refused(spec, {**state, "config": {**state["config"], "name": "x"}}) == "config"
    for key in ("version", "policy", "config", "state"):
        assert _refused(spec, {k: v for k, v in state.items() if k != key}) == key
    assert _refused(spec, []) == "state"  # type: ignore[arg-type]


def test_cost_model_refuses_a_corrupt_state_naming_the_field() -> None:
    spec = {"name": "cost_model"}
    _, state = _learned(spec)

    def with_(path: str, value: object) -> Any:
        bad = copy.deepcopy(state)
        node = bad["state"]
        *parents, last = path.split(".")
        for key in parents:
            node = node["$o"][key]
        node["$o"][last] = value
        return bad

    assert _refused(spec, with_("cur", 99)) == "state.cur"
    assert _refused(spec, with_("cur", "1")) == "state.cur"
    assert _refused(spec, with_("step", [1])) == "state.step"
    assert _refused(spec, with_("refresh_at", [0, 1])) == "state.refresh_at"
    assert _refused(spec, with_("acc.rates", ["0.5"] * 4)).startswith("state.acc.rates")
    assert _refused(spec, with_("acc.bufs", [{"$ba": "!!not base64"}] * 65)).startswith("state.acc.bufs")
    assert _refused(spec, with_("costs", 1.0)) == "state.costs"
    bad = copy.deepcopy(state)
    del bad["state"]["$o"]["probes"]["$o"]["visits"]
    assert _refused(spec, bad) == "state.probes.visits"
    bad = copy.deepcopy(state)
    bad["state"]["$o"]["surprise"] = 1
    assert _refused(spec, bad) == "state.surprise"


def test_a_small_policy_refuses_a_depth_its_config_does_not_allow() -> None:
    spec = {"name": "hysteresis", "num_steps": 3}
    _, state = _learned(spec)
    assert _refused(spec, {**state, "state": {**state["state"], "mode": {"$m": 5}}}) == "state.mode"
    assert _refused(spec, {**state, "state": {**state["state"], "held": 1.5}}) == "state.held"
    assert _refused(spec, {**state, "state": {"mode": {"$m": 3}}}) == "state.held"


def test_a_composition_loads_all_its_parts_or_none() -> None:
    spec = {"name": "gate", "inner": {"name": "cost_model"}, "gate": {"name": "hysteresis"}}
    _, state = _learned(spec)
    bad = copy.deepcopy(state)
    bad["state"]["gate"]["state"]["held"] = "x"  # the inner part loads first, then the gate refuses
    policy = _make(spec)
    before = _json(policy.state_dict())
    with pytest.raises(StateError) as info:
        policy.load_state_dict(bad)
    assert info.value.field == "state.gate.state.held"
    assert _json(policy.state_dict()) == before
