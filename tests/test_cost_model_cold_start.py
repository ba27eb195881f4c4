"""cost_model on a fresh engine at one request, replayed with the step times measured live.

Live (2026-12-06, v2 worker, triton, H100; results/2026-12-06-sglang-0.5.12.post1-run10/notes.md), a fresh
engine's first speculative steps at one request took 27.5 and 6.0 ms (cold), and each first speculative step
after off steps 7.6-13.9 ms (the lazy draft catch-up and the switch), against 5.0 ms for a steady speculative
step with 2.5 tokens and 2.65 ms for an off step with one: speculation is 1.3x off, and cost_model ran off for
the whole first one-request batch (0.70-0.73x ``static``): each such step entered the estimate as the depth's
cost. Now the first run of two steps or more measured at a depth replaces the single steps before it where
they put the depth more than 1.5x dearer, and while off runs a speculative depth known from single steps only
is probed soon, over ``probe_steps`` steps.
"""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st
from test_cost_model_transitions import ACCEPT, one_request_step

from specpolicy.policies.cost_model import CostModelPolicy
from specpolicy.registry import make_policy
from specpolicy.stats import StepStats

ON_MS, OFF_MS = 5.04, 2.65
#: the first speculative step of the engine's life
COLD_FIRST_MS = 27.5
#: a switch's first step over the steady one: resuming speculation (the catch-up), and going off
RESUME_MS, TO_OFF_MS = 2.5, 0.45
#: what the first switch of each kind costs on top (kernels and graphs met for the first time)
COLD_RESUME_MS, COLD_TO_OFF_MS = 6.3, 6.6


def _rate(
    seed: int,
    steps: int = 600,
    cold: bool = True,
    policy: CostModelPolicy | None = None,
    on_ms: float = ON_MS,
    resume_ms: float = RESUME_MS,
    decisions: list[int] | None = None,
) -> float:
    """Tokens per ms over ``steps`` one-request steps, over always-on's steady rate."""
    if policy is None:
        policy = make_policy({"name": "cost_model", "steps": [3]})
    rng = random.Random(seed)
    stats = StepStats(batch_size=1, mean_seq_len=128.0)
    tokens, total_ms = 0, 0.0
    prev: int | None = None
    switched: set[bool] = set()
    for i in range(steps):
        k = policy.decide(stats).num_steps
        if decisions is not None:
            decisions.append(k)
        ms = on_ms * (1.0 + 0.05 * rng.random()) if k else OFF_MS * (1.0 + 0.01 * rng.random())
        if prev is not None and prev != k:
            ms += resume_ms if k else TO_OFF_MS
            if cold and bool(k) not in switched:
                ms += COLD_RESUME_MS if k else COLD_TO_OFF_MS
                switched.add(bool(k))
        if cold and i == 0 and k:
            ms = COLD_FIRST_MS
        prev = k
        n, stats = one_request_step(rng, k, i, ms)
        tokens += n
        total_ms += ms
    steady_on = (1.0 + ACCEPT + ACCEPT**2 + ACCEPT**3) / on_ms
    return tokens / total_ms / steady_on


def test_a_cold_start_does_not_lock_speculation_out() -> None:
    """Over one 600-step batch (1.6 s) speculation is found and kept on every seed: the cold steps and the
    switches' first steps are not the depth's cost."""
    rates = [_rate(seed) for seed in range(20)]
    assert sum(rates) / len(rates) > 0.9
    assert min(rates) > 0.85


def test_without_the_cold_steps_no_seed_is_locked_out() -> None:
    rates = [_rate(seed, cold=False) for seed in range(20)]
    assert sum(rates) / len(rates) > 0.9
    assert min(rates) > 0.85


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 10**6),
    on_ms=st.floats(3.0, 12.0),
    resume_ms=st.floats(0.0, 15.0),
)
def test_a_resumes_cost_never_becomes_the_depths_cost(seed: int, on_ms: float, resume_ms: float) -> None:
    """Invariant: neither the engine's cold first steps nor the first speculative step after off steps,
    however much it costs, stay in the depth's estimate once it has run three steps in a row: the estimate
    is within the steady steps' range (5% jitter), not above."""
    policy = make_policy({"name": "cost_model", "steps": [3]})
    assert isinstance(policy, CostModelPolicy)
    decisions: list[int] = []
    _rate(seed, steps=400, policy=policy, on_ms=on_ms, resume_ms=resume_ms, decisions=decisions)
    ran = "".join("S" if k else "." for k in decisions)
    if "SSS" in ran[1:]:  # a run after the first step: the depth was measured over two steady steps
        costs = policy.s.costs
        times, _ = costs.predict(costs.grid.index[1], 528.0, policy.s.cur, True)
        assert times[policy._arms.index(3)] <= on_ms * 1.05e-3 * 1.0001, ran[:120]
