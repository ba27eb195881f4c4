"""The legacy step runtime as a state machine: decode steps (on, off, forced, a failing policy), prefills,
finished requests and results on the v1 (same step) or v2 (one step late) schedule, in any order, driven
as the worker hooks drive ``StepRuntime`` and ``DraftLag``.

Invariants: a step skips speculation exactly when the policy said off and the batch was not forced; every
depth is 0 or the launch depth, and a failing policy runs the launch depth and is counted; the counters add
up; each outcome pairs one step's own acceptance, depth, batch and time (the interval from its start to the
next step's, unknown across a prefill), never a neighbour's; each decision reaches the observers once, in
order; and the drafter's lag (off steps skipped, positions each request misses, whether a catch-up is due,
positions caught up) matches the off steps each request sat through.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from specpolicy.adapters.sglang.legacy.draft_lag import DraftLag
from specpolicy.adapters.sglang.legacy.runtime import Path, StepRuntime, make_runtime
from specpolicy.mode import SpecMode
from specpolicy.runtime.decision import StepRecord
from specpolicy.runtime.settings import AdapterSettings
from specpolicy.stats import StepStats

SETTINGS = AdapterSettings.build("static", metrics=False)
PROMPT = 64  # tokens per prompt: more than the off steps a run can make, so every catch-up is recoverable


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class Policy:
    """Answers what the test hands it and keeps the stats it saw."""

    def __init__(self) -> None:
        self.answer: Any = SpecMode.off()
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
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


@dataclass(eq=False)
class Req:
    """The fields of SGLang's Req that DraftLag reads."""

    req_pool_idx: int
    origin_input_ids: list[int] = field(default_factory=lambda: list(range(PROMPT)))
    output_ids: list[int] = field(default_factory=list)

    @property
    def seq_len(self) -> int:
        return len(self.origin_input_ids) + len(self.output_ids)


ANSWERS = st.sampled_from(["on", "on", "off", "off", "raise"])


class LegacyRuntimeMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        logging.disable(logging.CRITICAL)

    def teardown(self) -> None:
        logging.disable(logging.NOTSET)

    @initialize(launch=st.integers(1, 8), path=st.sampled_from(["v1", "v2"]))
    def start(self, launch: int, path: Path) -> None:
        self.policy = Policy()
        self.recorder = Recorder()
        self.rt: StepRuntime = make_runtime(
            SETTINGS, policy=self.policy, launch_depth=launch, path=path, observers=[self.recorder]
        )
        self.clock = Clock()
        self.rt._clock = self.clock
        self.launch, self.path = launch, path
        self.lag = DraftLag()
        self.reqs: list[Req] = []
        self.next_row = 0
        # the model: per step (index = step - 1) its depth, batch size and start time; where a prefill
        # broke the chain after it, no time
        self.depths: list[int] = []
        self.batches: list[int] = []
        self.starts: list[float] = []
        self.broken: set[int] = set()
        self.pending: int | None = None  # v2: the step whose result comes after the next forward starts
        self.errors = self.forced = self.skipped = 0
        self.behind: dict[int, int] = {}  # request row -> off steps since its draft state was exact
        self.off_positions = self.caught_up = 0

    # -- rules --------------------------------------------------------------------------------------------

    def _deliver(self) -> None:
        """v2: the result of the previous decode step reaches the CPU."""
        if self.pending is not None:
            s, self.pending = self.pending, None
            self.rt.on_result(s, [s] if self.depths[s - 1] else None)

    @precondition(lambda self: bool(self.reqs))
    @rule(answer=ANSWERS, forced=st.booleans(), dt=st.floats(1e-3, 0.1))
    def decode_step(self, answer: str, forced: bool, dt: float) -> None:
        self.clock.t += dt  # the previous forward's time
        self.policy.answer = {
            "on": SpecMode.on(1 + int(dt * 1e4) % 8),  # any depth: the legacy worker runs the launch depth
            "off": SpecMode.off(),
            "raise": RuntimeError("policy down"),
        }[answer]
        n = len(self.reqs)
        step = len(self.depths) + 1
        seen = len(self.policy.seen)
        # mean_seq_len = the step's number: the outcome fields then name the step they describe
        skip = self.rt.begin_decode(n, step * n, forced_on=forced)
        assert len(self.policy.seen) == seen + (not forced)  # a forced step does not ask the policy
        assert skip == (answer == "off" and not forced)
        assert self.rt.current_step == step
        self.errors += answer == "raise" and not forced
        self.forced += forced
        self.skipped += skip
        self.depths.append(0 if skip else self.launch)
        self.batches.append(n)
        self.starts.append(self.clock.t)
        if self.path == "v2":
            self._deliver()
        # the forward, as the hooks run it: an off step leaves the drafter behind, a speculative step
        # catches it up first
        if skip:
            self.lag.on_off_step(n)
            self.off_positions += n
            for r in self.reqs:
                self.behind[r.req_pool_idx] += 1
        elif self.lag.behind():
            plan = self.lag.plan(self.reqs, [r.seq_len for r in self.reqs])
            stale = sum(1 for r in self.reqs if self.behind[r.req_pool_idx])
            if not stale:  # those that missed positions finished: nothing to extend
                assert plan is None
            else:
                assert plan is not None and plan.stale == stale
                # each request extends what it missed; one with nothing missing is recomputed at one
                assert plan.missing == tuple(max(self.behind[r.req_pool_idx], 1) for r in self.reqs)
                self.lag.mark_caught_up(self.reqs, plan)
                self.caught_up += sum(plan.missing)
                for r in self.reqs:
                    self.behind[r.req_pool_idx] = 0
        if not skip:
            assert not self.lag.behind()
        self.rt.end_decode()
        assert self.rt.skip is False
        for r in self.reqs:
            r.output_ids.append(step)
        if self.path == "v1":
            self.rt.on_result(step, [step] if not skip else None)
        else:
            self.pending = step

    @rule(dt=st.floats(1e-3, 0.1))
    def prefill(self, dt: float) -> None:
        """A new request's prefill (a forward that is not a decode step): the drafter is exact for it."""
        self.clock.t += dt
        self.rt.on_non_decode()
        if self.depths:
            self.broken.add(len(self.depths))  # the last decode step's interval includes this forward
        if self.path == "v2":
            self._deliver()
        req = Req(self.next_row)
        self.next_row += 1
        self.lag.on_extend([req])
        self.behind[req.req_pool_idx] = 0
        self.reqs.append(req)

    @precondition(lambda self: len(self.reqs) > 1)
    @rule(i=st.integers(0, 63))
    def finish(self, i: int) -> None:
        """A request leaves the batch (it never pays for what it missed)."""
        req = self.reqs.pop(i % len(self.reqs))
        del self.behind[req.req_pool_idx]

    # -- invariants ---------------------------------------------------------------------------------------

    def _duration(self, s: int) -> float | None:
        """The true time of step ``s``: from its start to the next step's (None across a prefill)."""
        if s in self.broken or s >= len(self.starts):
            return None
        return self.starts[s] - self.starts[s - 1]

    @invariant()
    def counters_add_up(self) -> None:
        if not hasattr(self, "rt"):
            return
        rt, ctl = self.rt, self.rt.runtime.controller
        assert rt.decode_steps == len(self.depths) and rt.forced_steps == self.forced
        assert rt.skipped_steps == self.skipped == self.depths.count(0)
        assert set(ctl.steps_by_depth) <= {0, self.launch}
        assert sum(ctl.steps_by_depth.values()) == len(self.depths)
        assert ctl.errors == self.errors

    @invariant()
    def each_outcome_describes_one_step(self) -> None:
        if not hasattr(self, "rt"):
            return
        for stats in self.policy.seen:
            if stats.last_mean_seq_len is None:
                assert stats.last_num_steps == 0 and stats.accepted_draft_tokens is None
                continue
            s = int(stats.last_mean_seq_len)
            assert stats.last_batch_size == self.batches[s - 1]
            assert stats.last_num_steps == self.depths[s - 1]
            # every result here arrives, so a speculative step's acceptance is always its own
            acc = stats.accepted_draft_tokens
            assert acc is None if self.depths[s - 1] == 0 else list(acc or ()) == [s]
            assert stats.last_step_time_s == self._duration(s)
        records = self.recorder.records
        assert [r.step for r in records] == list(range(1, len(records) + 1))
        for r in records:
            assert r.num_steps == self.depths[r.step - 1]
            assert r.step_time_s == self._duration(r.step)

    @invariant()
    def the_drafters_lag_is_the_off_steps_each_request_sat_through(self) -> None:
        if not hasattr(self, "rt"):
            return
        lag = self.lag
        assert lag.off_steps == self.skipped and lag.skipped_positions == self.off_positions
        for r in self.reqs:
            assert lag.missing(r) == self.behind[r.req_pool_idx]
        if any(self.behind.values()):
            assert lag.behind()  # a catch-up is due before the next speculative step
        assert lag.caught_up_positions == self.caught_up and lag.unrecoverable == 0


TestLegacyRuntime = LegacyRuntimeMachine.TestCase
TestLegacyRuntime.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)
