"""Rank agreement logic (the gloo multi-process test is tests/engines/sglang/test_tp_gloo.py)."""

from __future__ import annotations

from typing import ClassVar, Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import PolicyEntry, SpecMode, StepStats, make_policy
from specpolicy.policy import PolicyConfig
from specpolicy.registry import parse_config
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.tp import AgreedDecider, LocalSync, agreement_mode, policy_uses_timing


class _Timed(PolicyConfig):
    name: Literal["t"] = "t"
    uses_step_time: ClassVar[bool] = True


class _Untimed(PolicyConfig):
    name: Literal["u"] = "u"
    uses_step_time: ClassVar[bool] = False
    cost_weight: float = 1.0  # the explicit declaration wins over the field-name rule


class _CostField(PolicyConfig):
    name: Literal["c"] = "c"
    cost_profile: str = "h200"


def test_timing_detection() -> None:
    assert policy_uses_timing(_Timed()) and not policy_uses_timing(_Untimed())
    # A field name says nothing (renaming one must not change agreement): a policy declares it.
    assert not policy_uses_timing(_CostField())
    assert not policy_uses_timing(parse_config("static"))
    assert policy_uses_timing(parse_config("cost_model"))


def test_a_composition_uses_step_time_when_one_of_its_parts_does() -> None:
    assert policy_uses_timing(parse_config({"name": "gate", "gate": {"name": "cost_model"}}))
    assert policy_uses_timing(parse_config({"name": "clamp", "inner": "cost_model"}))
    assert not policy_uses_timing(parse_config({"name": "gate"}))  # acceptance gated by hysteresis
    assert not policy_uses_timing(parse_config({"name": "clamp", "inner": "threshold"}))


class _ClockConfig(PolicyConfig):
    """A third-party policy (registered like a plugin) whose decision depends on the step time."""

    name: Literal["clock_for_tests"] = "clock_for_tests"
    uses_step_time: ClassVar[bool] = True
    slow_s: float = 0.05

    def candidate_steps(self) -> tuple[int, ...]:
        return (0, 2)


class _Clock:
    """Off after a slow step, on(2) after a fast one; records what it was shown."""

    def __init__(self, config: _ClockConfig) -> None:
        self.slow_s = config.slow_s
        self.seen: list[float | None] = []

    def decide(self, stats: StepStats) -> SpecMode:
        t = stats.last_step_time_s
        self.seen.append(t)
        return SpecMode.off() if t is not None and t > self.slow_s else SpecMode.on(2)

    def reset(self) -> None:
        self.seen.clear()


def test_a_third_party_policy_that_declares_step_time_is_broadcast_and_sees_the_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import specpolicy.registry as registry
    from specpolicy.policies import BUILTIN_ENTRIES

    snapshot = registry._Registry([*BUILTIN_ENTRIES, PolicyEntry("clock_for_tests", _ClockConfig, _Clock)])
    monkeypatch.setattr(registry, "_registry", lambda: snapshot)
    config = parse_config({"name": "clock_for_tests", "slow_s": 0.01})
    assert agreement_mode("auto", config, 2) == "broadcast"
    # Left to decide locally on each of several ranks it would lose the time, so it could not react:
    policy = make_policy(config)
    controller = StepController(policy, allowed_steps=(0, 2), default_steps=2)
    local = AgreedDecider(controller, "local", world_size=2)
    assert local.decide(StepStats(4, last_num_steps=2, last_step_time_s=0.5))[1] == 2
    assert policy.seen == [None]  # type: ignore[attr-defined]
    # Broadcast from rank 0 it sees the time and turns off after the slow step.
    policy.reset()
    agreed = AgreedDecider(
        StepController(policy, allowed_steps=(0, 2), default_steps=2), "broadcast", LocalSync(), world_size=2
    )
    assert agreed.decide(StepStats(4, last_num_steps=2, last_step_time_s=0.5))[1] == 0
    assert policy.seen == [0.5]  # type: ignore[attr-defined]
    # Inside a composition the declaration still counts.
    gated = parse_config({"name": "gate", "inner": "static", "gate": {"name": "clock_for_tests"}})
    assert agreement_mode("auto", gated, 2) == "broadcast"


def test_mode_selection() -> None:
    assert agreement_mode("auto", _Timed(), 1) == "local"  # one rank: nothing to agree on
    assert agreement_mode("auto", _Timed(), 4) == "broadcast"
    # a fault on one rank only (an exception, a decide() over budget) must not split the ranks: broadcast
    assert agreement_mode("auto", parse_config("static"), 4) == "broadcast"
    # no CPU group to broadcast over: local where the inputs are rank-identical, else the caller refuses
    assert agreement_mode("auto", parse_config("static"), 4, can_broadcast=False) == "local"
    assert agreement_mode("auto", _Timed(), 4, can_broadcast=False) == "broadcast"
    assert agreement_mode("local", _Timed(), 4) == "local"
    assert agreement_mode("broadcast", parse_config("static"), 2) == "broadcast"


class _Echo:
    """Returns on(3) when timing is known and fast, off when slow, on(1) when unknown."""

    def decide(self, stats: StepStats) -> SpecMode:
        t = stats.last_step_time_s
        return SpecMode.on(1) if t is None else (SpecMode.on(3) if t < 0.01 else SpecMode.off())

    def reset(self) -> None:
        pass


class _Wire:
    """An in-process stand-in for a broadcast group: rank 0 writes, the others read."""

    def __init__(self) -> None:
        self.value = -1

    def member(self, rank: int) -> _Member:
        return _Member(self, rank)


class _Member:
    def __init__(self, wire: _Wire, rank: int) -> None:
        self.wire, self.rank = wire, rank

    def share(self, num_steps: int) -> int:
        if self.rank == 0:
            self.wire.value = num_steps
        return self.wire.value


@given(st.lists(st.tuples(st.floats(0, 1), st.floats(0, 1)), min_size=1, max_size=30))
def test_ranks_agree_whatever_their_timings(times: list[tuple[float, float]]) -> None:
    for mode in ("local", "broadcast"):
        wire = _Wire()
        deciders = [
            AgreedDecider(
                StepController(_Echo(), allowed_steps=[0, 1, 3], default_steps=1),
                mode,
                wire.member(r) if mode == "broadcast" else None,
                world_size=2,
            )
            for r in (0, 1)
        ]
        for t0, t1 in times:
            d0 = deciders[0].decide(
                StepStats(4, last_step_time_s=t0)
            )[1]  # rank 0 first, as a broadcast orders them
            d1 = deciders[1].decide(StepStats(4, last_step_time_s=t1))[1]
            assert d0 == d1
            if mode == "broadcast":
                assert d0 == (3 if t0 < 0.01 else 0)  # rank 0's own timing decides
            else:
                assert d0 == 1  # timing hidden: a rank-identical input only
        assert deciders[1].controller.errors == 0


def test_single_rank_local_mode_keeps_timing() -> None:
    d = AgreedDecider(StepController(_Echo(), allowed_steps=[0, 1, 3], default_steps=1), "local", LocalSync())
    assert d.decide(StepStats(4, last_step_time_s=0.001))[1] == 3


def test_hiding_time_keeps_every_other_field() -> None:
    class Keep:
        def __init__(self) -> None:
            self.seen: list[StepStats] = []

        def decide(self, stats: StepStats) -> SpecMode:
            self.seen.append(stats)
            return SpecMode.on(1)

        def reset(self) -> None:
            pass

    pol = Keep()
    d = AgreedDecider(StepController(pol, allowed_steps=[1], default_steps=1), "local", None, world_size=4)
    full = StepStats(8, 3, 512.0, 3, [1, 2, 3, 0, 1, 2, 3, 0], None, 0.02, 1.5)
    d.decide(full)
    assert pol.seen[0] == StepStats(8, 3, 512.0, 3, [1, 2, 3, 0, 1, 2, 3, 0], None, None, 1.5)
