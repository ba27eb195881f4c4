"""What cost_model's probes cost while off runs at a large batch, replayed from a live trace.

Live (SGLang 0.5.12.post1, v1 worker, H100, draft model at depth 3, batches of 16, 64 and 128 fresh
requests x 200 tokens in rotation), cost_model ran off at 128 requests, as it should, but re-measured
speculation with a three-step probe every few hundred steps there: a speculative step took 3.2x an off
step, the first after off 5.3x (the drafter's catch-up), so one probe lost about four off steps' worth of
tokens where the schedule had priced it as one step of its value loss (under one).
``tests/fixtures/cost_model_probe_price.json`` holds the measured times per batch size and the acceptance
(its ``source`` says how they were taken from the trace).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from specpolicy import StepStats, make_policy
from specpolicy.policies.cost_model import CostModelConfig
from specpolicy.policies.cost_model.probes import AUDIT_STEPS

FIXTURE = Path(__file__).parent / "fixtures" / "cost_model_probe_price.json"
TOKENS = 200
#: rotations measured, after the one where 128 requests first speculated (the bucket's exploration and
#: its confirmation: priced apart from re-measuring, once per bucket)
ROTATIONS = 30


def _accepted(rng: random.Random, rates: list[float], k: int, batch: int) -> list[int]:
    out = []
    for _ in range(batch):
        a = 0
        while a < k and rng.random() < rates[a]:
            a += 1
        out.append(a)
    return out


def replay(seed: int) -> dict[int, tuple[float, int]]:
    """Per batch size: (throughput lost against always-off on the same steps, steps measured)."""
    fx = json.loads(FIXTURE.read_text())
    rates = fx["accept"]
    policy = make_policy({"name": "cost_model", "steps": [3]})
    rng = random.Random(seed)
    sums = {int(b): [0, 0.0, 0.0, 0] for b in fx["sizes"]}  # tokens, ms, always-off's ms, steps
    next_id, n, explored = 0, 0, -1
    while explored < 0 or n <= explored + ROTATIONS:
        for size, t in fx["sizes"].items():
            batch = int(size)
            ids = list(range(next_id, next_id + batch))
            next_id += batch
            # the first step after a prefill: no time
            stats = StepStats(batch_size=batch, mean_seq_len=128.0, request_ids=ids)
            prev, made, i = -1, 0, 0
            acc: list[int] | None
            while made < TOKENS * batch:
                k = policy.decide(stats).num_steps
                base = t["off_ms"] * (1.0 + 0.05 * rng.random())
                if k:
                    ms = base * (t["first_spec_over_off"] if prev == 0 else t["spec_over_off"])
                    acc = _accepted(rng, rates, k, batch)
                else:
                    ms = base * (t["first_off_over_off"] if prev > 0 else 1.0)
                    acc = None
                tokens = batch + (sum(acc) if acc else 0)
                made += tokens
                prev = k
                if k and batch == 128 and explored < 0:
                    explored = n
                if explored >= 0 and n > explored:
                    s = sums[batch]
                    s[0] += tokens
                    s[1] += ms
                    s[2] += base  # always-off's step here: batch tokens
                    s[3] += 1
                stats = StepStats(
                    batch_size=batch,
                    mean_seq_len=129.0 + i,
                    last_num_steps=k,
                    accepted_draft_tokens=acc,
                    last_step_time_s=ms * 1e-3,
                    last_batch_size=batch,
                    last_decided_steps=k,
                    last_mean_seq_len=128.0 + i,
                    last_request_ids=ids,
                    request_ids=ids,
                )
                i += 1
        n += 1
    return {b: (1.0 - s[0] / s[1] / (b * s[3] / s[2]), int(s[3])) for b, s in sums.items()}


def budget(size: int, steps: int) -> float:
    """What re-measuring may cost at ``size`` over ``steps`` steps by the policy's own schedule:
    ``probe_budget`` of the throughput, give or take one probe (``probe_steps`` steps, the first of them
    after off, and the step back to off), plus one audit (such a probe) per ``AUDIT_STEPS`` steps, in off
    steps over the steps measured."""
    fx = json.loads(FIXTURE.read_text())
    t, (a1, a2, a3) = fx["sizes"][str(size)], fx["accept"]
    c = CostModelConfig()
    tokens_3 = 1.0 + a1 + a1 * a2 + a1 * a2 * a3
    one = (
        t["first_spec_over_off"]
        + (c.probe_steps - 1) * t["spec_over_off"]
        + t["first_off_over_off"]
        - 1.0
        - c.probe_steps * tokens_3
    )
    return c.probe_budget + one * (1 + steps // AUDIT_STEPS) / steps


def test_probes_while_off_at_64_and_128_requests_keep_to_the_budget() -> None:
    """Off is right at 64 and 128 requests (speculation gives 0.90x and 0.78x its tokens/s): the probes of
    speculation must cost what the schedule budgets, not several times that (before: 1.1% at 128 on most
    seeds, against 0.27%). Nor may the probes while off hope for an acceptance the data never showed: a
    running maximum of the estimate latched at 0.94 (seeds 7 and 9) or 0.84 (seeds 1 and 3) from the first
    step's eight sampled requests (measured: 0.70), so speculation looked able to pay and was probed every
    ~130 steps (3% at 64 and 128 requests on seeds 7 and 9, 1.5% at 64 on seeds 1 and 3)."""
    for seed in range(10):
        out = replay(seed)
        for size in (64, 128):
            lost, steps = out[size]
            assert 0.0 <= lost < budget(size, steps), (seed, size, lost, budget(size, steps))
