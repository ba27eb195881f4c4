"""The step path fills StepStats by field name: a field added to StepStats anywhere moves nothing.

The controller module is compiled again against a variant of StepStats with one more field (``extra``) in
each position in turn; the StepStats it builds must carry every value under its own name, the new field at
its default, through ``next_stats``, ``outcome``, the hints and the rank agreement (``tp``).
"""

from __future__ import annotations

import importlib.util
import sys
from collections import namedtuple
from types import ModuleType
from typing import Any

import pytest

import specpolicy.runtime.controller as controller
import specpolicy.runtime.pairing as pairing
import specpolicy.runtime.tp as tp
import specpolicy.stats
from specpolicy.hints import aggregate
from specpolicy.mode import SpecMode
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.stats_layout import BATCH, LOAD, OUTCOME, StatsLayout
from specpolicy.stats import StepStats

EXTRA = object()  # the new field's default
FIELDS = StepStats._fields


def _variant(position: int) -> Any:
    names = [*FIELDS[:position], "extra", *FIELDS[position:]]
    defaults = {**StepStats._field_defaults, "batch_size": 0, "extra": EXTRA}
    return namedtuple("Variant", names, defaults=[defaults[n] for n in names])  # noqa: PYI024


@pytest.fixture(params=range(len(FIELDS) + 1), ids=lambda p: f"extra-at-{p}")
def variant(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ModuleType]:
    """A StepStats variant and the controller compiled against it: ``pairing`` (where the fields are
    placed) and ``controller`` (which reads the hints and the batch size) are loaded again while
    ``specpolicy.stats.StepStats`` is the variant; the originals come back after the test."""
    cls = _variant(request.param)
    monkeypatch.setattr(specpolicy.stats, "StepStats", cls)
    fresh = {}
    for module in (pairing, controller):
        spec = importlib.util.spec_from_file_location(module.__name__, module.__file__)
        assert spec is not None and spec.loader is not None
        fresh[module] = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, module.__name__, fresh[module])
        spec.loader.exec_module(fresh[module])
    return cls, fresh[controller]


class Seen:
    """Answers the scripted depths and keeps what it was shown."""

    def __init__(self, *depths: int) -> None:
        self.depths = list(depths)
        self.seen: list[Any] = []

    def decide(self, stats: Any) -> SpecMode:
        self.seen.append(stats)
        return SpecMode.of(self.depths[(len(self.seen) - 1) % len(self.depths)])

    def reset(self) -> None:
        pass


def _named(stats: Any) -> dict[str, Any]:
    return {f: getattr(stats, f) for f in (*LOAD, *OUTCOME, *BATCH)}


def test_outcome_fields_land_under_their_names(variant: tuple[Any, ModuleType]) -> None:
    cls, mod = variant
    ctl = mod.StepController(Seen(2, 0), allowed_steps=range(4), default_steps=3)
    first = ctl.next_stats(4, 2, 100.0)
    assert type(first) is cls and first.extra is EXTRA
    nothing = dict(zip(OUTCOME, sys.modules[pairing.__name__].NOTHING_KNOWN, strict=True))
    load = {"batch_size": 4, "num_waiting": 2, "mean_seq_len": 100.0, "request_ids": None, "hints": None}
    assert _named(first) == {**nothing, **load}
    step, k = ctl.decide(first)
    assert k == 2
    ctl.outcome(step, [1, 2, 0, 1], 0.02, None, [2, 2, 2, 1], 1.0, ["a", "b", "c", "d"])
    second = ctl.next_stats(3, 0, 50.0, ["x", "y", "z"])
    assert second.extra is EXTRA
    assert _named(second) == {
        "batch_size": 3, "num_waiting": 0, "mean_seq_len": 50.0,
        "last_num_steps": 2, "accepted_draft_tokens": [1, 2, 0, 1], "drafted_tokens": [2, 2, 2, 1],
        "last_step_time_s": 0.02, "mean_accepted": 1.0, "last_batch_size": 4, "last_decided_steps": 2,
        "last_mean_seq_len": 100.0, "last_request_ids": ["a", "b", "c", "d"],
        "request_ids": ["x", "y", "z"], "hints": None,
    }  # fmt: skip
    assert ctl.known == tuple(getattr(second, f) for f in OUTCOME)
    step, k = ctl.decide(second)
    assert k == 0
    ctl.outcome(step, [9], 0.01)  # an off step: no acceptance data, whatever the engine says
    third = ctl.next_stats(1, 5, None)
    assert (third.last_num_steps, third.accepted_draft_tokens, third.last_step_time_s) == (0, None, 0.01)
    assert (third.last_batch_size, third.last_mean_seq_len, third.extra) == (3, 50.0, EXTRA)


def test_hints_are_read_under_their_name(variant: tuple[Any, ModuleType]) -> None:
    """The hints limit the depth from the ``hints`` field and the batch size from ``batch_size``."""
    cls, mod = variant
    ctl = mod.StepController(Seen(3), allowed_steps=range(4), default_steps=3)
    assert ctl.decide(ctl.next_stats(2, 0, None, None, aggregate([0, 0])))[1] == 0  # all off
    assert ctl.decide(ctl.next_stats(4, 0, None, None, aggregate([1, 1, 1, 1])))[1] == 1
    assert ctl.decide(ctl.next_stats(4, 0, None))[1] == 3


class _Pair:
    """Two ranks' DecisionSync in one thread: rank 0 shares first, rank 1 reads what it shared."""

    def __init__(self) -> None:
        self.sent: list[int] = []

    def rank(self, r: int) -> Any:
        pair = self

        class Sync:
            rank = r

            def share(self, num_steps: int) -> int:
                if r == 0:
                    pair.sent.append(num_steps)
                    return num_steps
                return pair.sent.pop(0)

            def share_bytes(self, data: bytes | None) -> bytes:
                return data or b""

        return Sync()


def test_rank_agreement_keeps_every_field(variant: tuple[Any, ModuleType]) -> None:
    """Local agreement hides the step time from the policy (and only that); a broadcast depth recorded
    on the other rank pairs its outcome with that rank's own StepStats, by name."""
    cls, mod = variant
    policy = Seen(2)
    guarded = mod.StepController(policy, allowed_steps=range(4), default_steps=3)
    local = tp.AgreedDecider(guarded, "local", world_size=2)
    full = cls(batch_size=4, num_waiting=1, mean_seq_len=10.0, last_num_steps=2, last_step_time_s=0.5)
    assert local.decide(full)[1] == 2
    assert policy.seen[-1] == full._replace(last_step_time_s=None)

    pair = _Pair()
    ranks = [
        tp.AgreedDecider(
            mod.StepController(Seen(r + 1), allowed_steps=range(4), default_steps=3),
            "broadcast",
            pair.rank(r),
            world_size=2,
        )
        for r in (0, 1)
    ]
    for r, agreed in enumerate(ranks):
        ctl = agreed.controller
        step, k = agreed.decide(ctl.next_stats(4 + r, 0, 100.0))
        assert k == 1  # rank 0's depth on both
        ctl.outcome(step, [1] * (4 + r), 0.03)
    after = [agreed.controller.next_stats(2, 0, None) for agreed in ranks]
    for r, stats in enumerate(after):
        assert (stats.last_num_steps, stats.last_batch_size, stats.last_step_time_s) == (1, 4 + r, 0.03)
        assert stats.accepted_draft_tokens == [1] * (4 + r) and stats.extra is EXTRA


def test_the_production_layout_builds_stepstats_in_its_own_order() -> None:
    ctl = controller.StepController(Seen(1), allowed_steps=range(4), default_steps=3)
    assert pairing._ARRANGE is None  # today's order is the controller's: nothing to rearrange per step
    stats = ctl.next_stats(7, 1, 3.0, ["r"], aggregate([2]))
    assert type(stats) is StepStats and stats == StepStats(7, 1, 3.0, request_ids=["r"], hints=aggregate([2]))


def test_the_open_decisions_positions_are_step_records() -> None:
    assert StepRecord._fields[pairing._O_STATS] == "stats"
    assert StepRecord._fields[pairing._O_DEPTH] == "num_steps"
    assert StepRecord._fields[pairing._O_ASKED] == "step_time_s" == StepRecord._fields[-1]


def test_a_stats_class_without_a_step_path_field_or_default_is_refused() -> None:
    lacking = namedtuple("Lacking", [f for f in FIELDS if f != "last_batch_size"])  # noqa: PYI024
    with pytest.raises(TypeError, match="last_batch_size"):
        StatsLayout(lacking)
    undefaulted = namedtuple("Undefaulted", [*FIELDS, "priority"])  # noqa: PYI024
    with pytest.raises(TypeError, match="priority"):
        StatsLayout(undefaulted)
