"""Each adapter pairs the engine's feedback with the decision it belongs to by the number that decision
came back with (``Decision.step``), never by a counter read after deciding.

The runtime's decisions are renumbered on the way out (``OFFSET`` added) and the numbers taken back on the
way in: an adapter that reports an outcome under any other number (the controller's counter, one of its
own) names a decision that does not exist, so the controller ignores the outcome and the policy never sees
it. Each test also checks that the policy's next StepStats describe the decision whose feedback came last:
its depth, its batch and its acceptance.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats
from specpolicy.adapters.sglang.adaptive import SpecPolicyParams
from specpolicy.adapters.sglang.legacy.runtime import StepRuntime, make_runtime
from specpolicy.adapters.vllm.ledger import StepLedger
from specpolicy.runtime.decision import Decision, StepRecord
from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings

OFFSET = 1000
DEPTHS = (0, 1, 3)


class Scripted:
    """Returns the scripted depths in turn and keeps every StepStats it was shown."""

    def __init__(self, script: list[int]) -> None:
        self.script = script
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        return SpecMode.of(self.script[(len(self.seen) - 1) % len(self.script)])

    def reset(self) -> None:
        pass


class Records:
    def __init__(self) -> None:
        self.records: list[StepRecord] = []

    def on_record(self, record: StepRecord) -> None:
        self.records.append(record)


def renumber(rt: AdapterRuntime) -> list[int]:
    """Number ``rt``'s decisions from ``OFFSET + 1`` for the adapter; the numbers it reports come back
    here (the list returned)."""
    decide, force, outcome = rt.decide, rt.force, rt.outcome
    reported: list[int] = []

    def renumbered_decide(stats: StepStats) -> Decision:
        step, k = decide(stats)
        return (step + OFFSET, k)

    def renumbered_force(stats: StepStats, num_steps: int) -> Decision:
        step, k = force(stats, num_steps)
        return (step + OFFSET, k)

    def renumbered_outcome(step: int, *rest: Any) -> None:
        reported.append(step)
        outcome(step - OFFSET, *rest)

    rt.decide, rt.force, rt.outcome = renumbered_decide, renumbered_force, renumbered_outcome  # type: ignore[method-assign]
    return reported


def _runtime(policy: Scripted, records: Records, allowed: tuple[int, ...] = DEPTHS) -> AdapterRuntime:
    return AdapterRuntime(
        AdapterSettings.build("static", metrics=False),
        engine="test",
        engine_version="test",
        path="test",
        allowed_steps=allowed,
        default_steps=allowed[-1],
        policy=policy,
        observers=[records],
    )


scripts = st.lists(st.sampled_from(DEPTHS), min_size=2, max_size=12)


@given(scripts, st.booleans())
def test_sglang_adaptive_reports_each_feedback_under_its_decision(script: list[int], late: bool) -> None:
    """``late``: as with overlap scheduling, round i's feedback arrives after round i+1 was decided."""
    policy, records = Scripted(script), Records()
    rt = _runtime(policy, records)
    reported = renumber(rt)
    bridge = SpecPolicyParams(rt, 3)
    n = len(script)
    depths = []
    for i in range(n):
        depths.append(bridge.get_steps_for_batch(i + 1))  # a batch size of its own per round
        j = i - 1 if late else i
        if j >= 0:
            bridge.on_verify_complete([min(depths[j], 1)] * (j + 1), j + 1)
    assert depths == script
    fed = range(n - 1) if late else range(n)
    assert reported == [OFFSET + 1 + j for j in fed]
    for i in range(1, n):
        j = i - 2 if late else i - 1  # the round whose feedback came last before decision i
        stats = policy.seen[i]
        if j < 0:
            assert stats.last_num_steps == 0 and stats.last_batch_size is None
            continue
        assert stats.last_num_steps == script[j] and stats.last_batch_size == j + 1
        assert stats.accepted_draft_tokens == ([1] * (j + 1) if script[j] else None)


@given(scripts)
def test_vllm_ledger_reports_each_verify_under_the_decision_it_verified(script: list[int]) -> None:
    """Synchronous scheduling: step i's output verifies the drafts decided when step i-1 was scheduled."""
    policy, records = Scripted(script), Records()
    rt = _runtime(policy, records)
    reported = renumber(rt)
    ledger = StepLedger(rt, request_ids=False)
    n = len(script)
    for i in range(n):
        ledger.on_schedule(i, i + 1, 0, None, True, now=float(i))
        if i:
            for _ in range(i):  # the batch of decision i-1 was i requests
                ledger.on_draft(script[i - 1], min(script[i - 1], 1))
        ledger.on_update(i, now=i + 0.5)
    drafted = [j for j in range(n - 1) if script[j]]
    assert reported == [OFFSET + 1 + j for j in range(n - 1)]
    for i in range(2, n):
        stats, j = policy.seen[i], i - 2
        assert stats.last_num_steps == script[j] and stats.last_batch_size == j + 1
        assert stats.accepted_draft_tokens == ([min(script[j], 1)] * (j + 1) if j in drafted else None)
    rt.close()
    assert [r.step_time_s is not None for r in records.records] == [True] * (n - 1) + [False]


@pytest.mark.parametrize("path", ["v1", "v2"])
@given(script=st.lists(st.sampled_from((0, 3)), min_size=3, max_size=12))
def test_sglang_legacy_reports_acceptance_and_time_under_the_decision_that_ran(
    path: Any, script: list[int]
) -> None:
    """v1: a step's acceptance comes right after it, its (host clock) time at the next step's start, so
    decision i sees step i-1. v2: the acceptance comes one step late, under the number the result carries
    (``current_step`` at its launch), so decision i sees step i-2."""
    policy, records = Scripted(script), Records()
    clock = iter(float(t) for t in range(0, 1000, 10))
    settings = AdapterSettings.build("static", metrics=False)
    built = make_runtime(settings, launch_depth=3, path=path, policy=policy, observers=[records])
    reported = renumber(built.runtime)
    rt = StepRuntime(built.runtime, launch_depth=3, path=path, clock=lambda: next(clock))
    carried: list[int] = []
    n = len(script)
    for i in range(n):
        skip = rt.begin_decode(2, 200)
        assert skip == (script[i] == 0)
        carried.append(rt.current_step)
        rt.end_decode()
        if path == "v1":
            rt.on_result(carried[i], None if skip else [1, 2])
        elif i:
            rt.on_result(carried[i - 1], None if script[i - 1] == 0 else [1, 2])
    assert carried == [OFFSET + 1 + i for i in range(n)]
    lag = 1 if path == "v1" else 2
    assert reported == [OFFSET + 1 + i for i in range(n - 1)]  # the last one waits for its other half
    for i in range(lag, n):  # decision i sees step i-lag: its depth, acceptance and 10 s of host clock
        stats, j = policy.seen[i], i - lag
        assert stats.last_num_steps == script[j]
        assert stats.accepted_draft_tokens == (None if script[j] == 0 else [1, 2])
        assert stats.last_step_time_s == 10.0
