"""threshold: off strictly above max_batch_size, on(num_steps) at or below it; monotone in batch size."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats, make_policy

_cfg = st.tuples(st.integers(0, 512), st.integers(1, 16))


@given(_cfg, st.integers(0, 2048))
def test_follows_the_rule(cfg: tuple[int, int], b: int) -> None:
    max_bs, k = cfg
    p = make_policy({"name": "threshold", "max_batch_size": max_bs, "num_steps": k})
    want = SpecMode.off() if b > max_bs else SpecMode.on(k)
    assert p.decide(StepStats(b)) == want


@given(_cfg, st.integers(0, 2048), st.integers(0, 2048))
def test_monotone_a_larger_batch_never_speculates_deeper(cfg: tuple[int, int], b1: int, b2: int) -> None:
    lo, hi = sorted((b1, b2))
    p = make_policy({"name": "threshold", "max_batch_size": cfg[0], "num_steps": cfg[1]})
    assert p.decide(StepStats(lo)).num_steps >= p.decide(StepStats(hi)).num_steps


def test_edges_are_inclusive_below_and_exclusive_above() -> None:
    p = make_policy("threshold", max_batch_size=32, num_steps=4)
    assert [p.decide(StepStats(b)).num_steps for b in (1, 31, 32, 33, 500)] == [4, 4, 4, 0, 0]


def test_invalid_batch_size_repeats_the_last_decision() -> None:
    p = make_policy("threshold", max_batch_size=8, num_steps=2)
    assert p.decide(StepStats.fast(100)) == SpecMode.off()
    for bad in (math.nan, -4, None, "big", math.inf):
        assert p.decide(StepStats.fast(bad)) == SpecMode.off()  # type: ignore[arg-type]
    assert p.decide(StepStats.fast(3)) == SpecMode.on(2)
    assert p.decide(StepStats.fast(math.nan)) == SpecMode.on(2)  # type: ignore[arg-type]
    assert p.decide(StepStats.fast(9.0)) == SpecMode.off()  # type: ignore[arg-type]  # integral float is understood
    p.reset()
    assert p.decide(StepStats.fast(None)) == SpecMode.on(2)  # type: ignore[arg-type]  # fresh: configured depth
