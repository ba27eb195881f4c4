"""Per-request hints in real vLLM scheduling code (each tested release), stepped on CPU.

Three requests decode side by side at the policy's depth K: ``a`` without a hint, ``b`` with
``extra_args={"specpolicy": "off"}``, ``c`` with ``"max_depth=1"``. vLLM verifies per request, so ``b`` is
scheduled and verified with no drafts and ``c`` with one while ``a`` verifies K, and vLLM's own bookkeeping
(scheduled tokens, computed tokens, async placeholders) follows what each request was given.
"""

from __future__ import annotations

from typing import Any

import pytest
from _vllm_harness import K_MAX, FakeRunner, block_hasher, build_scheduler, drive

from specpolicy.hints import HINT_KEY

MODES = ["sync", "async"]
HINTS: dict[str, Any] = {"a": None, "b": "off", "c": "max_depth=1"}


def _add(sched: Any, rid: str, hint: Any) -> Any:
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    extra = None if hint is None else {HINT_KEY: hint}
    req = Request(
        request_id=rid,
        prompt_token_ids=[10 + i for i in range(20)],
        sampling_params=SamplingParams(max_tokens=200, ignore_eos=True, extra_args=extra),
        pooling_params=None,
        block_hasher=block_hasher(sched.vllm_config),
    )
    sched.add_request(req)
    return req


def _sched(make_config: Any, mode: str, **settings: Any) -> Any:
    cfg = make_config(
        async_scheduling=mode == "async",
        additional_config={"specpolicy": {"policy": {"name": "scripted"}, "metrics": False, **settings}},
    )
    return build_scheduler(cfg)


@pytest.mark.parametrize("mode", MODES)
def test_opted_out_request_verifies_no_drafts_while_its_neighbours_verify_k(
    make_config: Any, mode: str
) -> None:
    sched = _sched(make_config, mode)
    for rid, hint in HINTS.items():
        _add(sched, rid, hint)
    verified: dict[str, list[int]] = {r: [] for r in HINTS}

    def accept(step: int, rid: str, drafts: int) -> int:
        if step > 0:  # step 0 is the prefill
            verified[rid].append(drafts)
        return drafts  # every draft accepted: the most tokens a step can give

    outs = drive(sched, FakeRunner(sched, accept), steps=8, mode=mode)
    for s in range(1, len(outs)):  # step 0 prefills all three
        so = outs[s]
        assert so.num_spec_tokens_to_schedule == K_MAX  # the batch still speculates at K
        lengths = {r: len(v) for r, v in so.scheduled_spec_decode_tokens.items()}
        assert lengths == {"a": K_MAX, "c": 1}, f"step {s}"
        assert so.num_scheduled_tokens == {"a": 1 + K_MAX, "b": 1, "c": 2}, f"step {s}"
    assert set(verified["b"]) == {0} and set(verified["c"]) == {1} and set(verified["a"]) == {K_MAX}
    # each request got 1 token per step plus what it verified, and vLLM's counts agree with that
    for rid in HINTS:
        req = sched.requests[rid]
        assert req.num_output_tokens == 1 + sum(1 + d for d in verified[rid])
        assert req.num_computed_tokens == req.num_tokens - 1
    bridge = sched._specpolicy
    counts = bridge.runtime.hint_counts()
    assert (counts["requests_off"], counts["requests_capped"], counts["bad"]) == (1, 1, 0)
    assert counts["request_steps_trimmed"] >= 2 * (len(outs) - 2)
    seen = bridge.runtime.policy.seen
    assert seen[-1].hints == (1, 1, 1, 1) and seen[-1].batch_size == 3


@pytest.mark.parametrize("mode", MODES)
def test_a_batch_of_opted_out_requests_drafts_nothing(make_config: Any, mode: str) -> None:
    sched = _sched(make_config, mode)
    _add(sched, "x", "off")
    _add(sched, "y", {"max_depth": 0})
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=5, mode=mode)
    assert [so.num_spec_tokens_to_schedule for so in outs] == [K_MAX] + [0] * 4  # prefill: no hints known
    assert all(not so.scheduled_spec_decode_tokens for so in outs[1:])
    assert sched._specpolicy.runtime.controller.hint_off_steps == 4


def test_bad_hint_is_counted_and_the_request_speculates(make_config: Any) -> None:
    sched = _sched(make_config, "sync")
    _add(sched, "a", "maybe")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=4, mode="sync")
    assert {len(v) for v in outs[-1].scheduled_spec_decode_tokens.values()} == {K_MAX}
    assert sched._specpolicy.runtime.hint_counts()["bad"] == 1


def test_hints_off_in_the_settings(make_config: Any) -> None:
    sched = _sched(make_config, "sync", hints=False)
    _add(sched, "b", "off")
    outs = drive(sched, FakeRunner(sched, lambda s, r, d: d), steps=4, mode="sync")
    assert {len(v) for v in outs[-1].scheduled_spec_decode_tokens.values()} == {K_MAX}
