"""cost_model's per-request acceptance: invariants of the estimator, and the policy using request ids."""

from __future__ import annotations

import math
import random
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import StepStats, make_policy
from specpolicy.policies.cost_model.requests import RequestAcceptance, fit_population
from specpolicy.policies.cost_model.weights import TwoPoint, chain_tokens

ARMS = (0, 1, 2, 3, 4, 5, 6, 7)
rates = st.floats(0.0, 1.0, allow_nan=False)
ids = st.integers(0, 40)
#: (depth, [(request id, accepted drafts)]) per step; accepted may exceed the depth (invalid: ignored).
steps = st.lists(
    st.tuples(st.integers(1, 7), st.lists(st.tuples(ids, st.integers(0, 9)), max_size=12)), max_size=40
)


def _feed(est: RequestAcceptance, history: list[tuple[int, list[tuple[int, int]]]]) -> None:
    for step, (depth, outcome) in enumerate(history, 1):
        est.queue(depth, [r for r, _ in outcome], bytes(n for _, n in outcome))
        est.fold(step)


@given(rates, rates, steps, ids)
def test_estimates_stay_probabilities_and_expected_tokens_stay_in_range(
    a1: float, a2: float, history: list[tuple[int, list[tuple[int, int]]]], rid: int
) -> None:
    est = RequestAcceptance(7, ARMS)
    est.set_population(a1, a2)
    _feed(est, history)
    p = est.estimate(rid)
    assert 0.0 <= p <= 1.0 and not math.isnan(p)
    e = est.expected(rid)
    assert all(1.0 <= x <= 1.0 + k + 1e-9 for x, k in zip(e, ARMS, strict=True))
    assert e == sorted(e)  # a deeper chain never expects fewer tokens
    own = est.own([rid], 3, len(history) + 1, False)
    if own is not None:  # the request's weight 1 / E_r(3) and its weighted tokens E_r(k) / E_r(3)
        num, den, count = own
        assert count == 1 and math.isclose(den, 1.0 / e[3])
        for i in range(len(ARMS)):
            assert math.isclose(num[i], e[i] / e[3])
    held = est.own([rid], 3, len(history) + 1, True)
    if held is not None:  # held: its weight E_r(3) and its slot time per weight E_r(3) / E_r(k)
        rows, total, count = held
        assert count == 1 and math.isclose(total, e[3])
        for i in range(len(ARMS)):
            assert math.isclose(rows[i], e[3] / e[i])


@given(rates, rates, steps, st.integers(1000, 2000), st.integers(1, 64))
def test_a_request_never_seen_gets_the_population_estimate(
    a1: float, a2: float, history: list[tuple[int, list[tuple[int, int]]]], new: int, n: int
) -> None:
    est = RequestAcceptance(7, ARMS)
    est.set_population(a1, a2)
    _feed(est, history)
    m1 = min(max(a1, 1e-6), 1 - 1e-6)
    assert math.isclose(est.estimate(new), m1, rel_tol=1e-9, abs_tol=1e-12)
    assert est.own([new, new + 1], 3, 99, False) is None  # only new requests: priced as the population
    assert est.own([new, new + 1], 3, 99, True) is None


@settings(max_examples=50)
@given(st.integers(1, 64), st.integers(1, 64), st.lists(st.integers(0, 100), max_size=400))
def test_memory_stays_bounded_and_evictions_are_counted(capacity: int, horizon: int, seen: list[int]) -> None:
    est = RequestAcceptance(7, ARMS, capacity=capacity, horizon=horizon)
    for step, rid in enumerate(seen, 1):
        est.queue(3, [rid], bytes([1]))
        est.fold(step)
        assert len(est) <= capacity
    # every id ever seen is still kept, or its drop was counted
    assert len(est) + est.evicted + est.forgotten >= len(set(seen))
    if len(set(seen)) <= capacity:
        assert est.evicted == 0
    if len(seen) < horizon:
        assert est.forgotten == 0


def test_finished_requests_are_forgotten() -> None:
    est = RequestAcceptance(7, ARMS, horizon=100)
    for step in range(1, 51):
        est.queue(3, ["old"], bytes([3]))
        est.fold(step)
    for step in range(51, 400):
        est.queue(3, ["new"], bytes([0]))
        est.fold(step)
    assert est.forgotten == 1 and len(est) == 1
    assert est.estimate("old") == est.estimate("never seen")


def test_a_request_own_data_move_its_estimate_toward_its_rate() -> None:
    est = RequestAcceptance(7, ARMS)
    est.set_population(0.55, 0.79)  # a mixed population: a wide prior
    rng = random.Random(1)
    for step in range(1, 21):
        easy = min(7, int(math.log(rng.random()) / math.log(0.9)))
        hard = min(7, int(math.log(rng.random()) / math.log(0.2)))
        est.queue(7, ["easy", "hard"], bytes([easy, hard]))
        est.fold(step)
    assert est.estimate("easy") > 0.8 and est.estimate("hard") < 0.35
    assert est.expected("easy")[-1] > est.expected("new")[-1] > est.expected("hard")[-1]
    easy, hard = est.own(["easy"], 1, 21, False), est.own(["hard"], 1, 21, False)
    assert easy is not None and hard is not None
    assert easy[0][-1] / easy[1] > hard[0][-1] / hard[1]  # more tokens at depth 7
    assert easy[1] < hard[1]  # and a lighter weight: its tokens free less slot time
    both = est.own(["easy", "hard", "new"], 1, 21, False)
    assert both is not None and both[2] == 2
    assert math.isclose(both[1], easy[1] + hard[1]) and math.isclose(both[0][3], easy[0][3] + hard[0][3])


@given(rates, rates, st.floats(0.0, 1e5))
def test_the_population_picture_keeps_its_mean_and_stays_probabilities(
    a1: float, a2: float, tries: float
) -> None:
    pop = TwoPoint(a1, a2, tries)
    assert math.isclose(sum(pop.weights), 1.0) and all(w >= 0.0 for w in pop.weights)
    assert all(0.0 < p < 1.0 for p in pop.nodes)
    m1 = min(max(a1, 1e-6), 1 - 1e-6)
    assert math.isclose(sum(w * p for p, w in zip(pop.nodes, pop.weights, strict=True)), m1, rel_tol=1e-6)
    num, den = pop.weighted(ARMS, 3)
    assert den > 0.0 and all(1.0 <= x / den <= 1.0 + k + 1e-9 for x, k in zip(num, ARMS, strict=True))


def test_spread_within_the_noise_is_no_spread_and_a_mixture_is_two_rates() -> None:
    assert TwoPoint(0.78, 0.81, 400.0).nodes == (0.78,)  # 0.03 apart on 400 attempts: chance
    # half 0.9, half 0.2: a_1 = 0.55, a_2 = E p^2 / E p = 0.425 / 0.55
    pop = TwoPoint(0.55, 0.425 / 0.55, 5000.0)
    lo, hi = pop.nodes
    assert lo < 0.35 and hi > 0.8
    num, den = pop.weighted(ARMS, 3)
    plain = pop.plain(ARMS)
    assert num[-1] / den < plain[-1]  # weighted: the hard requests' tokens count for more, depth less
    assert math.isclose(num[0] / den, 1.0) and chain_tokens(0.5, 2) == 1.75


def _run(policy_ids: bool, seed: int) -> float:
    """Tokens per unit time of cost_model at batch 1 on alternating easy/hard requests (synthetic engine:
    a spec step at depth k costs 1 + 0.25 k, an off step 1)."""
    rng = random.Random(seed)
    policy = make_policy("cost_model")
    tokens = time_used = 0.0
    k_prev, acc_prev, t_prev, rid_prev = 0, None, None, None
    for r in range(60):
        p = 0.92 if r % 2 else 0.15
        for _ in range(150):
            rid = f"req-{r}"
            stats = StepStats(
                1, 0, 500.0, k_prev, acc_prev, None, t_prev, None, 1 if t_prev else None,
                k_prev if t_prev else None, 500.0 if t_prev else None,
                [rid_prev] if (acc_prev is not None and policy_ids) else None,
                [rid] if policy_ids else None,
            )
            k = policy.decide(stats).num_steps
            g = 0
            while g < k and rng.random() < p:
                g += 1
            dt = 1.0 + 0.25 * k if k else 1.0
            tokens += 1 + g
            time_used += dt
            k_prev, acc_prev, t_prev, rid_prev = k, ([g] if k else None), dt * 0.01, rid
    return tokens / time_used


def test_request_ids_let_it_price_each_request_of_a_batch_of_one() -> None:
    with_ids = sum(_run(True, s) for s in range(3))
    without = sum(_run(False, s) for s in range(3))
    assert with_ids > 1.2 * without


def _batch_of_one(
    policy: Any, requests: list[tuple[str, float, int]], cost: float, seed: int = 0, forced: int = 0
) -> list[list[int]]:
    """Requests one after another at batch 1, each (id, per-draft rate, steps); a spec step at depth k costs
    1 + cost * k plain steps. The first ``forced`` outcomes of the last request accept every draft. The
    decided depths, per request."""
    rng = random.Random(seed)
    k, acc, t, rid_prev = 0, None, None, None
    out = []
    for r, (rid, p, steps) in enumerate(requests):
        depths = []
        for i in range(steps):
            stats = StepStats(
                1, 0, 500.0, k, acc, None, t, None, 1 if t else None, k if t else None,
                500.0 if t else None, [rid_prev] if acc is not None else None, [rid],
            )
            k = policy.decide(stats).num_steps
            depths.append(k)
            g = 0
            lucky = r == len(requests) - 1 and i < forced
            while g < k and (lucky or rng.random() < p):
                g += 1
            t = 0.01 * (1.0 + cost * k) * (1.0 + 0.01 * rng.random())
            acc, rid_prev = ([g] if k else None), rid
        out.append(depths)
    return out


def test_no_look_where_speculation_cannot_pay() -> None:
    """A look at a request costs a speculative step: where speculation costs 3x a plain step and more (no
    acceptance could pay for it), a new request after a hard one gets none."""
    policy = make_policy("cost_model")
    hard, new = _batch_of_one(policy, [("hard", 0.05, 500), ("new", 0.7, 100)], cost=2.0)
    assert hard[400:].count(0) >= 95  # the hard request: off
    assert new[:3] == [0, 0, 0]  # nothing a look could show would turn speculation on


def test_while_off_a_new_request_gets_a_look_when_speculation_may_pay_for_it() -> None:
    """Off teaches nothing about a request: where speculation pays for the easy half of the requests seen, a
    new one in a batch of one is speculated on within its first steps, even after a hard one turned it off."""
    policy = make_policy("cost_model")
    history = [(f"r{i}", 0.9 if i % 2 else 0.1, 120) for i in range(12)]
    *_, hard, new = _batch_of_one(policy, [*history, ("hard", 0.05, 300), ("new", 0.9, 40)], cost=0.25)
    assert hard[200:].count(0) >= 95
    assert max(new[:3]) > 0


def test_the_prior_remembers_requests_beyond_the_horizon() -> None:
    """At a batch of one only a few requests fit in the horizon, and the pooled rates describe the last one:
    the prior of a new request is fitted to the requests that finished too."""
    est = RequestAcceptance(7, ARMS, horizon=50)
    rng = random.Random(3)
    step = 0
    for r in range(24):
        p = 0.9 if r % 2 else 0.2
        for _ in range(60):
            step += 1
            n = 0
            while n < 3 and rng.random() < p:
                n += 1
            est.queue(3, [f"r{r}"], bytes([n]))
            est.fold(step)
            est.set_population(p, p)  # the pooled rates: the request running
    assert len(est) < 8  # most requests were forgotten
    assert 0.45 < est.estimate("new") < 0.65  # the population's mean (0.55), not the last request's (0.2)


def _geometric_counts(rng: random.Random, a: float, b: float, n: int, steps: int, depth: int) -> list[
    tuple[float, float]
]:
    out = []
    for _ in range(n):
        p = rng.betavariate(a, b)
        s = f = 0
        for _ in range(steps):
            g = 0
            while g < depth and rng.random() < p:
                g += 1
            s += g
            f += 1 if g < depth else 0
        out.append((float(s), float(f)))
    return out


def test_the_population_fit_recovers_the_requests_beta() -> None:
    """Requests observed for a few steps each (the draft chain stops at the first rejection): the fit gets
    the population's mean and, within its bounds, its concentration."""
    rng = random.Random(5)
    for a, b in ((7.0, 3.0), (3.5, 6.5)):
        for steps, depth in ((3, 3), (10, 1), (10, 7), (40, 3)):
            fits = [fit_population(_geometric_counts(rng, a, b, 64, steps, depth), 20.0) for _ in range(20)]
            mean = sum(m for m, _ in fits) / len(fits)
            conc = sorted(c for _, c in fits)[len(fits) // 2]
            assert abs(mean - a / (a + b)) < 0.03, (a, b, steps, depth, mean)
            assert 6.0 < conc <= 20.0, (a, b, steps, depth, conc)


@given(st.lists(st.tuples(st.floats(0.0, 64.0), st.floats(0.0, 64.0)), max_size=80), st.floats(0.5, 20.0))
def test_the_population_fit_stays_in_range(counts: list[tuple[float, float]], c: float) -> None:
    m, conc = fit_population(counts, c)
    assert 0.0 < m < 1.0 and 0.5 <= conc <= 20.0


@given(rates, rates, steps, st.lists(ids, min_size=1, max_size=8))
def test_scenarios_of_a_batch_are_ordered_and_in_range(
    a1: float, a2: float, history: list[tuple[int, list[tuple[int, int]]]], batch: list[int]
) -> None:
    """A look's scenarios: a batch whose requests are better than estimated expects more tokens at every
    depth, never fewer, and never more than the depth allows."""
    est = RequestAcceptance(7, ARMS)
    est.set_population(a1, a2)
    _feed(est, history)
    rows = est.shifted(batch, (-1.5, 0.0, 1.5))
    for row in rows:
        assert all(1.0 <= x <= 1.0 + k + 1e-9 for x, k in zip(row, ARMS, strict=True))
    for lo, hi in zip(rows, rows[1:], strict=False):
        assert all(x <= y + 1e-9 for x, y in zip(lo, hi, strict=True))
