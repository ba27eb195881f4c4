"""The vLLM adapter's step ledger, against an independent model of vLLM's step timeline.

The model (from vLLM 0.33's EngineCore, see docs/getting-started/vllm.md): every scheduled step S either
samples (it has requests in decode) or not (only non-final prefill chunks). The depth chosen for a sampling
step S is drafted after it and verified in the next sampling step; that step's update_from_output reports one
(drafted, accepted) pair per verified request. Sync scheduling runs update_from_output(S) before scheduling
S+1; async scheduling keeps two steps in flight, so it runs update_from_output(S) after scheduling S+1.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats
from specpolicy.adapters.vllm.ledger import StepLedger
from specpolicy.runtime.controller import StepController
from specpolicy.runtime.decision import StepRecord

step_plan = st.lists(
    st.tuples(
        st.booleans(),  # samples?
        st.integers(0, 4),  # the policy's depth if asked
        st.lists(st.integers(0, 4), min_size=1, max_size=4),  # per-request acceptance wish for this verify
    ),
    min_size=1,
    max_size=30,
)


SKIP = "no decode in this step"


class Recorder:
    """A policy answering scripted depths; records the stats it saw and the step times the trace would."""

    def __init__(self, answers: list[int]) -> None:
        self.answers = answers
        self.seen: list[StepStats] = []
        self.times: list[tuple[int, float]] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        return SpecMode.of(self.answers[len(self.seen) - 1])

    def reset(self) -> None:
        pass

    def on_record(self, record: StepRecord) -> None:
        if record.step_time_s is not None:
            self.times.append((record.step, record.step_time_s))

    def ledger(self, request_ids: bool = True) -> StepLedger:
        """A ledger on the production controller, this recorder as its policy and observer."""
        self.controller = StepController(self, allowed_steps=range(5), default_steps=0, observers=[self])
        return StepLedger(self.controller, request_ids=request_ids)


def run(
    plan: list[tuple[bool, int, list[int]]], mode: str, request_ids: bool = True
) -> tuple[Recorder, list[Any], list[Any]]:
    """Drive a ledger through the plan; return the recorder, each update's verify, and the cycle times."""
    answers = [k for samples, k, _ in plan if samples]
    rec = Recorder(answers)
    times = rec.times
    ledger = rec.ledger(request_ids)
    clock = [0.0]
    prev_k = 0  # the depth drafted after the last sampling step
    reported: list[Any] = []  # per update: (verified depth, accepted list) or None, in update order
    in_flight: list[tuple[int, Any]] = []

    def update(step: int, verify: Any) -> None:
        if verify is not None and verify != SKIP:
            for acc in verify[1]:
                ledger.on_draft(verify[0], acc)
        clock[0] += 1.0
        ledger.on_update(step, clock[0])
        reported.append(verify)

    for s, (samples, _, wish) in enumerate(plan):
        clock[0] += 0.25
        k = ledger.on_schedule(s, len(wish), 0, None, samples, clock[0])
        verify: Any = SKIP
        if samples:
            verify = None
            if prev_k:
                verify = (prev_k, [min(w, prev_k) for w in wish])
            prev_k = k
        in_flight.append((s, verify))
        if mode == "sync" or len(in_flight) == 2:
            update(*in_flight.pop(0))
    while in_flight:
        update(*in_flight.pop(0))
    return rec, reported, times


@given(plan=step_plan, mode=st.sampled_from(["sync", "async"]), request_ids=st.booleans())
def test_each_decision_sees_the_latest_completed_verify_with_its_own_depth(
    plan: Any, mode: str, request_ids: bool
) -> None:
    rec, reported, _ = run(plan, mode, request_ids)
    # Rebuild, from the model alone, what was known at each decision: the last update before it.
    known: list[Any] = []
    latest = None
    updates = iter(reported)
    done = 0
    decisions = 0
    for s, (samples, _, _) in enumerate(plan):
        # updates completed before step s is scheduled: sync -> s, async -> s - 1
        target = s if mode == "sync" else max(s - 1, 0)
        while done < target:
            got = next(updates)
            done += 1
            if got != SKIP:  # a step without decodes verifies nothing and changes nothing
                latest = got
        if samples:
            known.append(latest)
            decisions += 1
    assert len(rec.seen) == decisions
    for stats, verify in zip(rec.seen, known, strict=True):
        if verify is None:
            assert stats.accepted_draft_tokens is None and stats.drafted_tokens is None
        else:
            depth, accepted = verify
            got_acc, got_drafted = stats.accepted_draft_tokens, stats.drafted_tokens
            assert got_acc is not None and got_drafted is not None
            assert stats.last_num_steps == stats.last_decided_steps == depth
            assert list(got_acc) == accepted
            assert list(got_drafted) == [depth] * len(accepted)
            assert all(0 <= a <= d for a, d in zip(got_acc, got_drafted, strict=True))


@given(plan=step_plan, mode=st.sampled_from(["sync", "async"]), request_ids=st.booleans())
def test_step_times_are_positive_and_attributed_to_the_verified_decision(
    plan: Any, mode: str, request_ids: bool
) -> None:
    rec, reported, times = run(plan, mode, request_ids)
    assert all(t > 0 for _, t in times)
    numbers = [d for d, _ in times]
    assert numbers == sorted(set(numbers))  # each decision timed at most once, in order
    assert set(numbers) <= set(range(1, len(rec.seen) + 1))
    # every decision followed by a later sampling step (whose verify completed) gets a time
    sampling = [s for s, (samples, _, _) in enumerate(plan) if samples]
    assert set(numbers) == set(range(1, len(sampling)))


def test_idle_time_before_a_step_is_not_counted() -> None:
    rec = Recorder([2, 2])
    ledger = rec.ledger()
    ledger.on_schedule("a", 1, 0, None, True, now=0.0)
    ledger.on_update("a", now=0.010)
    ledger.on_schedule("b", 1, 0, None, True, now=100.0)  # the engine idled for 100 s
    ledger.on_draft(2, 1)
    ledger.on_update("b", now=100.020)
    assert rec.controller.known[0] == 2
    step_time = rec.controller.known[3]
    assert step_time is not None and abs(step_time - 0.020) < 1e-9


def test_an_output_that_never_comes_back_does_not_shift_the_accounting() -> None:
    rec = Recorder([1, 3, 2])
    ledger = rec.ledger()
    ledger.on_schedule("lost", 1, 0, None, True, 0.0)
    ledger.on_schedule("b", 1, 0, None, True, 1.0)
    ledger.on_draft(1, 1)
    ledger.on_update("b", 2.0)  # "lost" is dropped, "b" verified the drafts of depth 1
    assert rec.controller.known[:3] == (1, [1], [1]) and ledger.in_flight == 0
    ledger.on_update("unknown", 3.0)  # an empty step (nothing scheduled): ignored
    assert rec.controller.known[:3] == (1, [1], [1])


def test_request_ids_reach_the_policy_with_the_batch_and_with_its_verify() -> None:
    rec = Recorder([2, 2, 2])
    ledger = rec.ledger()
    ledger.on_schedule("a", 2, 0, None, True, 0.0, ["r1", "r2"])
    ledger.on_update("a", 0.01)
    ledger.on_schedule("b", 2, 0, None, True, 0.02, ["r1", "r2"])
    ledger.on_draft(2, 1, "r1")
    ledger.on_draft(2, 2, "r2")
    ledger.on_update("b", 0.03)
    ledger.on_schedule("c", 1, 0, None, True, 0.04, ["r2"])
    assert rec.seen[0].request_ids == ["r1", "r2"] and rec.seen[0].last_request_ids is None
    s = rec.seen[2]
    assert s.last_request_ids == ["r1", "r2"] and list(s.accepted_draft_tokens or []) == [1, 2]
    assert s.request_ids == ["r2"]
    ledger.on_draft(2, 1, "r2")
    ledger.on_draft(2, 0)  # a result without an id: none for the step, rather than ids out of line
    ledger.on_update("c", 0.05)
    assert rec.controller.known[1] == [1, 0] and rec.controller.known[8] is None
