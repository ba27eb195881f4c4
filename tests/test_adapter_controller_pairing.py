"""StepController's one pairing of a decision with its outcome: numbered decisions, outcomes reported with
the decision's number, the next StepStats built from that decision's own depth and batch size, and every
decision handed to the observers once, in order, with the outcome it got."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.pairing import MAX_OPEN


class Depths:
    """A policy that answers scripted depths."""

    def __init__(self, depths: list[int]) -> None:
        self.depths = depths
        self.i = 0

    def decide(self, stats: StepStats) -> SpecMode:
        k = self.depths[self.i % len(self.depths)]
        self.i += 1
        return SpecMode.of(k)

    def reset(self) -> None:
        pass


class Records:
    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def on_record(self, record: StepRecord) -> None:
        self.records.append(record)


# A run: each event is a decision (its batch size) or the outcome of the decision `lag` decisions back.
EVENTS = st.lists(
    st.one_of(
        st.tuples(st.just("decide"), st.integers(1, 64)),
        st.tuples(st.just("outcome"), st.integers(0, 3)),
    ),
    min_size=1,
    max_size=60,
)


@given(EVENTS, st.lists(st.sampled_from([0, 1, 3]), min_size=1, max_size=5))
def test_next_stats_describe_the_reported_decision_and_observers_get_each_once(
    events: list[tuple[str, int]], depths: list[int]
) -> None:
    obs = Records()
    ctl = StepController(Depths(depths), allowed_steps=(0, 1, 3), default_steps=3, observers=[obs])
    decided: list[tuple[int, int, float]] = []  # (depth, batch size, context length) per decision number - 1
    reported: dict[int, float] = {}
    latest = 0  # the newest decision reported so far (outcomes of older ones are ignored)
    expect_known: tuple[Any, ...] = (0, None, None, None, None, None, None, None, None, None)
    for i, (kind, arg) in enumerate(events):
        if kind == "decide":
            seq_len = 100.0 + i  # each decision's own context length, so one from another decision shows
            stats = ctl.next_stats(arg, 2, seq_len)
            assert stats[3:-1] == expect_known
            assert StepStats(*stats) == stats  # what the controller builds passes the validating constructor
            decided.append((ctl.decide(stats)[1], arg, seq_len))
            assert ctl.step == len(decided)
        else:
            step = len(decided) - arg
            if step < 1:
                continue
            t = 0.001 * (i + 1)
            acc = [1] * decided[step - 1][1]
            ctl.outcome(step, acc, t)
            if step > latest:  # reported in time: it becomes what the next decision sees
                latest = step
                reported[step] = t
                k, bs, ctx = decided[step - 1]
                expect_known = (k, acc if k else None, None, t, None, bs, k, ctx)
                expect_known += (None, None)  # no request ids reported, none for the batch
            assert ctl.next_stats(1, 0, None)[3:-1] == expect_known
    ctl.close()
    assert [r.step for r in obs.records] == list(range(1, len(decided) + 1))
    assert [r.num_steps for r in obs.records] == [k for k, _, _ in decided]
    assert [r.stats.batch_size for r in obs.records] == [bs for _, bs, _ in decided]
    assert {r.step: r.step_time_s for r in obs.records if r.step_time_s is not None} == reported


def test_a_decision_whose_outcome_never_comes_is_handed_over_without_one() -> None:
    obs = Records()
    ctl = StepController(Depths([3]), allowed_steps=(0, 3), default_steps=3, observers=[obs])
    for _ in range(MAX_OPEN):
        ctl.decide(StepStats(4))
    assert obs.records == [] and ctl.waiting == MAX_OPEN
    ctl.decide(StepStats(4))  # one more than can wait: the oldest goes out, without an outcome
    assert [(r.step, r.step_time_s) for r in obs.records] == [(1, None)]
    ctl.outcome(3, [2, 2, 2, 2], 0.01)  # 2 never got one: out before 3, in order
    assert [(r.step, r.step_time_s) for r in obs.records] == [(1, None), (2, None), (3, 0.01)]
    ctl.outcome(2, [0], 0.5)  # too late: already handed over, and older than what is known
    assert ctl.known == (3, [2, 2, 2, 2], None, 0.01, None, 4, 3, None, None)
    ctl.close()
    assert [r.step for r in obs.records] == list(range(1, MAX_OPEN + 2)) and ctl.waiting == 0


def test_an_outcome_may_name_the_depth_that_ran_and_an_off_step_has_no_acceptance() -> None:
    ctl = StepController(Depths([3, 0]), allowed_steps=(0, 3), default_steps=3)
    ctl.decide(StepStats(2, mean_seq_len=300.0))
    ctl.outcome(1, [1, 2], 0.02, num_steps=2, drafted=[2, 2], mean_accepted=1.5)
    # decided 3, ran 2: both are said
    assert ctl.next_stats(5, 0, None) == StepStats(5, 0, None, 2, [1, 2], [2, 2], 0.02, 1.5, 2, 3, 300.0)
    ctl.decide(StepStats(3))
    ctl.outcome(2, [0, 0, 0], 0.01)  # SGLang reports zeros for a steps=0 round: not "zero acceptance"
    assert ctl.next_stats(5, 0, None) == StepStats(5, 0, None, 0, None, None, 0.01, None, 3, 0, None)
    ctl.forget()  # feedback that matches no decision: nothing is known
    assert ctl.next_stats(5, 0, None) == StepStats(5)


def test_a_raising_observer_does_not_cost_the_others_their_records() -> None:
    class Bad:
        def on_record(self, record: StepRecord) -> None:
            raise OSError("disk full")

    good = Records()
    ctl = StepController(Depths([3]), allowed_steps=(0, 3), default_steps=3, observers=[Bad(), good])
    ctl.decide(StepStats(1))
    ctl.outcome(1, [2], 0.1)
    assert [(r.step, r.num_steps, r.step_time_s) for r in good.records] == [(1, 3, 0.1)]
    assert ctl.errors == 0  # observer failures are not policy failures


def test_forced_steps_are_numbered_and_paired_like_decisions() -> None:
    obs = Records()
    ctl = StepController(Depths([0]), allowed_steps=(0, 3), default_steps=3, observers=[obs])
    assert ctl.force(StepStats(4), 3)[1] == 3 and ctl.step == 1
    ctl.outcome(1, [3, 3, 3, 3], 0.03)
    assert ctl.next_stats(4, 0, None)[3:-1] == (3, [3, 3, 3, 3], None, 0.03, None, 4, 3, None, None, None)
    ctl.close()
    assert [(r.step, r.num_steps, r.fallback) for r in obs.records] == [(1, 3, False)]
