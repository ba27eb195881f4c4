"""Compositions (``gate``, ``clamp``, ``OnOffAtDepth``): their invariants, configs and fault containment.

The generic properties (never raises, only candidate depths, deterministic, JSON round trip) run for them in
test_policy_generic.py like for every registered policy; these are the properties of composing.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import MAX_NUM_STEPS, ConfigError, SpecMode, StepStats, make_policy, parse_config
from specpolicy.cli import main
from specpolicy.policies.compose import Clamp, Gate, OnOffAtDepth, clamp_table
from specpolicy.registry import get_entry
from specpolicy.runtime.controller import StepController
from specpolicy.sim.comparators import default_comparators

_modes = st.integers(0, MAX_NUM_STEPS).map(SpecMode.of)
_depth_sets = st.lists(st.integers(0, MAX_NUM_STEPS), min_size=1, max_size=8, unique=True).map(sorted)


class Scripted:
    """Returns the given modes in turn (then repeats the last); may raise or return garbage on cue."""

    def __init__(self, modes: Sequence[Any]) -> None:
        self.modes = list(modes)
        self.calls = 0

    def decide(self, stats: StepStats) -> SpecMode:
        m = self.modes[min(self.calls, len(self.modes) - 1)]
        self.calls += 1
        if isinstance(m, BaseException):
            raise m
        return m  # type: ignore[no-any-return]

    def reset(self) -> None:
        self.calls = 0


@st.composite
def load_and_acceptance(draw: st.DrawFn) -> list[StepStats]:
    """Steps whose batch size crosses hysteresis' edges and whose acceptance moves acceptance's depth."""
    out = []
    for _ in range(draw(st.integers(1, 120))):
        b = draw(st.integers(0, 100))
        k = draw(st.integers(0, 4))
        acc = None if k == 0 else draw(st.lists(st.integers(0, k), min_size=1, max_size=6))
        out.append(StepStats(b, 0, None, k, acc))
    return out


# -- gate --


@given(inner=st.lists(_modes, min_size=1, max_size=40), gate=st.lists(_modes, min_size=1, max_size=40))
def test_a_gate_is_off_exactly_when_its_gate_says_off_and_the_inner_mode_otherwise(
    inner: list[SpecMode], gate: list[SpecMode]
) -> None:
    n = max(len(inner), len(gate))
    inner += [inner[-1]] * (n - len(inner))
    gate += [gate[-1]] * (n - len(gate))
    policy = Gate(Scripted(inner), Scripted(gate))
    for i, g in zip(inner, gate, strict=True):
        got = policy.decide(StepStats(1))
        if g.num_steps == 0:
            assert got == SpecMode.off()
        else:
            assert got is i


@settings(max_examples=60)
@given(seq=load_and_acceptance())
def test_a_configured_gate_never_speculates_when_its_gate_policy_says_off(seq: list[StepStats]) -> None:
    """The parts run alone on the same steps are the reference: the gate adds nothing but the off."""
    spec = {
        "name": "gate",
        "inner": {"name": "acceptance", "probe_interval": 3},
        "gate": {"name": "hysteresis", "disable_at": 40, "enable_at": 20, "min_dwell_steps": 3},
    }
    gated = make_policy(spec)
    inner, gate = make_policy(spec["inner"]), make_policy(spec["gate"])
    for stats in seq:
        want_inner, want_gate = inner.decide(stats), gate.decide(stats)
        got = gated.decide(stats)
        if want_gate.num_steps == 0:
            assert got.num_steps == 0, stats
        else:
            assert got == want_inner, stats


def test_a_gate_reports_both_parts_estimates_and_resets_both() -> None:
    policy = make_policy({"name": "gate", "inner": "cost_model", "gate": "acceptance"})
    assert isinstance(policy, Gate)
    first = [policy.decide(StepStats(b, 0, None, 2, [1, 2])) for b in (1, 8, 64) * 20]
    est = policy.estimates()
    assert "expected_tokens_1" in est and "gate_ewma_accept_length" in est
    policy.reset()
    assert [policy.decide(StepStats(b, 0, None, 2, [1, 2])) for b in (1, 8, 64) * 20] == first


# -- clamp --


@given(depths=_depth_sets, decided=st.lists(_modes, min_size=1, max_size=30))
def test_a_clamp_never_returns_a_depth_outside_its_set(depths: list[int], decided: list[SpecMode]) -> None:
    policy = Clamp(Scripted(decided), depths)
    positive = [d for d in depths if d > 0]
    for mode in decided:
        k = policy.decide(StepStats(1)).num_steps
        assert k in depths
        if mode.num_steps > 0 and positive:
            assert k > 0  # speculating stays speculating
            # the deepest allowed depth not above the decided one, when there is one
            if any(d <= mode.num_steps for d in positive):
                assert k <= mode.num_steps and not any(k < d <= mode.num_steps for d in positive)
            else:
                assert k == positive[0]
        if mode.num_steps == 0 and 0 in depths:
            assert k == 0  # off stays off


@given(depth=st.integers(1, MAX_NUM_STEPS), decided=st.lists(_modes, min_size=1, max_size=30))
def test_on_off_at_depth_runs_every_on_at_its_depth(depth: int, decided: list[SpecMode]) -> None:
    policy = OnOffAtDepth(Scripted(decided), depth)
    for mode in decided:
        assert policy.decide(StepStats(1)) == (SpecMode.on(depth) if mode.num_steps else SpecMode.off())


def test_clamp_candidate_steps_are_the_depths_the_inner_policy_can_reach() -> None:
    config = parse_config(
        {"name": "clamp", "inner": {"name": "acceptance", "steps": [1, 2, 5]}, "depths": [0, 2, 4]}
    )
    assert config.candidate_steps() == (0, 2, 4)  # 1 -> 2 (on stays on), 2 -> 2, 5 -> 4, off -> 0
    assert parse_config({"name": "clamp", "inner": "static", "depths": [1, 2, 4]}).candidate_steps() == (2,)
    assert clamp_table([5])[0] == SpecMode.on(5)  # no off in the engine: off runs the shallowest depth


# -- faults: contained as for any policy --


class _Boom(RuntimeError):
    pass


_faulty_step = st.sampled_from(["ok", "raise", "garbage", "none"])


def _part(plan: list[str], ok: SpecMode) -> Scripted:
    return Scripted(
        [
            ok if p == "ok" else _Boom("inner") if p == "raise" else "x" if p == "garbage" else None
            for p in plan
        ]
    )


@given(
    plan=st.lists(_faulty_step, min_size=1, max_size=40), which=st.sampled_from(["inner", "gate", "clamp"])
)
def test_a_fault_in_a_part_is_the_compositions_and_the_controller_contains_it(
    plan: list[str], which: str
) -> None:
    healthy = Scripted([SpecMode.on(2)])
    if which == "clamp":
        policy: Any = Clamp(_part(plan, SpecMode.on(5)), (0, 2, 4))
        ok = 4
    elif which == "inner":
        policy, ok = Gate(_part(plan, SpecMode.on(2)), Scripted([SpecMode.on(1)])), 2
    else:
        policy, ok = Gate(healthy, _part(plan, SpecMode.on(1))), 2
    controller = StepController(policy, allowed_steps=(0, 2, 4), default_steps=4)
    # logged once per kind of fault, never raised
    got = [controller.decide(StepStats(1))[1] for _ in plan]
    assert got == [ok if p == "ok" else 4 for p in plan]  # a faulty step runs the engine's default depth
    assert controller.errors == sum(p != "ok" for p in plan)


def test_a_gate_that_says_off_still_surfaces_a_fault_of_its_inner_policy() -> None:
    policy = Gate(Scripted(["garbage"]), Scripted([SpecMode.off()]))
    assert policy.decide(StepStats(1)) == "garbage"  # not hidden behind a valid-looking off


# -- configuration --


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"name": "gate", "inner": {"name": "acceptance", "ewma_alpha": 5}}, r"^gate\.inner\.ewma_alpha: "),
        (
            {"name": "gate", "gate": {"name": "hysteresis", "enable_at": 60}},
            r"^gate\.gate\.enable_at: must be <",
        ),
        (
            {"name": "gate", "inner": {"name": "nope"}},
            r"^gate\.inner\.name: unknown policy 'nope'; available: ",
        ),
        ({"name": "gate", "inner": {"name": "static", "bogus": 1}}, r"^gate\.inner\.bogus: unknown field"),
        ({"name": "gate", "gate": "static"}, r"^gate\.gate: static never says off"),
        ({"name": "gate", "inner": 7}, r"^gate\.inner: policy spec must be a name"),
        ({"name": "clamp", "depths": [3, 1]}, r"^clamp\.depths: must be strictly ascending"),
        ({"name": "clamp", "depths": [0, 65]}, r"^clamp\.depths\.1: must be in \[0, 64\], got 65"),
        ({"name": "clamp", "depths": []}, r"^clamp\.depths: "),
        (
            {"name": "clamp", "inner": {"name": "gate", "inner": {"name": "cost_model", "steps": [2, 1]}}},
            r"^clamp\.inner\.inner\.steps: must be strictly ascending",
        ),
    ],
)
def test_a_bad_nested_config_is_named_by_its_field_path(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(spec)
    with pytest.raises(ConfigError, match=message):
        make_policy(json.dumps(spec))


def test_nested_specs_take_every_form_a_policy_spec_takes() -> None:
    by_name = parse_config({"name": "gate", "inner": "goodput", "gate": "hysteresis"})
    by_mapping = parse_config(
        {"name": "gate", "inner": {"name": "cost_model"}, "gate": {"name": "hysteresis"}}
    )
    by_object = parse_config(
        {"name": "gate", "inner": parse_config("cost_model"), "gate": parse_config("hysteresis")}
    )
    assert by_name == by_mapping == by_object
    assert by_name.inner.name == "cost_model"  # type: ignore[attr-defined]


def test_check_config_prints_the_nested_configs_in_full_and_reads_them_back(
    capsys: pytest.CaptureFixture[str],
) -> None:
    spec = {
        "name": "clamp",
        "inner": {"name": "gate", "gate": {"name": "threshold", "max_batch_size": 8}},
        "depths": [0, 1, 3],
    }
    assert main(["check-config", json.dumps(spec)]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["inner"]["gate"] == {"name": "threshold", "max_batch_size": 8, "num_steps": 3}
    assert printed["inner"]["inner"]["name"] == "acceptance" and "ewma_alpha" in printed["inner"]["inner"]
    assert printed["candidate_steps"] == [0, 1, 3]  # acceptance's 1..4 clamped to {1, 3}, and off
    assert parse_config(printed) == parse_config(spec)


def test_the_policies_command_lists_compositions_with_their_parts(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    assert 'inner: policy config = {"name": "acceptance"}' in out
    assert 'gate: policy config = {"name": "hysteresis"}' in out
    assert "depths: tuple[int, ...] = [0, 3]" in out


def test_the_registry_hands_out_composition_entries_that_take_the_config_alone() -> None:
    config = parse_config({"name": "gate", "inner": "static"})
    policy = get_entry("gate").factory(config)  # how the adapters build a policy
    assert isinstance(policy, Gate) and policy.decide(StepStats(60)) == SpecMode.off()
    assert policy.decide(StepStats(1)) == SpecMode.off()  # hysteresis holds off through its dwell


def test_the_simulators_default_comparison_leaves_compositions_out_but_runs_one_given() -> None:
    default, _ = default_comparators(7)
    assert not {c.label for c in default} & {"gate", "clamp"}
    given_one, _ = default_comparators(
        7, [{"name": "gate", "gate": {"name": "threshold"}}], include_references=False
    )
    assert [c.spec["name"] for c in given_one if c.spec] == ["gate"]


# -- what the parts are told they decided --
@given(depths=_depth_sets, wanted=st.lists(st.integers(0, MAX_NUM_STEPS), min_size=1, max_size=20),
       gated=st.lists(st.booleans(), min_size=1, max_size=20), lag=st.integers(0, 2))
def test_a_clamp_reports_the_depth_its_part_asked_for_and_a_gate_its_own_off(
    depths: list[int], wanted: list[int], gated: list[bool], lag: int
) -> None:
    """Through the controller, each outcome's ``last_decided_steps`` is what the innermost part asked for
    (a clamp stands for an engine limit) unless the gate closed (then off: a decision, not a limit), and
    ``last_num_steps`` what ran, both of the decision the outcome belongs to, whatever the lag."""
    n = len(wanted)
    shut = [gated[i % len(gated)] for i in range(n)]
    inner = Scripted([SpecMode.of(k) for k in wanted])
    gate = Scripted([SpecMode.off() if s else SpecMode.on(1) for s in shut])
    policy = Clamp(Gate(inner, gate), depths)
    table = clamp_table(depths)
    ctl = StepController(policy, allowed_steps=depths, default_steps=depths[0])
    seen: list[StepStats] = []
    for i in range(n + lag + 1):
        stats = ctl.next_stats(1 + i, 0, None)
        seen.append(stats)
        if i < n:
            ctl.decide(stats)
        if 1 <= i + 1 - lag <= n:  # decision i + 1 - lag's outcome, lag decisions late
            ctl.outcome(i + 1 - lag, None, 0.01)
    assert ctl.errors == 0
    for i, stats in enumerate(seen):
        src = i - 1 - lag  # the decision (index) the outcome fields describe
        if src < 0:
            assert stats.last_decided_steps is None
            continue
        asked = 0 if shut[src] else wanted[src]
        assert stats.last_batch_size == 1 + src
        assert stats.last_decided_steps == asked
        assert stats.last_num_steps == table[asked].num_steps


def test_cost_model_in_a_clamp_stops_asking_for_depths_the_clamp_maps_down() -> None:
    """The legacy assembly (on/off at depth 3) through the controller: cost_model, free to choose 0..7,
    learns from the depths it asked for and the depth that ran that deeper ones run at 3, as on an engine
    without graphs for them, and settles on what it can have."""
    policy = OnOffAtDepth(make_policy("cost_model"), 3)
    ctl = StepController(policy, allowed_steps=(0, 3), default_steps=3)
    asked: list[int] = []
    for i in range(1500):
        step, k = ctl.decide(ctl.next_stats(4, 0, 500.0))
        asked.append(policy.requested_steps)
        t = 0.010 * (1.0 + 0.05 * k) * (1.0 + 1e-3 * (i % 5))
        ctl.outcome(step, [min(k, 2)] * 4 if k else None, t)
    tail = asked[-500:]
    assert set(tail) <= {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("spec", "time", "ids"),
    [
        ("static", False, False),
        ("hysteresis", False, False),
        ("cost_model", True, True),
        ({"name": "clamp", "inner": {"name": "cost_model"}, "depths": [0, 3]}, True, True),
        ({"name": "clamp", "inner": {"name": "acceptance"}, "depths": [0, 3]}, False, False),
        ({"name": "gate", "inner": {"name": "acceptance"}, "gate": {"name": "hysteresis"}}, False, False),
        ({"name": "gate", "inner": {"name": "cost_model"}, "gate": {"name": "hysteresis"}}, True, True),
    ],
)
def test_a_composition_reads_what_its_parts_read(spec: Any, time: bool, ids: bool) -> None:
    """Adapters collect request ids (an O(batch) list per step) and step times only for policies that read
    them; a composition reads what any of its parts reads."""
    config = parse_config(spec)
    assert (config.needs_step_time(), config.needs_request_ids()) == (time, ids)
