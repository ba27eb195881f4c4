"""A policy change through the control file on a running vLLM scheduler (each tested release, CPU).

Decision i is made when schedule() call i-1 runs (the first call is the prefill); the control file is
checked before decisions 3, 5, 7, ... (``control_every=2``). The file is written while the runner executes
the step of schedule call 4, the way an operator writes it while the engine serves; the next check is before
decision 7, so schedule calls 0-5 run the start depth and calls 6 on the new one, and each step verifies the
drafts of the depth the previous call scheduled.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from _vllm_harness import FakeRunner, add_request, build_scheduler, drive

from specpolicy.registry import parse_config
from specpolicy.runtime.control_file import write_control


@pytest.mark.parametrize("mode", ["sync", "async"])
@pytest.mark.parametrize("new_depth", [1, 0])
def test_a_swap_mid_run_changes_the_depth_the_scheduler_runs(
    make_config: Any, tmp_path: Path, mode: str, new_depth: int
) -> None:
    ctl = tmp_path / "control.json"
    cfg = make_config(
        async_scheduling=mode == "async",
        additional_config={
            "specpolicy": {
                "policy": {"name": "static", "num_steps": 3},
                "metrics": False,
                "control_path": str(ctl),
                "control_every": 2,
            }
        },
    )
    sched = build_scheduler(cfg)
    for i in range(2):
        add_request(sched, f"r{i}")

    def accept(step: int, rid: str, drafts: int) -> int:
        if step == 4 and not ctl.exists():
            write_control(ctl, parse_config({"name": "static", "num_steps": new_depth}))
        return drafts  # every draft accepted

    outs = drive(sched, FakeRunner(sched, accept), steps=12, mode=mode)
    applied = [so.num_spec_tokens_to_schedule for so in outs]
    assert applied == [3] * 6 + [new_depth] * 6
    for s in range(1, len(outs)):
        lengths = {len(v) for v in outs[s].scheduled_spec_decode_tokens.values()}
        assert lengths == ({applied[s - 1]} if applied[s - 1] else set()), f"step {s}"
    runtime = sched._specpolicy.runtime
    assert runtime.settings.policy == parse_config({"name": "static", "num_steps": new_depth})
    assert runtime.control.swaps == 1 and runtime.control.refused == 0


def test_a_depth_beyond_the_engines_is_refused_and_the_scheduler_keeps_its_depth(
    make_config: Any, tmp_path: Path
) -> None:
    ctl = tmp_path / "control.json"
    cfg = make_config(
        additional_config={
            "specpolicy": {
                "policy": {"name": "static", "num_steps": 2},
                "metrics": False,
                "control_path": str(ctl),
                "control_every": 2,
            }
        },
    )
    sched = build_scheduler(cfg)
    add_request(sched, "r0")

    def accept(step: int, rid: str, drafts: int) -> int:
        if step == 2 and not ctl.exists():  # num_speculative_tokens is 3: depth 5 was never prepared
            write_control(ctl, parse_config({"name": "static", "num_steps": 5}))
        return drafts

    outs = drive(sched, FakeRunner(sched, accept), steps=8, mode="sync")
    assert [so.num_spec_tokens_to_schedule for so in outs] == [2] * 8
    assert sched._specpolicy.runtime.control.refused == 1
