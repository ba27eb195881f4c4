"""The acceptance model: chained acceptance, common random numbers, phase shifts, expected tokens."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.sim.acceptance import (
    BetaAcceptance,
    accepted_drafts,
    expected_tokens,
    hash_uniform,
    logit,
    logit_shift_for_mean,
    shifted,
)


def test_hash_uniform_is_uniform_and_a_pure_function_of_its_inputs() -> None:
    ids = np.arange(200_000, dtype=np.int64)
    pos = (ids * 7) % 300
    u = hash_uniform(5, ids, pos)
    assert ((u > 0) & (u < 1)).all()
    # Deciles each hold 10% +- 0.5% (200k samples: sd of a decile share is 0.07%).
    counts = np.histogram(u, bins=10, range=(0, 1))[0] / len(u)
    assert np.abs(counts - 0.1).max() < 0.005
    assert np.array_equal(u, hash_uniform(5, ids, pos))
    assert not np.array_equal(u, hash_uniform(6, ids, pos))
    # Order-independent: a request's draw does not depend on who else is in the batch.
    sub = hash_uniform(5, ids[1000:1010], pos[1000:1010])
    assert np.array_equal(sub, u[1000:1010])


def test_neighbouring_positions_are_uncorrelated() -> None:
    ids = np.repeat(np.arange(2000, dtype=np.int64), 50)
    pos = np.tile(np.arange(50, dtype=np.int64), 2000)
    u = hash_uniform(0, ids, pos).reshape(2000, 50)
    r = np.corrcoef(u[:, :-1].ravel(), u[:, 1:].ravel())[0, 1]
    assert abs(r) < 0.02


@pytest.mark.parametrize("p", [0.3, 0.7, 0.9])
def test_chained_acceptance_follows_p_to_the_i(p: float) -> None:
    n = 200_000
    u = hash_uniform(1, np.arange(n, dtype=np.int64), np.zeros(n, dtype=np.int64))
    acc = accepted_drafts(np.full(n, p), 6, u)
    for i in range(1, 7):
        assert (acc >= i).mean() == pytest.approx(p**i, abs=0.005)
    assert acc.max() == 6


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30),
    st.integers(0, 12),
    st.integers(0, 2**31),
)
def test_accepted_drafts_stay_within_zero_and_depth(ps: list[float], k: int, seed: int) -> None:
    p = np.asarray(ps)
    u = hash_uniform(seed, np.arange(len(ps), dtype=np.int64), np.zeros(len(ps), dtype=np.int64))
    acc = accepted_drafts(p, k, u)
    assert ((acc >= 0) & (acc <= k)).all()
    # Monotone coupling: the same luck never accepts fewer drafts with a deeper chain.
    assert (accepted_drafts(p, k + 1, u) >= acc).all()


def test_expected_tokens_matches_simulation_with_clipping() -> None:
    rng = np.random.default_rng(0)
    p = rng.beta(7, 3, size=50)
    remaining = rng.integers(1, 6, size=50)
    exp = expected_tokens(p, remaining, 4)
    n = 4000
    ids = np.arange(50 * n, dtype=np.int64)
    u = hash_uniform(9, ids, np.zeros_like(ids))
    for k in range(5):
        acc = accepted_drafts(np.tile(p, n), k, u)
        got = np.minimum(acc + 1, np.tile(remaining, n)).sum() / n
        assert exp[k] == pytest.approx(got, rel=0.01)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.tuples(st.floats(0.0, 1.0), st.integers(1, 10)), min_size=1, max_size=20), st.integers(0, 8)
)
def test_expected_tokens_is_monotone_and_bounded(reqs: list[tuple[float, int]], k: int) -> None:
    p = np.asarray([r[0] for r in reqs])
    rem = np.asarray([r[1] for r in reqs], dtype=np.int64)
    e = expected_tokens(p, rem, k)
    assert e[0] == pytest.approx(len(reqs))  # off: one token each
    assert (np.diff(e) >= -1e-12).all()
    assert (e <= np.minimum(np.arange(k + 1)[:, None] + 1, rem[None, :]).sum(axis=1) + 1e-9).all()


@pytest.mark.parametrize("target", [0.35, 0.5, 0.85])
def test_logit_shift_hits_the_phase_mean_and_keeps_request_order(target: float) -> None:
    base = BetaAcceptance()
    z = base.draw(np.random.default_rng(1), 200_000)
    s = logit_shift_for_mean(base.alpha, base.beta, target)
    moved = shifted(logit(z), s)
    assert moved.mean() == pytest.approx(target, abs=0.003)
    order = np.argsort(z[:1000])
    assert (np.diff(moved[:1000][order]) >= 0).all()
    assert logit_shift_for_mean(base.alpha, base.beta, base.mean) == pytest.approx(0.0, abs=0.02)


def test_reference_acceptance_is_beta_7_3() -> None:
    z = BetaAcceptance().draw(np.random.default_rng(2), 100_000)
    assert z.mean() == pytest.approx(0.7, abs=0.003)
    assert z.var() == pytest.approx(7 * 3 / (10**2 * 11), rel=0.03)


def test_bad_parameters_name_the_field() -> None:
    with pytest.raises(ValueError, match="acceptance.alpha"):
        BetaAcceptance(alpha=0)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        logit_shift_for_mean(7.0, 3.0, 1.0)
