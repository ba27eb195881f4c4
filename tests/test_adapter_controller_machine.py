"""StepController as a state machine: any interleaving of decisions, forced steps, outcomes (late, twice,
malformed, for no decision), forget and close keeps its promises.

The model is the controller's contract, not its code: every step runs a depth the engine pre-built; a policy
that raises or returns anything but an allowed ``SpecMode`` gets the default depth and is counted; a policy
over its decide() budget on ``budget_steps`` calls (decayed: a call within the budget takes
``1 / BUDGET_DECAY`` off) is replaced by the default and consulted only every ``RETRY_INTERVAL`` steps; the
counters add up to the steps; an outcome is used only while its decision waits (at most ``MAX_OPEN`` wait);
the observers receive every decision once, in order, with its own outcome, even when another observer
raises.
"""

from __future__ import annotations

import logging
from collections import Counter
from fractions import Fraction
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from specpolicy import SpecMode, StepStats
from specpolicy.mode import MAX_NUM_STEPS
from specpolicy.runtime import controller as controller_module
from specpolicy.runtime.budget import BUDGET_DECAY, RETRY_INTERVAL
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.pairing import MAX_OPEN, NOTHING_KNOWN

#: the outcome fields of a StepStats, by name: a field added anywhere else leaves them as they are
_F = StepStats._fields
OUTCOME_FIELDS = _F[_F.index("last_num_steps") : _F.index("last_request_ids") + 1]

BUDGET_S = 1e-3


class Clock:
    """The controller's perf counter: a policy's call takes exactly the time the test says."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


class Policy:
    """Returns (or raises) what the test hands it, taking ``cost_s`` on the controller's clock."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.answer: Any = SpecMode.off()
        self.cost_s = 0.0
        self.calls = 0

    def decide(self, stats: StepStats) -> SpecMode:
        self.calls += 1
        self.clock.t += self.cost_s
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer  # type: ignore[no-any-return]

    def reset(self) -> None:
        pass


class Recorder:
    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def on_record(self, record: StepRecord) -> None:
        self.records.append(record)


class Flaky:
    """An observer that raises on every third record: it must not cost the others theirs."""

    def __init__(self) -> None:
        self.seen = 0

    def on_record(self, record: StepRecord) -> None:
        self.seen += 1
        if self.seen % 3 == 0:
            raise RuntimeError("observer down")


ANSWERS = st.sampled_from(["allowed", "not built", "not a mode", "raise"])


class ControllerMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self._saved_perf = controller_module._perf
        self.clock = Clock()
        controller_module._perf = self.clock
        logging.disable(logging.CRITICAL)

    def teardown(self) -> None:
        controller_module._perf = self._saved_perf
        logging.disable(logging.NOTSET)

    @initialize(
        allowed=st.sets(st.integers(0, 8), min_size=1, max_size=5),
        data=st.data(),
        budget_steps=st.sampled_from([0, 1, 2, 3]),
    )
    def start(self, allowed: set[int], data: st.DataObject, budget_steps: int) -> None:
        self.allowed = sorted(allowed)
        self.default = data.draw(st.sampled_from(self.allowed), label="default")
        self.policy = Policy(self.clock)
        self.recorder = Recorder()
        self.flaky = Flaky()
        self.ctl = StepController(
            self.policy,
            allowed_steps=self.allowed,
            default_steps=self.default,
            observers=(self.flaky, self.recorder),
            decide_budget_s=BUDGET_S,
            budget_steps=budget_steps,
        )
        self.budget_steps = budget_steps
        # the model
        self.depths: list[int] = []  # depth run by each step (index = step - 1)
        self.batches: list[int] = []
        self.fallback: list[bool] = []
        self.errors = 0
        self.over = 0
        self.budget_fallbacks = 0
        self.slow = Fraction(0)  # the decayed count of over-budget calls
        self.done = 0  # every decision up to this one has been handed over
        self.times: dict[int, float] = {}  # step -> the time its used outcome reported
        self.known: tuple[Any, ...] = NOTHING_KNOWN
        self.closed = False

    # -- the model's rules --------------------------------------------------------------------------------

    def _stats(self, batch: int) -> StepStats:
        stats = self.ctl.next_stats(batch, 0, 100.0)
        # the outcome fields are those of the latest used outcome
        assert tuple(getattr(stats, f) for f in OUTCOME_FIELDS) == self.known
        return stats

    def _new_step(self, depth: int, batch: int, fallback: bool) -> None:
        self.depths.append(depth)
        self.batches.append(batch)
        self.fallback.append(fallback)
        self.done = max(self.done, len(self.depths) - MAX_OPEN)  # the oldest waiting one is handed over

    def _decide(self, answer: str, depth: int, slow: bool, batch: int) -> None:
        tripped = self.budget_steps > 0 and self.slow >= self.budget_steps
        consulted = not tripped or len(self.depths) % RETRY_INTERVAL == 0
        if answer == "allowed":
            value: Any = SpecMode.of(self.allowed[depth % len(self.allowed)])
        elif answer == "not built":
            value = SpecMode.of(next(k for k in range(9, 65) if k not in self.allowed))
        elif answer == "not a mode":
            value = depth
        else:
            value = ValueError("policy down")
        self.policy.answer, self.policy.cost_s = value, (3 * BUDGET_S if slow else 0.0)
        calls = self.policy.calls
        got = self.ctl.decide(self._stats(batch))[1]
        assert got in self.allowed
        assert self.policy.calls == calls + consulted
        if not consulted:
            self.budget_fallbacks += 1
            assert got == self.default
            self._new_step(got, batch, True)
            return
        good = answer == "allowed"
        assert got == (value.num_steps if good else self.default)
        self.errors += not good
        if slow:
            self.over += 1
            self.slow = min(self.slow + 1, Fraction(self.budget_steps)) if self.budget_steps else Fraction(0)
        elif self.slow:
            self.slow = max(self.slow - Fraction(1, BUDGET_DECAY), Fraction(0))
        self._new_step(got, batch, not good)

    @precondition(lambda self: not self.closed)
    @rule(answer=ANSWERS, depth=st.integers(0, 8), slow=st.booleans(), batch=st.integers(1, 64))
    def decide(self, answer: str, depth: int, slow: bool, batch: int) -> None:
        self._decide(answer, depth, slow, batch)

    @precondition(lambda self: not self.closed)
    @rule(n=st.sampled_from([20, 100, 300]), slow=st.booleans())
    def many_steps(self, n: int, slow: bool) -> None:
        """Long runs of one behaviour: far enough to trip the budget, retry, recover, and evict."""
        for _ in range(n):
            self._decide("allowed", 1, slow, 8)

    @precondition(lambda self: not self.closed)
    @rule(depth=st.integers(0, 8), batch=st.integers(1, 64))
    def force(self, depth: int, batch: int) -> None:
        k = self.allowed[depth % len(self.allowed)]
        calls = self.policy.calls
        assert self.ctl.force(self._stats(batch), k)[1] == k
        assert self.policy.calls == calls
        self._new_step(k, batch, False)

    @precondition(lambda self: bool(self.depths))
    @rule(
        back=st.integers(0, MAX_OPEN + 3),
        acc=st.none() | st.lists(st.integers(0, 8), max_size=4),
        time_s=st.none() | st.floats(1e-4, 1.0),
        ran=st.none() | st.integers(0, 8),
    )
    def outcome(self, back: int, acc: list[int] | None, time_s: float | None, ran: int | None) -> None:
        step = len(self.depths) - back
        self.ctl.outcome(step, acc, time_s, ran)
        if not self.done < step <= len(self.depths):
            return  # handed over already (or never decided): ignored
        self.done = step
        if time_s is not None:
            self.times[step] = time_s
        k = self.depths[step - 1] if ran is None else ran
        batch, decided = self.batches[step - 1], self.depths[step - 1]
        if k > 0:
            self.known = (k, acc, None, time_s, None, batch, decided, 100.0, None)
        else:  # a step without speculation has no acceptance data
            self.known = (0, None, None, time_s, None, batch, decided, 100.0, None)

    @precondition(lambda self: bool(self.depths))
    @rule(bad=st.sampled_from(["3", None, 2.5, float("nan"), object()]))
    def malformed_step(self, bad: object) -> None:
        before = self.ctl.bad_outcomes
        self.ctl.outcome(bad, [1], 0.01)  # type: ignore[arg-type]
        assert self.ctl.bad_outcomes == before + 1

    @precondition(lambda self: bool(self.depths))
    @rule(bad=st.sampled_from(["3", -1, 2.5, MAX_NUM_STEPS + 1, object()]), back=st.integers(0, 3))
    def malformed_depth(self, bad: object, back: int) -> None:
        """An outcome whose depth is no count is ignored and counted, whether or not its decision waits."""
        before = self.ctl.bad_outcomes
        self.ctl.outcome(len(self.depths) - back, [1], 0.01, bad)  # type: ignore[arg-type]
        assert self.ctl.bad_outcomes == before + 1

    @rule()
    def forget(self) -> None:
        self.ctl.forget()
        self.known = NOTHING_KNOWN

    @precondition(lambda self: not self.closed)
    @rule()
    def close(self) -> None:
        self.ctl.close()
        self.done = len(self.depths)
        self.closed = True

    # -- invariants ---------------------------------------------------------------------------------------

    @invariant()
    def counters_add_up(self) -> None:
        if not hasattr(self, "ctl"):
            return
        ctl = self.ctl
        assert ctl.step == len(self.depths)
        by_depth = ctl.steps_by_depth
        assert sum(by_depth.values()) == ctl.step
        assert {k: n for k, n in by_depth.items() if n} == dict(Counter(self.depths))
        assert ctl.switches == sum(1 for a, b in zip(self.depths, self.depths[1:], strict=False) if a != b)
        assert (ctl.errors, ctl.over_budget, ctl.budget_fallbacks) == (
            self.errors,
            self.over,
            self.budget_fallbacks,
        )
        assert (ctl.first_error is not None) == (self.errors > 0)

    @invariant()
    def each_decision_reaches_the_observers_once_in_order_with_its_own_outcome(self) -> None:
        if not hasattr(self, "ctl"):
            return
        records = self.recorder.records
        assert [r.step for r in records] == list(range(1, self.done + 1))
        for r in records:
            assert r.num_steps == self.depths[r.step - 1] and r.num_steps in self.allowed
            assert r.fallback == self.fallback[r.step - 1]
            assert r.stats.batch_size == self.batches[r.step - 1]
            assert r.step_time_s == self.times.get(r.step)
        assert self.flaky.seen == len(records)  # the raising observer was offered every record too
        assert self.ctl.waiting == len(self.depths) - self.done <= MAX_OPEN


TestStepController = ControllerMachine.TestCase
TestStepController.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
