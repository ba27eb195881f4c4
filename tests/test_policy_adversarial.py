"""Malformed inputs never freeze a policy: after any adversarial prefix every policy still follows the data.

The value pools and the closed loop come from benchmarks/bench_adversarial.py (the corpus the published
figures are measured with); here hypothesis explores prefixes and a small seeded corpus runs in full.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from _benchmarks import load
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats, make_policy, parse_config

bench = load("bench_adversarial")

#: Policy configs that may choose off: the ones the liveness property is about.
_CONFIGS = bench.corpus_configs()
_CAN_OFF = [(label, spec) for label, spec in _CONFIGS if 0 in parse_config(spec).candidate_steps()]


def _field(good: st.SearchStrategy[Any], bad: tuple[Any, ...]) -> st.SearchStrategy[Any]:
    return good | st.sampled_from(bad)


_adversarial = st.builds(
    StepStats.fast,
    _field(st.sampled_from((1, 64, 256)), bench.BAD_COUNTS),
    _field(st.integers(0, 8), bench.BAD_COUNTS),
    _field(st.none() | st.floats(1, 1e5), bench.BAD_FLOATS),
    _field(st.integers(0, 7), bench.BAD_COUNTS),
    _field(st.none() | st.lists(st.integers(0, 7), min_size=1, max_size=8), bench.BAD_LISTS),
    st.none() | st.sampled_from(bench.BAD_LISTS),
    _field(st.none() | st.floats(1e-3, 1.0), bench.BAD_FLOATS),
    st.none() | st.sampled_from(bench.BAD_FLOATS),
)


def _run_until_off(policy: Any, allowed: frozenset[int], start_k: int) -> int:
    """Steps of the unfavourable closed loop until the policy chooses off (-1: not within the bound)."""
    k = start_k
    for i in range(bench.LIVENESS_BOUND):
        mode = policy.decide(bench.closed_loop_stats(k, i, favourable=False))
        assert type(mode) is SpecMode and mode.num_steps in allowed
        k = mode.num_steps
        if k == 0:
            return i + 1
    return -1


@pytest.mark.parametrize(("label", "spec"), _CAN_OFF, ids=[c[0] for c in _CAN_OFF])
@given(prefix=st.lists(_adversarial, min_size=1, max_size=12), warm=st.sampled_from((0, 40, 300)))
def test_after_any_adversarial_prefix_off_is_reached_when_it_is_clearly_better(
    label: str, spec: Any, prefix: list[StepStats], warm: int
) -> None:
    policy = make_policy(spec)
    allowed = frozenset(parse_config(spec).candidate_steps())
    k = 0
    for i in range(warm):  # speculation is worth it first, so the policy is on when the bad input arrives
        k = policy.decide(bench.closed_loop_stats(k, i, favourable=True)).num_steps
    for stats in prefix:
        mode = policy.decide(stats)
        assert type(mode) is SpecMode and mode.num_steps in allowed
    assert _run_until_off(policy, allowed, k) > 0


@pytest.mark.parametrize(
    "bad",
    [{"last_num_steps": 3.0}, {"last_num_steps": np.float64(3)}, {"mean_seq_len": math.inf},
     {"mean_seq_len": "long"}, {"mean_seq_len": 10**400}, {"batch_size": 10**400, "accepted": None}],
    ids=["float-k", "np.float64-k", "inf-len", "str-len", "huge-len", "huge-batch"],
)
@pytest.mark.parametrize("profile", [None, "h200-llama8b"])
def test_one_malformed_step_does_not_freeze_cost_model(bad: dict[str, Any], profile: str | None) -> None:
    policy = make_policy({"name": "cost_model", "profile": profile})
    k = 0
    for i in range(300):
        k = policy.decide(bench.closed_loop_stats(k, i, favourable=True)).num_steps
    assert k > 0
    fields = {"batch_size": 1, "mean_seq_len": 1000.0, "last_num_steps": k, "last_step_time_s": 0.02}
    acc = bad.pop("accepted", [k])
    policy.decide(StepStats.fast(**{**fields, **bad}, accepted_draft_tokens=acc))  # type: ignore[arg-type]
    for j in range(4):  # the steps after it: their times are attributed to the malformed step's decision
        acc_j = None if bad.get("batch_size") else [k]
        policy.decide(StepStats.fast(1, 0, 1000.0, k, acc_j, None, 0.021 + j))
    assert _run_until_off(policy, frozenset(policy.config.candidate_steps()), k) > 0
    assert len(policy.s.pending) < 64  # queued measurements are folded in, not kept forever


def _numpy_typed(stats: StepStats) -> StepStats:
    def conv(v: Any) -> Any:
        if type(v) is int:
            return np.int64(v)
        if type(v) is float:
            return np.float64(v)
        if type(v) is list:
            return [np.int64(x) for x in v]
        return v

    return StepStats.fast(*(conv(v) for v in stats))


@pytest.mark.parametrize(("label", "spec"), _CONFIGS, ids=[c[0] for c in _CONFIGS])
@given(seed=st.integers(0, 2**16))
def test_numpy_numbers_in_every_field_decide_as_python_numbers_do(label: str, spec: Any, seed: int) -> None:
    import random

    rng = random.Random(seed)
    plain, typed = make_policy(spec), make_policy(spec)
    k = 0
    for i in range(200):
        stats = bench.closed_loop_stats(k, i, favourable=rng.random() < 0.5)
        stats = stats._replace(num_waiting=rng.randint(0, 4), mean_seq_len=float(rng.randint(1, 4000)))
        a, b = plain.decide(stats), typed.decide(_numpy_typed(stats))
        assert a == b, f"step {i}: {a} with Python numbers, {b} with numpy numbers"
        k = a.num_steps


def test_numpy_integer_depth_keeps_cost_model_reading_acceptance() -> None:
    """A drafter that accepts nothing, the depth reported as np.int64: speculation goes off almost always."""
    policy = make_policy("cost_model")
    k, off = 0, 0
    for i in range(3000):
        t = 0.02 * (1.0 + 0.05 * k)
        acc = [0] * 8 if k else None
        mode = policy.decide(StepStats.fast(8, 0, 1000.0, np.int64(k), acc, None, t + i * 1e-9))
        k = mode.num_steps
        off += k == 0
    assert off / 3000 > 0.9


def test_small_seeded_corpus_has_no_exception_invalid_output_or_liveness_violation() -> None:
    tallies = bench.run_corpus(segments=6, seed=7)
    for label, t in tallies.items():
        assert (t.exceptions, t.invalid, t.liveness_violations) == (0, 0, 0), (label, t.errors)
        assert t.calls > 6


_OPTIONAL = {"mean_seq_len": 2, "accepted_draft_tokens": 4, "drafted_tokens": 5, "last_step_time_s": 6,
             "mean_accepted": 7}
_NOT_A_VALUE = (math.inf, math.nan, -1.0, "x", b"x", True, 10**400, bench.Tensorish(), object(), 5)


@pytest.mark.parametrize(("label", "spec"), _CONFIGS, ids=[c[0] for c in _CONFIGS])
@given(
    field=st.sampled_from(sorted(_OPTIONAL)), bad=st.sampled_from(_NOT_A_VALUE), at=st.integers(0, 150),
    seed=st.integers(0, 2**16),
)
def test_a_malformed_optional_field_acts_exactly_as_if_it_were_missing(
    label: str, spec: Any, field: str, bad: Any, at: int, seed: int
) -> None:
    import random

    rng = random.Random(seed)
    favourable = [rng.random() < 0.5 for _ in range(300)]
    runs = []
    for value in (bad, None):
        policy, k, out = make_policy(spec), 0, []
        for i, fav in enumerate(favourable):
            stats = bench.closed_loop_stats(k, i, favourable=fav)
            if i == at:
                stats = StepStats.fast(*(value if j == _OPTIONAL[field] else v for j, v in enumerate(stats)))
            k = policy.decide(stats).num_steps
            out.append(k)
        runs.append(out)
    assert runs[0] == runs[1]
