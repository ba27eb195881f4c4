"""hysteresis: two thresholds, a minimum dwell, and a bound on switches under any input sequence."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from specpolicy import ConfigError, SpecMode, StepStats, make_policy

_batch = st.integers(0, 128) | st.sampled_from([None, math.nan, -1, math.inf, 2.0])


class HysteresisMachine(RuleBasedStateMachine):
    """Feeds arbitrary batch sizes, checks each decision against the spec and the history of switches."""

    @initialize(
        disable_at=st.integers(1, 100), gap=st.integers(1, 60), dwell=st.integers(1, 12), k=st.integers(1, 8)
    )
    def setup(self, disable_at: int, gap: int, dwell: int, k: int) -> None:
        self.disable_at, self.enable_at = disable_at, max(0, disable_at - gap)
        self.dwell, self.k = dwell, k
        self.policy = make_policy(
            {"name": "hysteresis", "disable_at": disable_at, "enable_at": self.enable_at,
             "min_dwell_steps": dwell, "num_steps": k}
        )
        self.step = 0
        self.mode = SpecMode.on(k)  # documented starting mode
        self.last_switch: int | None = None

    @rule(batch=_batch, repeat=st.integers(1, 15))
    def feed(self, batch: Any, repeat: int) -> None:
        for _ in range(repeat):
            self._one(batch)

    def _one(self, batch: Any) -> None:
        self.step += 1
        prev = self.mode
        mode = self.policy.decide(StepStats.fast(batch))
        assert mode in (SpecMode.off(), SpecMode.on(self.k))
        valid = type(batch) is int and batch >= 0 or (isinstance(batch, float) and batch == 2.0)
        b = int(batch) if valid else None
        dwell_done = self.last_switch is None or self.step - self.last_switch >= self.dwell
        if mode != prev:
            assert dwell_done, f"switch at {self.step}, last at {self.last_switch} (dwell {self.dwell})"
            assert b is not None, "switched on missing data"
            if mode.enabled:
                assert b <= self.enable_at
            else:
                assert b >= self.disable_at
            self.last_switch = self.step
        elif dwell_done and b is not None:
            # no dwell pending and a clear signal: it must act on it
            assert not (prev.enabled and b >= self.disable_at), "stayed on above disable_at"
            assert not (not prev.enabled and b <= self.enable_at), "stayed off below enable_at"
        self.mode = mode

    @rule()
    def reset(self) -> None:
        self.policy.reset()
        self.mode = SpecMode.on(self.k)
        self.last_switch = None

    @invariant()
    def in_range(self) -> None:
        assert self.mode.num_steps in (0, self.k)


TestHysteresisStateMachine = HysteresisMachine.TestCase
TestHysteresisStateMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


@given(st.lists(st.integers(0, 100), min_size=1, max_size=400), st.integers(1, 40))
def test_switch_count_is_bounded_by_the_dwell(seq: list[int], dwell: int) -> None:
    p = make_policy("hysteresis", disable_at=50, enable_at=30, min_dwell_steps=dwell)
    modes = [p.decide(StepStats(b)) for b in seq]
    switches = sum(a != b for a, b in zip(modes, modes[1:], strict=False))
    assert switches <= math.ceil(len(seq) / dwell)


def test_holds_between_the_two_thresholds() -> None:
    p = make_policy("hysteresis", disable_at=48, enable_at=24, min_dwell_steps=1, num_steps=3)
    got = [p.decide(StepStats(b)).num_steps for b in (10, 47, 48, 30, 25, 47, 24, 40, 47, 48)]
    assert got == [3, 3, 0, 0, 0, 0, 3, 3, 3, 0]


def test_sawtooth_at_the_edge_switches_once_per_dwell_at_most() -> None:
    p = make_policy("hysteresis", disable_at=33, enable_at=32, min_dwell_steps=10)
    seq = [31, 34] * 100
    modes = [p.decide(StepStats(b)) for b in seq]
    switch_steps = [i for i in range(1, len(modes)) if modes[i] != modes[i - 1]]
    assert switch_steps, "it must still react to the load"
    assert all(b - a >= 10 for a, b in zip(switch_steps, switch_steps[1:], strict=False))
    assert modes[0] == SpecMode.on(3)


def test_missing_batch_size_holds_the_mode() -> None:
    p = make_policy("hysteresis", disable_at=10, enable_at=5, min_dwell_steps=1)
    assert p.decide(StepStats(20)) == SpecMode.off()
    for bad in (None, math.nan, -3, "?"):
        assert p.decide(StepStats.fast(bad)) == SpecMode.off()  # type: ignore[arg-type]
    assert p.decide(StepStats(2)).enabled


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"disable_at": 10, "enable_at": 10}, "hysteresis.enable_at"),
        ({"disable_at": 10, "enable_at": 30}, "hysteresis.enable_at"),
        ({"min_dwell_steps": 0}, "hysteresis.min_dwell_steps"),
        ({"disable_at": 0}, "hysteresis.disable_at"),
        ({"num_steps": 0}, "hysteresis.num_steps"),
    ],
)
def test_bad_configs_name_the_field(overrides: dict[str, int], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^{field}: "):
        make_policy("hysteresis", **overrides)
