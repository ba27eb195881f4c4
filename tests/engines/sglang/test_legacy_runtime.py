"""StepRuntime and OnOffAtDepth: the per-step logic between a legacy worker and a policy (no GPU, no
model)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.adapters.sglang.legacy.runtime import OnOffAtDepth, StepRuntime, make_runtime
from specpolicy.mode import SpecMode
from specpolicy.runtime.settings import AdapterSettings
from specpolicy.stats import StepStats


class Scripted:
    """A policy that returns scripted modes (or raises) and records the stats it saw."""

    def __init__(self, modes: Sequence[object]) -> None:
        self.modes = list(modes)
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        m = self.modes.pop(0)
        if isinstance(m, Exception):
            raise m
        return m  # type: ignore[return-value]

    def reset(self) -> None:
        pass


SETTINGS = AdapterSettings.build("static", metrics=False)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def _runtime(policy: Scripted, launch: int = 3) -> StepRuntime:
    rt = make_runtime(SETTINGS, policy=policy, launch_depth=launch, path="v1")
    rt._clock = Clock()
    return rt


def test_on_at_any_depth_runs_the_launch_depth() -> None:
    p = OnOffAtDepth(Scripted([SpecMode.on(1), SpecMode.on(7), SpecMode.off()]), 3)
    stats = StepStats(4)
    assert [p.decide(stats) for _ in range(3)] == [SpecMode.on(3), SpecMode.on(3), SpecMode.off()]


def test_stats_carry_load_context_and_last_steps_acceptance() -> None:
    pol = Scripted([SpecMode.on(3), SpecMode.off(), SpecMode.on(3)])
    rt = _runtime(pol)
    rt.num_waiting = 5
    assert rt.begin_decode(4, 40) is False
    rt.end_decode()
    rt.on_result(rt.current_step, [1, 0, 3, 2])
    rt._clock.t += 0.020  # type: ignore[attr-defined]
    assert rt.begin_decode(4, 44) is True
    rt.end_decode()
    rt.on_result(rt.current_step, [0, 0, 0, 0])
    rt._clock.t += 0.005  # type: ignore[attr-defined]
    rt.begin_decode(3, 30)
    first, second, third = pol.seen
    assert (first.batch_size, first.num_waiting, first.mean_seq_len) == (4, 5, 10.0)
    assert (
        first.last_num_steps == 0 and first.accepted_draft_tokens is None and first.last_step_time_s is None
    )
    assert second.last_num_steps == 3 and list(second.accepted_draft_tokens or []) == [1, 0, 3, 2]
    assert second.last_step_time_s == pytest.approx(0.020)
    # an off step is "no acceptance data", never "zero acceptance"
    assert third.last_num_steps == 0 and third.accepted_draft_tokens is None
    assert third.last_step_time_s == pytest.approx(0.005)
    assert rt.skipped_steps == 1 and rt.decode_steps == 3


def test_each_outcome_carries_the_request_ids_of_its_own_step() -> None:
    pol = Scripted([SpecMode.on(3)] * 4)
    rt = _runtime(pol)
    rt.begin_decode(2, 20, request_ids=["a", "b"])
    rt.end_decode()
    first = rt.current_step
    rt._clock.t += 0.01  # type: ignore[attr-defined]
    rt.begin_decode(3, 30, request_ids=["b", "c", "d"])  # v2: the next step starts before the result
    rt.end_decode()
    rt.on_result(first, [2, 0])
    rt._clock.t += 0.01  # type: ignore[attr-defined]
    rt.begin_decode(3, 30, request_ids=["b", "c", "d"])
    rt.end_decode()
    rt.on_result(rt.current_step - 1, [1, 1, 3])
    rt._clock.t += 0.01  # type: ignore[attr-defined]
    rt.begin_decode(1, 10)
    seen = pol.seen
    assert [s.request_ids for s in seen] == [["a", "b"], ["b", "c", "d"], ["b", "c", "d"], None]
    assert seen[2].last_request_ids == ["a", "b"] and list(seen[2].accepted_draft_tokens or []) == [2, 0]
    assert seen[3].last_request_ids == ["b", "c", "d"]
    assert list(seen[3].accepted_draft_tokens or []) == [1, 1, 3]


def test_prefill_between_decode_steps_drops_the_step_time() -> None:
    pol = Scripted([SpecMode.on(3), SpecMode.on(3)])
    rt = _runtime(pol)
    rt.begin_decode(2, 8)
    rt.on_non_decode()
    rt._clock.t += 1.0  # type: ignore[attr-defined]
    rt.begin_decode(2, 8)
    assert pol.seen[1].last_step_time_s is None


def test_policy_failure_runs_the_launch_depth_and_is_counted() -> None:
    pol = Scripted([RuntimeError("boom"), "not a mode", SpecMode.off()])
    rt = _runtime(pol)
    assert rt.begin_decode(2, 8) is False
    assert rt.begin_decode(2, 8) is False
    assert rt.begin_decode(2, 8) is True
    assert rt.runtime.controller.errors == 2
    assert rt.runtime.controller.steps_by_depth == {0: 1, 3: 2}


def test_forced_steps_do_not_ask_the_policy() -> None:
    pol = Scripted([])
    rt = _runtime(pol)
    assert rt.begin_decode(2, 8, forced_on=True) is False
    assert pol.seen == [] and rt.runtime.controller.steps_by_depth[3] == 1


def test_launch_depth_must_be_positive() -> None:
    with pytest.raises(ValueError, match="launch_depth"):
        make_runtime(SETTINGS, policy=Scripted([]), launch_depth=0, path="v1")


step = st.tuples(
    st.sampled_from(["on", "off", "raise"]),
    st.booleans(),  # forced on
    st.integers(1, 64),  # batch size
    st.lists(st.integers(0, 3), min_size=0, max_size=8),  # accepted drafts reported back
)


@settings(max_examples=150, deadline=None)
@given(st.lists(step, min_size=1, max_size=30), st.integers(1, 8))
def test_skip_iff_the_policy_said_off_and_stats_stay_valid(
    steps: list[tuple[str, bool, int, list[int]]], launch: int
) -> None:
    modes: list[object] = []
    for kind, forced, _, _ in steps:
        if not forced:
            modes.append({"on": SpecMode.on(1), "off": SpecMode.off(), "raise": ValueError("x")}[kind])
    pol = Scripted(modes)
    rt = _runtime(pol, launch)
    for kind, forced, bs, acc in steps:
        skip = rt.begin_decode(bs, bs * 7, forced_on=forced)
        assert skip == (kind == "off" and not forced)
        rt.end_decode()
        assert rt.skip is False
        rt.on_result(rt.current_step, acc)
    for s in pol.seen:
        # every StepStats the runtime built passes the validating constructor
        assert StepStats(*s) == s
        assert s.last_num_steps in (0, launch)
        if s.last_num_steps == 0:
            assert s.accepted_draft_tokens is None
    assert sum(rt.runtime.controller.steps_by_depth.values()) == len(steps)
    assert set(rt.runtime.controller.steps_by_depth) == {0, launch}


@pytest.mark.parametrize(
    ("policy", "wanted"), [("static", False), ("hysteresis", False), ("cost_model", True)]
)
def test_the_hooks_collect_request_ids_only_for_a_policy_that_reads_them(policy: str, wanted: bool) -> None:
    rt = make_runtime(AdapterSettings.build(policy, metrics=False), launch_depth=3, path="v2")
    assert rt.wants_ids is wanted
