"""Fault containment in StepController / AdapterRuntime: whatever the policy does, the engine gets a depth it
pre-built, failures are logged once and counted, and observers cannot break a step."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from _scripted import Scripted
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.runtime import AdapterInstallError, AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings

ALLOWED = (0, 1, 3)
# What a misbehaving policy may return: valid modes, modes the engine did not build, wrong types, exceptions.
OUTCOMES = st.one_of(
    st.sampled_from([SpecMode.of(k) for k in ALLOWED]),
    st.sampled_from([SpecMode.on(2), SpecMode.on(7)]),
    st.sampled_from([None, 3, "3", (3,)]),
    st.sampled_from([RuntimeError("boom"), ZeroDivisionError(), KeyError("k")]),
)


@given(st.lists(OUTCOMES, min_size=1, max_size=40), st.sampled_from(ALLOWED))
def test_every_step_gets_an_allowed_depth_and_failures_fall_back_to_default(
    script: list[Any], default: int
) -> None:
    ctl = StepController(Scripted(script), allowed_steps=ALLOWED, default_steps=default)
    logging.disable(logging.CRITICAL)
    try:
        got = [ctl.decide(StepStats(4))[1] for _ in script]
    finally:
        logging.disable(logging.NOTSET)
    valid = [type(o) is SpecMode and o.num_steps in ALLOWED for o in script]
    assert got == [o.num_steps if ok else default for o, ok in zip(script, valid, strict=True)]
    assert ctl.errors == valid.count(False)
    assert sum(ctl.steps_by_depth.values()) == len(script)


def test_a_repeated_error_is_logged_once_with_its_traceback(caplog: pytest.LogCaptureFixture) -> None:
    ctl = StepController(Scripted([RuntimeError("boom")] * 5), allowed_steps=[0, 3], default_steps=3)
    with caplog.at_level(logging.ERROR, logger="specpolicy.adapter"):
        depths = [ctl.decide(StepStats(1))[1] for _ in range(5)]
    assert depths == [3] * 5 and ctl.errors == 5
    records = [r for r in caplog.records if "policy error" in r.getMessage()]
    assert len(records) == 1 and records[0].exc_info is not None


def test_an_observer_that_raises_does_not_break_the_step() -> None:
    class Bad:
        def on_record(self, *a: Any) -> None:
            raise OSError("disk full")

    ctl = StepController(
        Scripted([SpecMode.on(1)] * 2), allowed_steps=[0, 1], default_steps=0, observers=[Bad()]
    )
    logging.disable(logging.CRITICAL)
    try:
        assert ctl.decide(StepStats(1))[1] == 1
        ctl.outcome(ctl.step, [1], 0.01)
        assert ctl.decide(StepStats(1))[1] == 1
    finally:
        logging.disable(logging.NOTSET)
    assert ctl.errors == 0  # observer failures are not policy failures


def test_runtime_refuses_a_policy_that_can_choose_a_depth_the_engine_lacks() -> None:
    s = AdapterSettings.build({"name": "static", "num_steps": 5}, metrics=False)
    with pytest.raises(AdapterInstallError, match=r"depth\(s\) \[5\].*only prepared \[0, 3\]"):
        AdapterRuntime(s, engine="e", engine_version="1", path="p", allowed_steps=[0, 3], default_steps=3)


def test_runtime_startup_line_names_path_policy_and_depths() -> None:
    s = AdapterSettings.build({"name": "static", "num_steps": 0}, metrics=False)
    rt = AdapterRuntime(
        s,
        engine="sglang",
        engine_version="0.5.23",
        path="adaptive-controller (x)",
        allowed_steps=[0, 3],
        default_steps=3,
    )
    line = rt.startup_line()
    for part in (
        "engine=sglang 0.5.23",
        "path=adaptive-controller (x)",
        '"name":"static"',
        '"num_steps":0',
        "candidate_steps=[0]",
        "engine_steps=[0, 3]",
        "default_steps=3",
    ):
        assert part in line, part
    assert rt.decide(StepStats(8))[1] == 0


def test_broadcast_without_a_process_group_is_refused() -> None:
    s = AdapterSettings.build("static", metrics=False, tp_agreement="broadcast")
    with pytest.raises(AdapterInstallError, match="broadcast"):
        AdapterRuntime(
            s, engine="e", engine_version="1", path="p", allowed_steps=[3], default_steps=3, world_size=2
        )
