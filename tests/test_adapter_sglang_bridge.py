"""SpecPolicyParams (the policy in SGLang's AdaptiveController, 0.5.13+) without SGLang: feedback is
matched to the round that produced it.

With overlap scheduling SGLang decides round N+1 before round N's acceptance reaches the CPU, so decisions and
feedback interleave arbitrarily (feedback never outruns decisions). Whatever the interleaving, the policy must
see, as ``last_num_steps``, the depth of the round whose feedback arrived last, and acceptance only when that
round speculated.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats
from specpolicy.adapters.sglang import adaptive
from specpolicy.adapters.sglang.adaptive import SpecPolicyParams
from specpolicy.runtime.runtime import AdapterRuntime
from specpolicy.runtime.settings import AdapterSettings

DEPTHS = (0, 1, 3)


class _Recorder:
    def __init__(self, script: list[int]) -> None:
        self.script = script
        self.i = 0
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        k = self.script[self.i % len(self.script)]
        self.i += 1
        return SpecMode.of(k)

    def reset(self) -> None:
        pass


def _bridge(script: list[int], wants_ids: bool = True) -> tuple[SpecPolicyParams, _Recorder]:
    """The bridge on the production runtime; ``wants_ids=False``: as for a policy that reads no ids."""
    rec = _Recorder(script)
    rt = AdapterRuntime(
        AdapterSettings.build({"name": "alternate", "depths": list(DEPTHS)}, metrics=False),
        engine="sglang",
        engine_version="test",
        path="test",
        allowed_steps=DEPTHS,
        default_steps=3,
        policy=rec,
    )
    rt.wants_request_ids = wants_ids
    return SpecPolicyParams(rt, 3), rec


@given(
    st.lists(st.sampled_from(DEPTHS), min_size=1, max_size=8),
    st.lists(st.booleans(), min_size=1, max_size=60),
    st.booleans(),
)
def test_feedback_is_attributed_to_its_own_round(script: list[int], events: list[bool], ids: bool) -> None:
    """Depth, acceptance and step time all describe the round whose feedback arrived last; its time is the
    interval between its feedback and the previous round's (simulated clock, a distinct tick per event)."""
    params, rec = _bridge(script, ids)
    applied: list[int] = []  # depth of each decided round, in order
    fed_at: list[float] = []  # when each round's feedback arrived
    expected_last: int | None = None  # depth of the newest round with feedback
    clock = [10.0]
    saved = adaptive._clock
    adaptive._clock = lambda: clock[0]
    try:
        for i, is_decision in enumerate(events):
            clock[0] += 0.001 * (1 + i % 7) + 0.0001 * i
            # SGLang has at most a couple of rounds in flight; the bridge remembers 8 (older ones are dropped)
            outstanding = len(applied) - len(fed_at)
            if (is_decision and outstanding < 4) or outstanding == 0:
                k = params.get_steps_for_batch(4)
                seen = rec.seen[-1]
                if expected_last is None:
                    assert seen.last_num_steps == 0 and seen.accepted_draft_tokens is None
                else:
                    assert seen.last_num_steps == expected_last
                    assert (seen.accepted_draft_tokens is None) == (expected_last == 0)
                    if expected_last:
                        assert list(seen.accepted_draft_tokens or []) == [expected_last - 1] * 4
                if len(fed_at) < 2:  # the first round's interval has no start
                    assert seen.last_step_time_s is None
                else:
                    assert seen.last_step_time_s == pytest.approx(fed_at[-1] - fed_at[-2], abs=1e-12)
                applied.append(k)
            else:
                depth = applied[len(fed_at)]
                # SGLang reports accepted drafts per request; a steps=0 round reports zeros
                params.on_verify_complete([max(depth - 1, 0)] * 4, 4)
                fed_at.append(clock[0])
                expected_last = depth
    finally:
        adaptive._clock = saved
    assert params.candidate_steps == list(DEPTHS)


def test_candidate_steps_include_the_launch_depth() -> None:
    rt = AdapterRuntime(
        AdapterSettings.build({"name": "static", "num_steps": 0}, metrics=False),
        engine="sglang",
        engine_version="test",
        path="test",
        allowed_steps=(0, 3),
        default_steps=3,
    )
    p = SpecPolicyParams(rt, 3)
    assert p.candidate_steps == [0, 3]  # SGLang activates the launch state at start-up
    assert p.cuda_graph_bs_for_step(0) is None
    p.set_cuda_graph_bs([8, 1, 4])
    assert p.cuda_graph_bs_for_step(0) == [1, 4, 8] and p.cuda_graph_bs_for_step(3) == [1, 4, 8]
    assert p.on_verify_complete([1, 2], 2) is None  # the depth is never switched from the feedback hook


def test_a_lost_feedback_does_not_shift_later_attributions() -> None:
    params, rec = _bridge([3, 1, 0, 3])
    assert [params.get_steps_for_batch(bs) for bs in (4, 8, 2)] == [3, 1, 0]
    params.on_verify_complete([0] * 8, 8)  # round 1 (bs 4) never reported back; this is round 2's
    params.get_steps_for_batch(2)
    assert (rec.seen[-1].last_num_steps, list(rec.seen[-1].accepted_draft_tokens or [])) == (1, [0] * 8)
    assert rec.seen[-1].last_step_time_s is None  # nothing timed before it
    params.on_verify_complete([0, 0], 2)  # round 3, right after round 2
    params.get_steps_for_batch(4)
    assert rec.seen[-1].last_num_steps == 0 and rec.seen[-1].last_step_time_s is not None
    params.on_verify_complete([0, 0, 0, 0], 4)  # round 5 (bs 4): round 4 (bs 2) never came back
    params.get_steps_for_batch(2)
    # the interval since round 3's feedback spans two rounds: no time rather than a wrong one
    assert (rec.seen[-1].last_num_steps, rec.seen[-1].last_step_time_s) == (3, None)
    params.on_verify_complete([0] * 5, 5)  # matches no recorded round: no information, not a wrong depth
    params.get_steps_for_batch(2)
    assert (rec.seen[-1].last_num_steps, rec.seen[-1].accepted_draft_tokens) == (0, None)


class _Req:
    def __init__(self, rid: str, seqlen: int = 100) -> None:
        self.rid = rid
        self.seqlen = seqlen


class _Batch:
    def __init__(self, rids: list[str]) -> None:
        self.reqs = [_Req(r) for r in rids]
        self.forward_mode = type("Mode", (), {"is_decode": staticmethod(lambda: True)})()


class _Scheduler:
    waiting_queue: list[object] = []


def test_request_ids_ride_with_the_batch_and_with_its_feedback() -> None:
    params, rec = _bridge([3])
    params.note_batch(_Scheduler(), _Batch(["a", "b"]))
    params.get_steps_for_batch(2)
    assert rec.seen[-1].request_ids == ["a", "b"]
    params.note_batch(_Scheduler(), _Batch(["b", "c", "d"]))
    params.get_steps_for_batch(3)  # overlap: decided before round 1 reports
    params.on_verify_complete([1, 3], 2)  # round 1's counts, in its batch order
    params.note_batch(_Scheduler(), _Batch(["b", "c", "d"]))
    params.get_steps_for_batch(3)
    s = rec.seen[-1]
    assert s.last_request_ids == ["a", "b"] and list(s.accepted_draft_tokens or []) == [1, 3]
    assert s.request_ids == ["b", "c", "d"]
    params.get_steps_for_batch(5)  # no batch noted for this size: no ids rather than another batch's
    assert rec.seen[-1].request_ids is None


@pytest.mark.parametrize(("policy", "collected"), [("static", False), ("cost_model", True)])
def test_request_ids_are_collected_only_for_a_policy_that_reads_them(policy: str, collected: bool) -> None:
    rt = AdapterRuntime(
        AdapterSettings.build(policy, metrics=False),
        engine="sglang",
        engine_version="test",
        path="test",
        allowed_steps=range(8),
        default_steps=3,
    )
    params = SpecPolicyParams(rt, 3)
    params.note_batch(_Scheduler(), _Batch(["a", "b"]))
    assert rt.wants_request_ids is collected
    assert params.request_ids == (["a", "b"] if collected else None)
