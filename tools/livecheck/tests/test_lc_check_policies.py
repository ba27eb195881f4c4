"""The test-only policies the live check installs into the engine (tools/livecheck/policies)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from specpolicy_gpucheck import (
    CATCH_UP_SKIP,
    CONTROL_SIZE,
    CatchUpSkip,
    CycleConfig,
    CyclePolicy,
    DispatchConfig,
    DispatchPolicy,
    RaiseConfig,
    RaisePolicy,
    ResumeConfig,
    ResumePolicy,
    SkipCatchUpConfig,
    SkipCatchUpPolicy,
    SlowConfig,
    write_control,
)

from specpolicy import SpecMode, StepStats
from specpolicy.runtime.controller import StepController

S = StepStats(batch_size=4)


@given(
    depths=st.lists(st.integers(0, 8), min_size=1, max_size=5), period=st.integers(1, 7), n=st.integers(1, 80)
)
@settings(max_examples=80, deadline=None)
def test_cycle_holds_each_depth_for_period_steps(depths: list[int], period: int, n: int) -> None:
    pol = CyclePolicy(CycleConfig(depths=tuple(depths), period=period))
    got = [pol.decide(S).num_steps for _ in range(n)]
    want: list[int] = []
    while len(want) < n:
        for k in depths:
            want.extend([k] * period)
    assert got == want[:n]
    pol.reset()
    assert pol.decide(S).num_steps == depths[0]
    assert set(got) <= set(CycleConfig(depths=tuple(depths), period=period).candidate_steps())


def test_cycle_rejects_depth_out_of_range() -> None:
    with pytest.raises(ValueError, match="depths"):
        CycleConfig(depths=(3, 99), period=2)


def test_raise_fails_exactly_on_its_window() -> None:
    pol = RaisePolicy(RaiseConfig(num_steps=0, raise_from=2, raise_count=3))
    outcome: list[int | str] = []
    for _ in range(8):
        try:
            outcome.append(pol.decide(S).num_steps)
        except RuntimeError:
            outcome.append("x")
    assert outcome == [0, 0, "x", "x", "x", 0, 0, 0]


@pytest.mark.parametrize("rank", [0, 1])
def test_raise_and_slow_on_one_rank_only(monkeypatch: pytest.MonkeyPatch, rank: int) -> None:
    """Under tensor parallelism the faults of the TP check hit rank 1 only; every other rank decides
    normally (the ranks' traces must still agree, docs/results/methodology.md)."""
    import specpolicy_gpucheck as gc

    monkeypatch.setattr(gc, "tp_rank", lambda: rank)
    slept: list[float] = []
    monkeypatch.setattr(gc.time, "sleep", slept.append)
    raising = RaisePolicy(RaiseConfig(num_steps=0, raise_from=0, raise_count=2, only_rank=1))
    slow = gc.SlowPolicy(SlowConfig(num_steps=0, delay_s=0.003, only_rank=1))
    outcome: list[int | str] = []
    for _ in range(3):
        try:
            outcome.append(raising.decide(S).num_steps)
        except RuntimeError:
            outcome.append("x")
        assert slow.decide(S).num_steps == 0
    assert outcome == (["x", "x", 0] if rank == 1 else [0, 0, 0])
    assert slept == ([0.003] * 3 if rank == 1 else [])


def test_tp_rank_is_zero_without_a_process_group() -> None:
    import specpolicy_gpucheck as gc

    assert gc.tp_rank() == 0


def test_raise_inside_the_controller_runs_the_default_and_counts() -> None:
    pol = RaisePolicy(RaiseConfig(num_steps=0, raise_from=1, raise_count=4))
    ctl = StepController(pol, allowed_steps=(0, 3), default_steps=3)
    assert [ctl.decide(S)[1] for _ in range(7)] == [0, 3, 3, 3, 3, 0, 0]
    assert ctl.errors == 4


def _dispatch(tmp_path: Path, initial: str = "on") -> tuple[DispatchPolicy, Path, Path]:
    control, log = tmp_path / "control.txt", tmp_path / "switches.jsonl"
    write_control(control, 1, initial)
    cfg = DispatchConfig(
        control_file=str(control),
        log_file=str(log),
        initial=initial,
        policies={
            "on": {"name": "static", "num_steps": 3},
            "off": {"name": "static", "num_steps": 0},
            "cyc": {"name": "gpucheck_cycle", "depths": [3, 0], "period": 2},
        },
    )
    return DispatchPolicy(cfg), control, log


def test_dispatch_follows_the_control_file_and_resets_the_child(tmp_path: Path) -> None:
    pol, control, log = _dispatch(tmp_path)
    assert [pol.decide(S).num_steps for _ in range(3)] == [3, 3, 3]
    write_control(control, 2, "cyc")
    assert [pol.decide(S).num_steps for _ in range(5)] == [3, 3, 0, 0, 3]
    write_control(control, 3, "off")
    assert pol.decide(S) == SpecMode.off()
    write_control(control, 4, "cyc")  # back to the cycle: it starts from its first depth again
    assert [pol.decide(S).num_steps for _ in range(3)] == [3, 3, 0]
    write_control(control, 5, "cyc")  # same label, new generation: reset again
    assert [pol.decide(S).num_steps for _ in range(2)] == [3, 3]
    switches = [json.loads(line) for line in log.read_text().splitlines()]
    assert [s["label"] for s in switches] == ["on", "cyc", "off", "cyc", "cyc"]
    assert [s["decide_index"] for s in switches] == [1, 4, 9, 10, 13]
    assert control.stat().st_size == CONTROL_SIZE


def test_dispatch_ignores_unknown_labels_and_waits_for_a_missing_file(tmp_path: Path) -> None:
    pol, control, _ = _dispatch(tmp_path)
    pol.decide(S)
    write_control(control, 2, "nonsense")
    assert pol.decide(S).num_steps == 3
    late = tmp_path / "late.txt"
    cfg = pol.config.model_copy(update={"control_file": str(late), "initial": "off"})
    pol2 = DispatchPolicy(cfg)
    assert pol2.decide(S).num_steps == 0  # no file yet: the initial label
    write_control(late, 1, "on")
    assert pol2.decide(S).num_steps == 3


def test_write_control_rejects_a_record_that_does_not_fit(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too long"):
        write_control(tmp_path / "c", 1, "x" * 60)


def test_dispatch_candidate_steps_are_the_union(tmp_path: Path) -> None:
    pol, _, _ = _dispatch(tmp_path)
    assert pol.config.candidate_steps() == (0, 3)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"initial": "missing"}, "initial"),
        ({"policies": {"a": {"name": "static", "num_steps": -1}}, "initial": "a"}, "num_steps"),
        ({"policies": {"a": {"name": "gpucheck_dispatch"}}, "initial": "a"}, "nest"),
        ({"policies": {}}, "policies"),
        ({"keep": ["a", "b"]}, "keep"),
    ],
)
def test_dispatch_config_errors_name_the_problem(change: dict[str, object], field: str) -> None:
    base: dict[str, object] = {
        "control_file": "/tmp/x",
        "initial": "a",
        "policies": {"a": {"name": "static", "num_steps": 3}},
    }
    with pytest.raises(ValueError, match=field):
        DispatchConfig.model_validate({**base, **change})


@given(off=st.integers(1, 40), on=st.integers(1, 20), depth=st.integers(1, 8), n=st.integers(1, 200))
@settings(max_examples=60, deadline=None)
def test_resume_is_off_for_off_steps_then_on_for_on_steps_repeating(
    off: int, on: int, depth: int, n: int
) -> None:
    pol = ResumePolicy(ResumeConfig(off_steps=off, depth=depth, on_steps=on))
    got = [pol.decide(S).num_steps for _ in range(n)]
    want = ([0] * off + [depth] * on) * (n // (off + on) + 1)
    assert got == want[:n]
    pol.reset()
    assert pol.decide(S) == SpecMode.off()
    assert ResumeConfig(off_steps=off, depth=depth, on_steps=on).candidate_steps() == (0, depth)


@pytest.mark.parametrize("bad", [{"off_steps": 0}, {"on_steps": 0}, {"depth": 0}, {"depth": 99}])
def test_resume_config_rejects_out_of_range_fields(bad: dict[str, int]) -> None:
    with pytest.raises(ValueError, match=next(iter(bad))):
        ResumeConfig(**bad)


def test_dispatch_runs_the_resume_policy_by_label(tmp_path: Path) -> None:
    control = tmp_path / "control.txt"
    write_control(control, 1, "resume-2")
    cfg = DispatchConfig(
        control_file=str(control),
        initial="resume-2",
        policies={"resume-2": {"name": "gpucheck_resume", "off_steps": 2, "depth": 3, "on_steps": 1}},
    )
    pol = DispatchPolicy(cfg)
    assert [pol.decide(S).num_steps for _ in range(6)] == [0, 0, 3, 0, 0, 3]
    assert cfg.candidate_steps() == (0, 3)


class _Hidden:
    def __init__(self) -> None:
        self.zeroed = 0

    def zero_(self) -> None:
        self.zeroed += 1


class _Target:
    """Stands in for the adapter's DecodeTarget: its forward returns what the target worker returned."""

    def forward(self, forward_fn: object, model_runner: object, decode_mwb: object) -> object:
        assert callable(forward_fn)
        return forward_fn(decode_mwb)


def _out(hidden: object) -> object:
    class Logits:
        hidden_states = hidden

    class Out:
        logits_output = Logits()

    return Out()


def test_skipped_catch_up_zeroes_hidden_states_only_while_armed() -> None:
    skip = CatchUpSkip(target=_Target)
    pol = SkipCatchUpPolicy(SkipCatchUpConfig(off_steps=2, depth=3, on_steps=4), skip=skip)
    assert skip.installed and not skip.armed  # built, not yet deciding: the engine's steps are untouched
    h = _Hidden()
    _Target().forward(lambda mwb: _out(h), None, None)
    assert h.zeroed == 0
    assert [pol.decide(S).num_steps for _ in range(7)] == [0, 0, 3, 3, 3, 3, 0]  # gpucheck_resume's schedule
    assert skip.armed
    _Target().forward(lambda mwb: _out(h), None, None)
    _Target().forward(lambda mwb: _out(None), None, None)  # a forward without hidden states is left alone
    assert h.zeroed == 1 and skip.zeroed == 1
    wrapped = _Target.forward
    assert skip.install() and _Target.forward is wrapped  # wrapped once, not twice


def test_dispatch_disarms_the_skip_when_it_switches_away(tmp_path: Path) -> None:
    control = tmp_path / "control.txt"
    write_control(control, 1, "skip")
    cfg = DispatchConfig(
        control_file=str(control),
        initial="skip",
        policies={
            "skip": {"name": "gpucheck_skip_catch_up", "off_steps": 2, "depth": 3, "on_steps": 9},
            "on": {"name": "static", "num_steps": 3},
        },
    )
    pol = DispatchPolicy(cfg)
    assert [pol.decide(S).num_steps for _ in range(3)] == [0, 0, 3]
    assert CATCH_UP_SKIP.armed
    write_control(control, 2, "on")
    assert pol.decide(S).num_steps == 3 and not CATCH_UP_SKIP.armed
    write_control(control, 3, "skip")
    assert pol.decide(S).num_steps == 0 and CATCH_UP_SKIP.armed  # fresh: off first again
    assert cfg.candidate_steps() == (0, 3)


def test_dispatch_keeps_what_a_kept_child_learned_across_phases(tmp_path: Path) -> None:
    """A child in ``keep`` resumes where it stopped when its label comes back; the others start fresh."""
    control = tmp_path / "control.txt"
    write_control(control, 1, "kept")
    cyc = {"name": "gpucheck_cycle", "depths": [3, 0], "period": 2}
    cfg = DispatchConfig(
        control_file=str(control),
        initial="kept",
        policies={"kept": cyc, "fresh": cyc, "off": {"name": "static", "num_steps": 0}},
        keep=["kept"],
    )
    pol = DispatchPolicy(cfg)
    assert [pol.decide(S).num_steps for _ in range(3)] == [3, 3, 0]
    write_control(control, 2, "off")
    assert pol.decide(S).num_steps == 0
    write_control(control, 3, "kept")  # resumes mid-cycle: one more 0, then 3s
    assert [pol.decide(S).num_steps for _ in range(3)] == [0, 3, 3]
    write_control(control, 4, "fresh")
    assert [pol.decide(S).num_steps for _ in range(3)] == [3, 3, 0]
    write_control(control, 5, "off")
    pol.decide(S)
    write_control(control, 6, "fresh")  # not kept: from its first depth again
    assert [pol.decide(S).num_steps for _ in range(2)] == [3, 3]
