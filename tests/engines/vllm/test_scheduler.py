"""The specpolicy scheduler inside real vLLM scheduling code (each tested release), stepped on CPU.

Timeline (docs/getting-started/vllm.md): the depth chosen when step S is scheduled is drafted after step S and
verified in step S+1; the verify counts reach the scheduler in update_from_output(S+1). With sync scheduling
that is before step S+2 is scheduled, so decision S+2 is the first to see them; with async scheduling two
batches are in flight and decision S+3 is the first. The expected values below follow from that timeline and
from what the fake runner accepted, not from the adapter's code.
"""

from __future__ import annotations

from typing import Any

import pytest
from _vllm_harness import K_MAX, RELEASE, FakeRunner, add_request, build_scheduler, drive, use_model_runner

from specpolicy.adapters.vllm import PolicyAsyncScheduler, PolicyScheduler

MODES = ["sync", "async"]
LAG = {"sync": 2, "async": 3}  # decisions between a depth and the first decision that sees its acceptance


def policy_of(sched: Any) -> Any:
    return sched._specpolicy.runtime.policy


def scripted(make_config: Any, mode: str, **policy: Any) -> Any:
    cfg = make_config(
        async_scheduling=mode == "async",
        additional_config={"specpolicy": {"policy": {"name": "scripted", **policy}, "metrics": False}},
    )
    return build_scheduler(cfg)


def test_scheduler_cls_picks_the_base_vllm_would_have_chosen(make_config: Any) -> None:
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler
    from vllm.v1.core.sched.scheduler import Scheduler as VllmScheduler

    sync = build_scheduler(make_config(async_scheduling=False))
    asyn = build_scheduler(make_config(async_scheduling=True))
    assert type(sync) is PolicyScheduler and isinstance(sync, VllmScheduler)
    assert not isinstance(sync, AsyncScheduler)
    assert type(asyn) is PolicyAsyncScheduler and isinstance(asyn, AsyncScheduler)


@pytest.mark.parametrize("runner", ["MRV1", "MRV2"])
@pytest.mark.parametrize("mode", MODES)
def test_policy_depths_become_the_next_steps_scheduled_draft_tokens(
    make_config: Any, monkeypatch: pytest.MonkeyPatch, mode: str, runner: str
) -> None:
    use_model_runner(monkeypatch, runner)
    depths = [3, 0, 2, 0, 1, 3, 1, 2]
    # 0.26's V2 runner drafts K_max every step by itself; its EAGLE-3 drafter here follows the depth through
    # the adapter's hook (test_drafter_depth), so sync scheduling is accepted there too
    sched = scripted(make_config, mode, depths=depths)
    for i in range(2):
        add_request(sched, f"r{i}")
    if RELEASE.v1_runner:  # a release without the V1 runner has no flag for it
        assert sched.use_v2_model_runner == (runner == "MRV2")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=len(depths) + 1, mode=mode)
    # step 0 is the prefill of both requests; every later step decodes both
    applied = [so.num_spec_tokens_to_schedule for so in outs[:-1]]
    assert applied == depths
    for s in range(1, len(outs)):
        lengths = {len(v) for v in outs[s].scheduled_spec_decode_tokens.values()}
        expected = depths[s - 1]
        assert lengths == ({expected} if expected else set()), f"step {s}"
        assert set(outs[s].num_scheduled_tokens.values()) == {1 + expected}


@pytest.mark.parametrize("mode", MODES)
def test_acceptance_reaches_the_policy_for_the_depth_it_describes(make_config: Any, mode: str) -> None:
    depths = [3, 2, 3, 0, 1, 3, 3, 2, 1, 3]
    sched = scripted(make_config, mode, depths=depths)
    add_request(sched, "a")
    add_request(sched, "b")
    # request a accepts everything, b accepts one draft fewer than it got (at least 0)
    accept = {"a": lambda d: d, "b": lambda d: max(d - 1, 0)}
    drive(sched, FakeRunner(sched, lambda s, r, d: accept[r](d)), steps=len(depths) + 1, mode=mode)
    seen = policy_of(sched).seen[: len(depths)]
    assert len(seen) == len(depths)
    lag = LAG[mode]
    for j, st in enumerate(seen):
        assert st.batch_size == (0 if j == 0 else 2), j
        src = j - lag
        if src < 0:
            assert st.accepted_draft_tokens is None, j
            continue
        d = depths[src]
        assert st.last_num_steps == d, j
        if d == 0:
            assert st.accepted_draft_tokens is None and st.drafted_tokens is None, j
        else:
            assert list(st.accepted_draft_tokens) == [d, max(d - 1, 0)], j
            assert list(st.drafted_tokens) == [d, d], j
        assert st.last_step_time_s is not None and st.last_step_time_s >= 0


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("read_ids", [False, True])
def test_request_ids_reach_only_a_policy_that_reads_them(make_config: Any, mode: str, read_ids: bool) -> None:
    depths = [3] * 6
    sched = scripted(make_config, mode, depths=depths, read_ids=read_ids)
    add_request(sched, "a")
    add_request(sched, "b")
    drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=len(depths) + 1, mode=mode)
    seen = policy_of(sched).seen[: len(depths)]
    assert len(seen) == len(depths)
    lag = LAG[mode]
    for j, st in enumerate(seen):
        if not read_ids:
            assert st.request_ids is None and st.last_request_ids is None, j
            continue
        assert sorted(st.request_ids or []) == ([] if j == 0 else ["a", "b"]), j
        if j < lag:
            assert st.last_request_ids is None, j
        else:  # one id per verified request, in the order of its counts
            assert sorted(st.last_request_ids or []) == ["a", "b"], j
            assert len(st.last_request_ids or []) == len(st.accepted_draft_tokens or []), j


@pytest.mark.parametrize("mode", MODES)
def test_batch_size_counts_decodes_not_prefill_chunks_joining(make_config: Any, mode: str) -> None:
    cfg = make_config(
        async_scheduling=mode == "async",
        max_num_batched_tokens=64,
        additional_config={"specpolicy": {"policy": {"name": "scripted", "depths": [2]}, "metrics": False}},
    )
    sched = build_scheduler(cfg)
    add_request(sched, "a")
    add_request(sched, "b")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=3, mode=mode)
    assert len(outs[-1].num_scheduled_tokens) == 2
    add_request(sched, "long", prompt_len=200)  # prefilled in 64-token chunks over several steps
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=3, mode=mode)
    chunked = [so for so in outs if "long" in so.num_scheduled_tokens and so.num_scheduled_tokens["long"] > 3]
    assert chunked, "the long prompt must be chunked into the decode steps"
    seen = policy_of(sched).seen
    assert all(len(so.num_scheduled_tokens) == 3 for so in chunked)
    assert [st.batch_size for st in seen[-3:]] == [2, 2, 2]
    assert all(st.mean_seq_len is not None and st.mean_seq_len > 20 for st in seen[-3:])


@pytest.mark.parametrize("mode", MODES)
def test_waiting_queue_reaches_the_policy(make_config: Any, mode: str) -> None:
    cfg = make_config(
        async_scheduling=mode == "async",
        max_num_seqs=2,
        additional_config={"specpolicy": {"policy": {"name": "scripted"}, "metrics": False}},
        spec={"num_speculative_tokens_per_batch_size": [[1, 1, 3], [2, 2, 0]]},
    )
    sched = build_scheduler(cfg)
    for i in range(5):
        add_request(sched, f"r{i}")
    drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=3, mode=mode)
    seen = policy_of(sched).seen
    assert [st.num_waiting for st in seen] == [3, 3, 3]


@pytest.mark.parametrize("mode", MODES)
def test_drafted_tokens_carry_vllms_trimming_near_max_model_len(make_config: Any, mode: str) -> None:
    cfg = make_config(
        async_scheduling=mode == "async",
        max_model_len=46,
        additional_config={"specpolicy": {"policy": {"name": "scripted", "depths": [3]}, "metrics": False}},
    )
    sched = build_scheduler(cfg)
    add_request(sched, "a", prompt_len=30, max_tokens=40)  # hits max_model_len after 4 decode steps
    add_request(sched, "b", prompt_len=5, max_tokens=40)  # keeps the engine stepping afterwards
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=9, mode=mode)
    scheduled = [len(so.scheduled_spec_decode_tokens.get("a", ())) for so in outs]
    assert any(0 < n < 3 for n in scheduled), f"vLLM did not trim near max_model_len: {scheduled}"
    trimmed = next(n for n in scheduled if 0 < n < 3)
    drafted = [list(st.drafted_tokens) for st in policy_of(sched).seen if st.drafted_tokens]
    # the policy saw the trimmed count for a (first entry: a is scheduled first) next to b's full depth
    assert [trimmed, 3] in drafted
    assert all(set(d) <= {3, trimmed} for d in drafted)


@pytest.mark.parametrize("mode", MODES)
def test_failing_policy_falls_back_and_the_step_loop_continues(make_config: Any, mode: str) -> None:
    depths = [1, 1, 0, 2, 0, 2, 1, 0]
    sched = scripted(make_config, mode, depths=depths, fail_at=[2, 5])
    add_request(sched, "a")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=len(depths) + 1, mode=mode)
    applied = [so.num_spec_tokens_to_schedule for so in outs[: len(depths)]]
    expected = [K_MAX if i in (2, 5) else k for i, k in enumerate(depths)]
    assert applied == expected
    # the fallback depth was really drafted and verified in the following step
    assert len(outs[3].scheduled_spec_decode_tokens["a"]) == K_MAX
    controller = sched._specpolicy.runtime.controller
    assert controller.errors == 2
    assert sched.requests["a"].num_output_tokens > len(depths)


def test_depth_outside_the_configured_maximum_falls_back(make_config: Any) -> None:
    sched = scripted(make_config, "sync", depths=[1, 2], candidates=[1, 2])
    policy = policy_of(sched)
    original = policy.decide
    calls = iter([5, 2])
    policy.decide = lambda st: (original(st), __import__("specpolicy").SpecMode.of(next(calls)))[1]
    add_request(sched, "a")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=2, mode="sync")
    assert [so.num_spec_tokens_to_schedule for so in outs] == [K_MAX, 2]
    assert sched._specpolicy.runtime.controller.errors == 1


def test_adapter_error_is_contained(make_config: Any) -> None:
    sched = scripted(make_config, "sync", depths=[1])
    add_request(sched, "a")

    class Broken:  # any adapter bug
        def on_schedule(self, *a: Any) -> int:
            raise KeyError("broken")

        def on_update(self, *a: Any) -> None:
            raise KeyError("broken")

        def on_draft(self, *a: Any) -> None:
            pass

    sched._specpolicy.ledger = Broken()
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=3, mode="sync")
    assert [so.num_spec_tokens_to_schedule for so in outs] == [K_MAX] * 3
    assert sched._specpolicy.errors == 6  # three schedules, three updates
    assert sched.requests["a"].num_output_tokens >= 2
