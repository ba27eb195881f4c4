"""cost_model's memory is bounded whichever optional StepStats fields an adapter fills.

Every field after ``batch_size`` is optional, and the request ids of the outcome (``last_request_ids``) and
of the coming batch (``request_ids``) are independent: an adapter may send either, both or none. With fresh
ids every step (requests that each run one step), nothing the policy keeps may grow with the steps: the
queued outcomes are counted at every fold, the per-request table is capped and forgets, the runs of step
times are folded in.
"""

from __future__ import annotations

import tracemalloc
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import StepStats, make_policy
from specpolicy.policies.cost_model import CostModelPolicy

#: the optional fields a combination may leave out (None), by StepStats position
OPTIONAL = {
    "mean_seq_len": 2,
    "accepted_draft_tokens": 4,
    "drafted_tokens": 5,
    "last_step_time_s": 6,
    "mean_accepted": 7,
    "last_batch_size": 8,
    "last_decided_steps": 9,
    "last_mean_seq_len": 10,
    "last_request_ids": 11,
    "request_ids": 12,
}


def _drive(policy: CostModelPolicy, steps: int, batch: int, absent: frozenset[str], start: int = 0) -> int:
    """``steps`` closed-loop steps with fresh request ids every step and the fields in ``absent`` None."""
    k, nid = 0, start
    for i in range(steps):
        ids = list(range(nid, nid + batch))
        nid += batch
        acc = [i % (k + 1) for _ in range(batch)] if k else None
        fields: list[Any] = [
            batch,
            0,
            500.0 + i % 7,
            k,
            acc,
            [k] * batch if k else None,
            0.01 * (1.0 + 0.05 * k) * (1.0 + 1e-4 * (i % 11)),
            (sum(acc) / batch) if acc else None,
            batch,
            k,
            500.0,
            ids,
            ids,
        ]
        for name in absent:
            fields[OPTIONAL[name]] = None
        k = policy.decide(StepStats.fast(*fields)).num_steps
    return nid


def _sizes(policy: CostModelPolicy) -> dict[str, int]:
    """The size of every container that could grow with the steps."""
    return {
        "queued outcomes": len(policy.s.rq),
        "requests": len(policy.s.reqs),
        "runs": len(policy.s.pending),
        "acceptance bytes": sum(len(b) for b in policy.s.bufs),
        "profile memo": len(policy.s.costs._memo),
        "population sums": len(policy.s.pop_sums),
    }


#: bounds that hold for any number of steps: a fold at least every update_interval (64) steps of a bucket,
#: 8 sampled outcomes a step, the per-request table's horizon (1,024 steps) and capacity.
BOUNDS = {
    "queued outcomes": 2 * 64,
    "requests": 4096,
    "runs": 2 * 64,
    "acceptance bytes": 2 * 64 * 8,
    "profile memo": 65537,
    "population sums": 64,
}


@settings(max_examples=30)
@given(
    absent=st.frozensets(st.sampled_from(sorted(OPTIONAL))),
    batch=st.sampled_from((1, 16, 64)),
    profile=st.sampled_from((None, "h200-llama8b")),
)
def test_no_container_grows_with_the_steps_for_any_combination_of_fields(
    absent: frozenset[str], batch: int, profile: str | None
) -> None:
    policy = make_policy({"name": "cost_model", "profile": profile})
    assert isinstance(policy, CostModelPolicy)
    _drive(policy, 3000, batch, absent)
    for name, size in _sizes(policy).items():
        assert size <= BOUNDS[name], (name, size, sorted(absent))


def test_outcome_ids_without_batch_ids_are_counted_not_kept() -> None:
    """The case the report found: outcome ids every step, never the batch's (+47 B a step at batch 16)."""
    policy = make_policy("cost_model")
    assert isinstance(policy, CostModelPolicy)
    _drive(policy, 3000, 16, frozenset({"request_ids", "drafted_tokens"}))
    assert len(policy.s.rq) <= BOUNDS["queued outcomes"]
    # they were counted: learned per request, then forgotten once unseen for the table's horizon
    assert policy.s.reqs.forgotten + len(policy.s.reqs) > 100


@pytest.mark.slow
@pytest.mark.parametrize("absent", [frozenset({"request_ids"}), frozenset(), frozenset({"last_request_ids"})])
def test_traced_memory_per_step_is_flat(absent: frozenset[str]) -> None:
    """tracemalloc over 200,000 steps after a 50,000-step warm-up, fresh ids every step: under a byte per
    step in all (the table of requests settles at its horizon)."""
    policy = make_policy("cost_model")
    assert isinstance(policy, CostModelPolicy)
    nid = _drive(policy, 50_000, 16, absent)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        _drive(policy, 200_000, 16, absent, start=nid)
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert (after - before) / 200_000 < 1.0
