"""The step path's shortcuts keep what they replace: per-depth counts kept per run, a policy bound once, a
depth-mapping wrap skipped where it maps every depth onto itself, legacy step counts read from the controller.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import Any

from _scripted import Scripted
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats
from specpolicy.adapters.sglang.legacy.runtime import make_runtime
from specpolicy.policies.compose import Clamp, OnOffAtDepth
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings

ALLOWED = (0, 1, 3)


# One step: ("decide", what the policy answers) or ("force", the depth imposed, any depth the engine runs).
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("decide"), st.sampled_from([*map(SpecMode.of, ALLOWED), SpecMode.on(2), None])),
        st.tuples(st.just("force"), st.sampled_from([0, 1, 3, 5])),
    ),
    min_size=0,
    max_size=60,
)


@given(STEPS, st.booleans())
def test_steps_by_depth_and_switches_count_every_decision(
    steps: list[tuple[str, Any]], outcomes: bool
) -> None:
    """Whatever mix of decisions, fallbacks (a depth the engine lacks, garbage) and imposed depths, the counts
    per depth are those of the depths returned, and a switch is a depth unlike the previous one's."""
    script = [what for kind, what in steps if kind == "decide"]
    ctl = StepController(Scripted(script), allowed_steps=ALLOWED, default_steps=3)
    got: list[int] = []
    logging.disable(logging.CRITICAL)
    try:
        for kind, what in steps:
            decision = ctl.decide(StepStats(2)) if kind == "decide" else ctl.force(StepStats(2), what)
            got.append(decision[1])
            if outcomes:
                ctl.outcome(ctl.step, [0, 0], 0.001)
    finally:
        logging.disable(logging.NOTSET)
    expected = {k: 0 for k in ALLOWED} | dict(Counter(got))
    assert ctl.steps_by_depth == expected
    assert ctl.switches == sum(a != b for a, b in zip(got, got[1:], strict=False))
    assert ctl.step == len(got)


def test_a_replaced_policy_decides_from_the_next_step_and_its_clamp_is_heard() -> None:
    first = Scripted([SpecMode.on(1)])
    ctl = StepController(first, allowed_steps=(0, 3), default_steps=3)
    logging.disable(logging.CRITICAL)
    try:
        assert ctl.decide(StepStats(1))[1] == 3  # depth 1 is not built here: the default runs
    finally:
        logging.disable(logging.NOTSET)
    inner = Scripted([SpecMode.on(5), SpecMode.off()])
    ctl.policy = Clamp(inner, (0, 3))
    assert ctl.policy.inner is inner  # type: ignore[attr-defined]
    assert ctl.decide(StepStats(1))[1] == 3  # the clamp maps 5 down to 3
    ctl.outcome(ctl.step, [1], 0.002)
    assert ctl.decide(ctl.next_stats(1, 0, None))[1] == 0
    after = inner.seen[-1]
    assert after.last_num_steps == 3 and after.last_decided_steps == 5  # what the clamp's part asked for
    assert not first.script and len(inner.seen) == 2


def _runtime(policy: Any, launch: int = 3, given: Any = None) -> AdapterRuntime:
    return AdapterRuntime(
        AdapterSettings.build(policy, metrics=False),
        engine="e",
        engine_version="1",
        path="p",
        allowed_steps=(0, launch),
        default_steps=launch,
        wrap=lambda p: OnOffAtDepth(p, launch),
        policy=given,
    )


def test_a_wrap_that_would_map_every_depth_onto_itself_is_skipped() -> None:
    for spec in ({"name": "static", "num_steps": 3}, {"name": "threshold", "num_steps": 3}):
        rt = _runtime(spec)
        assert rt.controller.policy is rt.policy, spec
    for spec in ({"name": "static", "num_steps": 5}, {"name": "threshold", "num_steps": 2}, "cost_model"):
        rt = _runtime(spec)
        assert isinstance(rt.controller.policy, OnOffAtDepth), spec
        assert rt.controller.policy.inner is rt.policy
    # a policy given directly may choose anything: always wrapped
    rt = _runtime("static", given=Scripted([SpecMode.on(3)]))
    assert isinstance(rt.controller.policy, OnOffAtDepth)


@given(st.lists(st.tuples(st.integers(0, 64), st.integers(0, 40)), min_size=1, max_size=40))
def test_unwrapped_and_wrapped_threshold_decide_the_same(loads: list[tuple[int, int]]) -> None:
    """threshold at the launch depth, with and without the on/off mapping: the same depths and the same
    outcome fields, step after step."""
    spec = {"name": "threshold", "num_steps": 3, "max_batch_size": 20}
    bare = _runtime(spec)
    wrapped = AdapterRuntime(
        AdapterSettings.build(spec, metrics=False), engine="e", engine_version="1", path="p",
        allowed_steps=(0, 3), default_steps=3, wrap=lambda p: OnOffAtDepth(p, 3),
        policy=bare.policy,  # the same policy object, so the wrap is applied
    )
    assert bare.controller.policy is bare.policy and isinstance(wrapped.controller.policy, OnOffAtDepth)
    for batch, waiting in loads:
        ks = []
        for rt in (bare, wrapped):
            step, k = rt.decide(rt.next_stats(batch, waiting, 100.0))
            ks.append(k)
            rt.outcome(step, [1] * batch if batch else None, 0.001)
        assert ks[0] == ks[1]
        assert bare.controller.known == wrapped.controller.known


@given(st.lists(st.tuples(st.sampled_from([0, 1, 3, 7]), st.booleans(), st.booleans()), max_size=40))
def test_legacy_step_counts_are_the_decode_steps_begun_and_those_run_off(
    script: list[tuple[int, bool, bool]],
) -> None:
    """decode_steps counts every begin_decode, skipped_steps those that ran without speculation (forced
    steps speculate), with prefills in between."""
    policy = Scripted([SpecMode.of(k) for k, forced, _ in script if not forced])
    settings = AdapterSettings.build("static", metrics=False)
    rt = make_runtime(settings, launch_depth=3, path="v1", policy=policy)
    skips = 0
    for k, forced, prefill in script:
        if prefill:
            rt.on_non_decode()
        skip = rt.begin_decode(4, 400, forced_on=forced)
        assert skip == (not forced and k == 0)
        skips += skip
        rt.end_decode()
        rt.on_result(rt.current_step, None if skip else [1, 1, 1, 1])
    assert rt.decode_steps == len(script)
    assert rt.skipped_steps == skips
    assert rt.forced_steps == sum(forced for _, forced, _ in script)
