"""The lookahead oracle: policy improvement over the best fixed depth; the per-step oracle where alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.sim.acceptance import BetaAcceptance, BetaMixture
from specpolicy.sim.comparators import OracleDecider
from specpolicy.sim.lookahead import LookaheadDecider
from specpolicy.sim.report import references
from specpolicy.sim.run import SimulationSpec, run_simulation
from specpolicy.stats import StepStats


class Costs:
    """A profile whose step cost is ``base + per_step * k`` (at k > 0) plus ``per_request * B``."""

    max_steps = 7
    off_cost = "catch_up"

    def __init__(self, base: float, per_step: float, per_request: float, off: float) -> None:
        self.base, self.per_step, self.per_request, self.off = base, per_step, per_request, off

    def step_time_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float:
        if num_steps == 0:
            return self.off + self.per_request * batch_size
        return self.base + self.per_step * num_steps + self.per_request * batch_size * (1 + 0.3 * num_steps)


costs = st.builds(
    Costs,
    base=st.floats(0.005, 0.05),
    per_step=st.floats(0.0005, 0.02),
    per_request=st.floats(0.0, 0.001),
    off=st.floats(0.003, 0.05),
)


def _stats(b: int, last_k: int) -> StepStats:
    return StepStats.fast(b, 0, 600.0, last_k, None, None, None, None)


@settings(max_examples=60, deadline=None)
@given(prof=costs, p=st.floats(0.01, 0.99), b=st.integers(1, 64), last_k=st.integers(0, 7))
def test_on_a_homogeneous_batch_it_picks_the_per_step_oracles_depth(
    prof: Costs, p: float, b: int, last_k: int
) -> None:
    # All requests alike and far from done: the best fixed depth is the per-step optimum, and no step
    # improves on it (e_k / e_f <= c_k / c_f for every k), so both oracles choose the same depth.
    acc = np.full(b, p)
    remaining = np.full(b, 10_000, dtype=np.int64)
    look, oracle = LookaheadDecider(prof), OracleDecider(prof)
    for _ in range(3):
        want = oracle(_stats(b, last_k), acc, remaining, 600.0)
        got = look(_stats(b, last_k), acc, remaining, 600.0)
        tokens = [sum(p**i for i in range(k + 1)) / prof.step_time_s(b, k, 608.0) for k in range(8)]
        assert got == want or tokens[got] == pytest.approx(tokens[want], rel=1e-9)


def test_it_is_deterministic_and_in_range() -> None:
    prof = Costs(0.01, 0.002, 0.0002, 0.008)
    rng = np.random.default_rng(3)
    a, b = LookaheadDecider(prof), LookaheadDecider(prof)
    for step in range(200):
        n = int(rng.integers(1, 40))
        acc = rng.beta(1, 1, size=n)
        rem = rng.integers(1, 300, size=n)
        k = a(_stats(n, step % 8), acc, rem, 700.0)
        assert 0 <= k <= 7 and k == b(_stats(n, step % 8), acc, rem, 700.0)


def test_on_a_mixed_population_it_reaches_the_best_fixed_depth_where_the_per_step_oracle_does_not() -> None:
    mix = BetaMixture(((0.5, BetaAcceptance.from_mean(0.9)), (0.5, BetaAcceptance.from_mean(0.2))))
    spec = SimulationSpec(
        profile="h200-llama8b",
        concurrency=(16,),
        duration_s=20.0,
        decide_cost_us=1.0,
        policies=(),
        acceptance=mix,
        jobs=1,
    )
    (ref,) = references(run_simulation(spec, progress=False))
    assert ref.oracle_tok_s is not None and ref.lookahead_tok_s is not None and ref.best_fixed_tok_s
    assert ref.oracle_tok_s < 0.99 * ref.best_fixed_tok_s  # the myopic oracle's blind spot
    assert ref.lookahead_tok_s >= 0.995 * ref.best_fixed_tok_s
