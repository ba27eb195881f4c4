"""cost_model, closed loop: a synthetic engine whose step time and acceptance respond to the chosen depth.

The policy only ever sees StepStats built from what the engine did (nothing of its internals is injected), so
these tests check the whole learning loop: acceptance per position, the online step-cost model, probing,
the one- or two-step feedback lag, hysteresis, and profile seeding.
"""

from __future__ import annotations

import json
import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import StepStats, make_policy
from specpolicy.errors import ConfigError
from specpolicy.policies.cost_model import CostModelConfig, make_cost_model
from specpolicy.policies.cost_model.table import CostCells
from specpolicy.policy import Policy, ReportsEstimates
from specpolicy.registry import parse_config
from specpolicy.runtime.controller import StepController

StepTime = Callable[[int, int], float]  # (batch, depth) -> seconds


def memory_bound(batch: int, k: int) -> float:
    """Small-batch regime: a draft step costs 5% of a decode step, verify of k+1 tokens is nearly free."""
    return 0.010 * (1.0 + 0.05 * k) + 0.00001 * batch


def compute_bound(batch: int, k: int) -> float:
    """Saturated regime: verify cost grows with the tokens verified (plus drafts); off pays a catch-up."""
    return 0.040 * (1.0 + 1.0 * k) + (0.002 if k == 0 else 0.0)


def expected_tokens(p: float, k: int) -> float:
    """Closed form for i.i.d. per-draft acceptance p (Leviathan et al.), the bonus token counted."""
    return (1.0 - p ** (k + 1)) / (1.0 - p)


@dataclass
class Engine:
    """Continuous batch of fixed size; each request accepts each draft with its own probability."""

    step_time: StepTime
    acceptance: float
    batch: int
    lag: int = 1  # 1: feedback describes the previous decision (non-overlap); 2: the one before (overlap)
    spread: float = 0.0  # per-request acceptance uniform in acceptance +- spread
    noise: float = 0.01  # multiplicative step-time jitter
    mean_only: bool = False  # report StepStats.mean_accepted instead of the per-request list
    cap: int = 64  # deepest depth the engine can run; deeper decisions run at the cap
    #: name the described step's batch size, decided depth and context length, as the adapters do (False:
    #: an adapter that says only what ran)
    describe: bool = True
    seed: int = 0
    tokens: float = 0.0
    elapsed: float = 0.0
    depths: list[int] = field(default_factory=list)
    _done: list[tuple[int, int, list[int] | None, float, int]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def stats(self) -> StepStats:
        if len(self._done) < self.lag:
            return StepStats(self.batch)
        decided, k, acc, t, batch = self._done[-self.lag]
        described: dict[str, Any] = {}
        if self.describe:
            described = {"last_batch_size": batch, "last_decided_steps": decided, "last_mean_seq_len": 800.0}
        if self.mean_only:
            mean = None if acc is None else sum(acc) / len(acc)
            return StepStats(
                self.batch,
                mean_seq_len=800.0,
                last_num_steps=k,
                last_step_time_s=t,
                mean_accepted=mean,
                **described,
            )
        return StepStats(
            self.batch,
            mean_seq_len=800.0,
            last_num_steps=k,
            accepted_draft_tokens=acc,
            last_step_time_s=t,
            **described,
        )

    def run_step(self, decided: int) -> None:
        self.depths.append(decided)
        k = min(decided, self.cap)
        rng = self.rng
        acc: list[int] | None = None
        produced = self.batch
        if k > 0:
            acc = []
            for _ in range(self.batch):
                p = min(max(self.acceptance + rng.uniform(-self.spread, self.spread), 0.0), 1.0)
                n = 0
                while n < k and rng.random() < p:
                    n += 1
                acc.append(n)
            produced += sum(acc)
        t = self.step_time(self.batch, k) * math.exp(self.noise * rng.gauss(0.0, 1.0))
        self.tokens += produced
        self.elapsed += t
        self._done.append((decided, k, acc, t, self.batch))
        del self._done[:-3]

    def run(self, policy: Policy, steps: int) -> list[int]:
        start = len(self.depths)
        for _ in range(steps):
            self.run_step(policy.decide(self.stats()).num_steps)
        return self.depths[start:]


def mode_of(depths: Sequence[int]) -> int:
    return Counter(depths).most_common(1)[0][0]


def share(depths: Sequence[int], allowed: set[int]) -> float:
    return sum(d in allowed for d in depths) / len(depths)


def best_depth(step_time: StepTime, p: float, batch: int, depths: Sequence[int]) -> int:
    """Ground truth of the synthetic engine: the depth with the most tokens per second."""
    return max(depths, key=lambda k: expected_tokens(p, k) / step_time(batch, k))


# -- choosing the faster mode ------------------------------------------------------------------------------
@pytest.mark.parametrize("lag", [1, 2])
def test_compute_bound_large_batch_turns_speculation_off(lag: int) -> None:
    assert best_depth(compute_bound, 0.7, 256, range(8)) == 0  # the premise
    engine = Engine(compute_bound, acceptance=0.7, batch=256, lag=lag)
    policy = make_policy("cost_model")
    tail = engine.run(policy, 1500)[-1000:]
    assert mode_of(tail) == 0
    assert share(tail, {0}) > 0.95  # probes of other depths stay rare once they are known to be slow


@pytest.mark.parametrize("lag", [1, 2])
def test_memory_bound_high_acceptance_speculates_deep(lag: int) -> None:
    assert best_depth(memory_bound, 0.9, 1, range(8)) == 7
    engine = Engine(memory_bound, acceptance=0.9, batch=1, lag=lag)
    policy = make_policy("cost_model")
    tail = engine.run(policy, 1500)[-1000:]
    assert mode_of(tail) == 7
    assert share(tail, {6, 7}) > 0.9


def test_throughput_close_to_the_best_static_depth() -> None:
    """Learning from scratch costs little: within 3% of the best fixed depth over 3000 steps."""
    for step_time, p, batch in ((compute_bound, 0.7, 128), (memory_bound, 0.75, 4)):
        k_best = best_depth(step_time, p, batch, range(8))
        static = Engine(step_time, acceptance=p, batch=batch, seed=1)
        for _ in range(3000):
            static.run_step(k_best)
        learned = Engine(step_time, acceptance=p, batch=batch, seed=1)
        learned.run(make_policy("cost_model"), 3000)
        assert learned.tokens / learned.elapsed >= 0.97 * static.tokens / static.elapsed


def test_depth_follows_batch_size_through_the_learned_costs() -> None:
    """One engine whose verify turns compute-bound above 32 requests: deep when small, off when large."""

    def knee(batch: int, k: int) -> float:
        tokens = batch * (k + 1)
        return 0.008 * (1 + 0.04 * k) + 0.00004 * max(0, tokens - 32 * 4) + (0.0005 if k == 0 else 0.0)

    assert best_depth(knee, 0.8, 2, range(8)) >= 5 and best_depth(knee, 0.8, 512, range(8)) == 0
    policy = make_policy("cost_model")
    small = Engine(knee, acceptance=0.8, batch=2)
    large = Engine(knee, acceptance=0.8, batch=512)
    for _ in range(3):  # the load goes up and down; each bucket keeps what it learned
        tail_small = small.run(policy, 800)[-300:]
        tail_large = large.run(policy, 800)[-300:]
    assert mode_of(tail_small) >= 5
    assert mode_of(tail_large) == 0


def test_learns_from_mean_acceptance_alone() -> None:
    """An adapter that only has the mean accepted count (an engine counter) still drives the policy."""
    engine = Engine(memory_bound, acceptance=0.9, batch=16, mean_only=True)
    policy = make_policy("cost_model")
    assert mode_of(engine.run(policy, 1500)[-500:]) == 7
    est = policy.estimates()  # type: ignore[attr-defined]
    assert abs(est["accept_rate_1"] - 0.9) < 0.05
    engine.acceptance = 0.15
    assert mode_of(engine.run(policy, 1500)[-500:]) <= 2


def test_stops_asking_for_depths_the_engine_cannot_run() -> None:
    """The engine caps drafts at 3 (no graph for deeper ones): learnt from the depths it reports back."""
    engine = Engine(memory_bound, acceptance=0.9, batch=4, cap=3)
    policy = make_policy("cost_model")
    tail = engine.run(policy, 1500)[-1000:]
    assert set(tail) <= {0, 1, 2, 3}
    assert mode_of(tail) == 3


def test_without_the_described_decision_times_are_still_used() -> None:
    """A caller that builds StepStats itself and names only what ran (no ``last_batch_size``,
    ``last_decided_steps``, ``last_mean_seq_len``): the times still count (the acceptance list's length,
    else the coming batch while it holds still, for their batch size), so the choice follows the costs."""
    for lag in (1, 2):
        large = Engine(compute_bound, acceptance=0.7, batch=256, lag=lag, describe=False)
        assert share(large.run(make_policy("cost_model"), 1500)[-1000:], {0}) > 0.95
        small = Engine(memory_bound, acceptance=0.9, batch=1, lag=lag, describe=False, mean_only=True)
        assert mode_of(small.run(make_policy("cost_model"), 1500)[-1000:]) == 7


def _knee(batch: int, k: int) -> float:
    """Deep speculation pays at 4 requests, none at 256 (compute-bound verify)."""
    return memory_bound(batch, k) if batch < 64 else compute_bound(batch, k)


@pytest.mark.parametrize("lag", [1, 2])
def test_through_the_controller_each_time_is_billed_to_the_decision_that_ran_it(lag: int) -> None:
    """The production pairing, with the overlap lag: batch sizes cycle 4, 4, 256, so the decision an
    outcome describes differs from the coming one and from the previous one, and so do their depths
    (deep at 4, off at 256). The engine runs at most 3 drafts. cost_model must learn each bucket's own
    step times and the engine's limit from what the controller says of the described decision: a time
    billed to another decision's batch size or depth mixes 10 ms steps with 40-160 ms ones."""
    assert best_depth(_knee, 0.7, 4, range(4)) == 3 and best_depth(_knee, 0.7, 256, range(8)) == 0
    policy = make_policy("cost_model")
    ctl = StepController(policy, allowed_steps=range(8), default_steps=3)
    rng = random.Random(7)
    cycle = (4, 4, 256)
    waiting: list[tuple[int, int, list[int] | None, float]] = []  # (decision, ran, accepted, time)
    decided: dict[int, list[int]] = {4: [], 256: []}
    for n in range(4500):
        batch = cycle[n % 3]
        step, k = ctl.decide(ctl.next_stats(batch, 0, 900.0 if batch == 4 else 300.0))
        decided[batch].append(k)
        ran = min(k, 3)
        acc = None
        if ran:
            acc = []
            for _ in range(batch):
                a = 0
                while a < ran and rng.random() < 0.7:
                    a += 1
                acc.append(a)
        waiting.append((step, ran, acc, _knee(batch, ran) * math.exp(0.01 * rng.gauss(0.0, 1.0))))
        if len(waiting) == lag:
            step, ran_, acc_, t = waiting.pop(0)
            ctl.outcome(step, acc_, t, num_steps=ran_)
    assert ctl.errors == 0
    small, large = decided[4][-1000:], decided[256][-1000:]
    assert set(small) <= {0, 1, 2, 3} and mode_of(small) == 3  # the engine's limit, learnt
    assert share(large, {0}) > 0.95
    for batch, k in ((4, 3), (256, 0)):
        policy.decide(StepStats(batch))  # the estimates describe this batch size's bucket
        est = policy.estimates()  # type: ignore[attr-defined]
        assert est[f"step_ms_{k}"] == pytest.approx(_knee(batch, k) * 1e3, rel=0.05)


# -- adapting ----------------------------------------------------------------------------------------------
def test_adapts_when_acceptance_drops_and_recovers() -> None:
    def cost(batch: int, k: int) -> float:
        return 0.01 * (1 + 0.1 * k)

    assert best_depth(cost, 0.9, 8, range(8)) >= 6
    assert best_depth(cost, 0.2, 8, range(8)) == 1
    engine = Engine(cost, acceptance=0.9, batch=8, spread=0.05)
    policy = make_policy("cost_model")
    assert mode_of(engine.run(policy, 1000)[-300:]) >= 6
    engine.acceptance = 0.2
    assert mode_of(engine.run(policy, 1000)[-300:]) == 1
    engine.acceptance = 0.9
    assert mode_of(engine.run(policy, 1000)[-300:]) >= 6


def test_turns_back_on_after_an_off_phase() -> None:
    """Off yields no acceptance data: probes must find out that drafts are accepted again (liveness)."""

    def cost(batch: int, k: int) -> float:
        return 0.01 * (1 + 0.15 * k)

    assert best_depth(cost, 0.05, 16, range(8)) == 0 and best_depth(cost, 0.85, 16, range(8)) >= 4
    engine = Engine(cost, acceptance=0.05, batch=16)
    policy = make_policy("cost_model")
    assert share(engine.run(policy, 2000)[-500:], {0}) > 0.9
    engine.acceptance = 0.85
    assert mode_of(engine.run(policy, 3000)[-500:]) >= 4


def _with_outliers(cost: StepTime, slow: float, rule: str) -> StepTime:
    """``cost`` with some steps ``slow`` times slower: the first, the first at each depth, or every 37th."""
    calls = [0]
    depths_seen: set[int] = set()

    def timed(batch: int, k: int) -> float:
        calls[0] += 1
        first_at_depth = k not in depths_seen
        depths_seen.add(k)
        hits = {"first": calls[0] == 1, "first-per-depth": first_at_depth, "every-37th": calls[0] % 37 == 5}
        hit = hits[rule]
        return cost(batch, k) * (slow if hit else 1.0)

    return timed


@pytest.mark.parametrize("lag", [1, 2])
@pytest.mark.parametrize("rule", ["first", "first-per-depth", "every-37th"])
@pytest.mark.parametrize("slow", [6.0, 10.0])
def test_slow_outlier_steps_do_not_lock_out_the_faster_mode(lag: int, rule: str, slow: float) -> None:
    """A live engine's first decode step after prefill took 128 ms against 20 ms: one such sample must not
    make on look slower than off for the rest of the phase (on: 20 ms for 2.5 tokens, off: 16.6 ms for 1)."""

    def cost(batch: int, k: int) -> float:
        return 0.020 if k else 0.0166

    assert best_depth(cost, 0.69, 128, [0, 3]) == 3
    engine = Engine(_with_outliers(cost, slow, rule), acceptance=0.69, batch=128, lag=lag)
    depths = engine.run(make_cost_model(steps=(3,)), 250)
    last_off = max((i for i, d in enumerate(depths) if d == 0), default=-1)
    assert share(depths[40:], {3}) > 0.97, depths[:60]
    if rule != "every-37th":
        assert last_off < 40, depths[:60]


@pytest.mark.parametrize("rule", ["first", "first-per-depth", "every-37th"])
def test_slow_outlier_steps_do_not_mislead_the_depth_choice(rule: str) -> None:
    """All depths offered; 8x-slow outlier steps must not keep the policy away from the best depth."""
    best = best_depth(memory_bound, 0.8, 16, range(8))
    engine = Engine(_with_outliers(memory_bound, 8.0, rule), acceptance=0.8, batch=16)
    depths = engine.run(make_policy("cost_model"), 1500)
    assert share(depths[-500:], {best - 1, best, best + 1}) > 0.9, Counter(depths[-500:])


@settings(max_examples=200, deadline=None)
@given(
    base=st.floats(0.001, 1.0),
    jitter=st.lists(st.floats(0.95, 1.05), min_size=12, max_size=60),
    outliers=st.sets(st.integers(0, 59)),
    slow=st.floats(3.0, 20.0),
)
def test_isolated_slow_samples_leave_a_cell_within_the_normal_range(
    base: float, jitter: list[float], outliers: set[int], slow: float
) -> None:
    """Invariant of the cost cell: slow samples at least two normal ones apart (the first sample included)
    never pull the estimate outside the range of the normal samples."""
    isolated = {i for i in outliers if i + 1 < len(jitter) and not {i - 2, i - 1, i + 1, i + 2} & outliers}
    cells = CostCells(1, 1, halflife=256.0)
    for step, j in enumerate(jitter):
        cells.add(0, 0, base * j * (slow if step in isolated else 1.0), step)
        if step not in isolated:
            normal = [base * x for i, x in enumerate(jitter[: step + 1]) if i not in isolated]
            assert min(normal) * 0.999 <= cells.r[0][0] <= max(normal) * 1.001


def test_a_cell_follows_a_real_change_one_sample_late() -> None:
    """The median filter must not hide a lasting change: two samples at the new level move the estimate."""
    cells = CostCells(1, 1, halflife=4.0)
    for step in range(20):
        cells.add(0, 0, 1.0, step)
    cells.add(0, 0, 1.5, 20)
    assert cells.r[0][0] == pytest.approx(1.0)
    cells.add(0, 0, 1.5, 21)
    assert cells.r[0][0] > 1.05
    for step in range(22, 42):
        cells.add(0, 0, 1.5, step)
    assert cells.r[0][0] > 1.45


def test_adapts_when_costs_change() -> None:
    """Same batch and acceptance; the hardware gets slower at verifying (e.g. a co-located job)."""
    state = {"cost": memory_bound}

    def cost(batch: int, k: int) -> float:
        return state["cost"](batch, k)

    engine = Engine(cost, acceptance=0.7, batch=64)
    policy = make_policy("cost_model")
    assert mode_of(engine.run(policy, 1500)[-500:]) >= 4
    state["cost"] = compute_bound
    assert mode_of(engine.run(policy, 3000)[-500:]) == 0
    state["cost"] = memory_bound
    assert mode_of(engine.run(policy, 6000)[-500:]) >= 4


def test_no_thrash_when_the_best_depth_flips_at_a_bucket_boundary() -> None:
    """Batch size hopping 64 <-> 65 (two buckets) every step; depth 2 is 0.5% better at one, 3 at the other.

    A per-bucket argmax would switch every step (vLLM #49548); the margin and dwell keep one depth, and
    probes of the other depths stay rare once they are measured.
    """

    def flip(batch: int, k: int) -> float:
        favoured = 2 if batch == 64 else 3
        factor = 1.0 if k == favoured else (1.005 if k in (2, 3) else 1.2)
        return 0.01 * expected_tokens(0.6, k) * factor

    policy = make_policy("cost_model")
    engine = Engine(flip, acceptance=0.6, batch=64)
    depths: list[int] = []
    for step in range(6000):
        engine.batch = 64 + step % 2
        depths.extend(engine.run(policy, 1))
    tail = depths[1000:]
    switches = sum(a != b for a, b in zip(tail, tail[1:], strict=False))
    assert share(tail, {2, 3}) > 0.95
    assert switches < 0.05 * len(tail)


# -- outputs, robustness, determinism ----------------------------------------------------------------------
def test_only_configured_depths_and_no_off_when_disallowed() -> None:
    policy = make_policy({"name": "cost_model", "steps": [2, 5], "allow_off": False})
    engine = Engine(compute_bound, acceptance=0.3, batch=256)
    depths = engine.run(policy, 800)
    assert set(depths) <= {2, 5}
    assert mode_of(depths[-300:]) == 2  # the cheapest allowed depth when speculation does not pay


counts = st.one_of(
    st.none(),
    st.lists(st.one_of(st.integers(-5, 300), st.floats(allow_nan=True), st.just(None)), max_size=40),
    st.lists(st.integers(0, 7), max_size=300),
)
odd_floats = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True), st.integers(-3, 3))


@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.integers(-3, 5000), st.floats(allow_nan=True), st.none()),
            st.one_of(st.integers(-2, 70), st.floats(allow_nan=True)),
            counts,
            counts,
            odd_floats,
            odd_floats,
            odd_floats,
        ),
        min_size=1,
        max_size=60,
    ),
    st.sampled_from([(1, 2, 3, 4, 5, 6, 7), (3,), (1, 8, 64)]),
    st.booleans(),
)
def test_adversarial_stats_never_raise_and_stay_allowed(
    rows: list[tuple[object, ...]], steps: tuple[int, ...], allow_off: bool
) -> None:
    policy = make_policy({"name": "cost_model", "steps": list(steps), "allow_off": allow_off})
    allowed = set(policy.config.candidate_steps())  # type: ignore[attr-defined]
    for batch, k, acc, drafted, t, seq, mean in rows:
        stats = StepStats.fast(batch, 0, seq, k, acc, drafted, t, mean)  # type: ignore[arg-type]
        mode = policy.decide(stats)
        assert mode.num_steps in allowed
    policy.estimates()  # type: ignore[attr-defined]


def _trace(seed: int, steps: int = 600) -> list[StepStats]:
    """A fixed input sequence (not closed loop), as an engine replaying a recorded trace would give."""
    rng = random.Random(seed)
    out = []
    for i in range(steps):
        batch = rng.choice([1, 3, 17, 64, 200])
        k = rng.choice([0, 1, 3, 5])
        acc = [rng.randint(0, k) for _ in range(batch)] if k else None
        out.append(
            StepStats(
                batch,
                mean_seq_len=500.0 + i,
                last_num_steps=k,
                accepted_draft_tokens=acc,
                last_step_time_s=0.01 * (1 + 0.2 * k) * (1 + batch / 64),
            )
        )
    return out


def test_deterministic_across_instances_and_after_reset() -> None:
    trace = _trace(7)
    a = make_policy("goodput")
    b = make_policy("cost_model")
    first = [a.decide(s).num_steps for s in trace]
    assert first == [b.decide(s).num_steps for s in trace]
    a.reset()
    assert first == [a.decide(s).num_steps for s in trace]
    assert len(set(first)) > 1  # the trace does exercise decisions, not a constant


def test_estimates_report_acceptance_and_throughput() -> None:
    policy = make_policy("cost_model")
    assert isinstance(policy, ReportsEstimates)
    engine = Engine(memory_bound, acceptance=0.8, batch=32)
    engine.run(policy, 600)
    est = policy.estimates()
    assert abs(est["accept_rate_1"] - 0.8) < 0.05
    assert est["expected_tokens_0"] == 1.0
    assert est["expected_tokens_3"] == pytest.approx(expected_tokens(0.8, 3), abs=0.25)
    k = int(est["num_steps"])
    measured = 32 * expected_tokens(0.8, k) / memory_bound(32, k)
    assert est[f"tokens_per_s_{k}"] == pytest.approx(measured, rel=0.1)


def test_trimmed_drafts_are_not_counted_as_rejections() -> None:
    """Requests that proposed fewer drafts (end of sequence) and accepted them all tried fewer positions."""
    policy = make_policy({"name": "cost_model", "steps": [4]})
    rng = random.Random(5)
    for _ in range(400):
        acc, drafted = [], []
        for _ in range(16):
            d = 4 if rng.random() < 0.5 else rng.randint(1, 3)
            n = 0
            while n < d and rng.random() < 0.8:
                n += 1
            acc.append(n)
            drafted.append(d)
        policy.decide(
            StepStats(
                16, last_num_steps=4, accepted_draft_tokens=acc, drafted_tokens=drafted, last_step_time_s=0.01
            )
        )
    est = policy.estimates()  # type: ignore[attr-defined]
    for j in (1, 2, 3, 4):
        assert abs(est[f"accept_rate_{j}"] - 0.8) < 0.06, (j, est)


# -- profile seeding ---------------------------------------------------------------------------------------
class TableCost:
    """A StepCostModel: a programmatic profile."""

    def __init__(self, fn: StepTime) -> None:
        self.fn = fn

    def step_time_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float:
        return self.fn(int(batch_size), num_steps)


def test_profile_seeding_sets_the_first_decisions() -> None:
    """Without a profile the first decision is a guess; with one it is the profile's best depth at once."""
    first_plain = make_policy("cost_model").decide(StepStats(256)).num_steps
    assert first_plain > 0  # the prior guesses that speculation pays
    seeded = make_cost_model(TableCost(compute_bound))
    assert seeded.decide(StepStats(256)).num_steps == 0
    deep = make_cost_model(TableCost(memory_bound), prior_acceptance=0.9)
    assert deep.decide(StepStats(1)).num_steps == best_depth(memory_bound, 0.9, 1, range(8))


def test_profile_seeded_policy_corrects_a_wrong_profile() -> None:
    """The profile says verify is free; the engine says it is compute-bound: measurements win."""
    policy = make_cost_model(TableCost(memory_bound))
    engine = Engine(compute_bound, acceptance=0.7, batch=256)
    assert mode_of(engine.run(policy, 2000)[-500:]) == 0


@pytest.mark.parametrize("name", ["seed-k25-tp8-pcie", "h200-llama8b", "moe-verify-heavy"])
def test_shipped_profile_gives_its_best_depth_first(name: str) -> None:
    """First decision per batch size = the profile's argmax of E(k)/T(k) at the prior acceptance (where the
    best depth leads the runner-up by > 2%, so the bucket's representative batch size cannot flip it)."""
    profile_mod = pytest.importorskip("specpolicy.profiles")
    if name not in profile_mod.available_profiles():
        pytest.skip(f"profile {name} not shipped in this checkout")
    profile = profile_mod.load_profile(name)
    depths = list(range(profile.max_steps + 1))
    checked = 0
    for batch in (1, 4, 16, 64, 128, 256):
        ranked = sorted(depths, key=lambda k: -expected_tokens(0.7, k) / profile.step_time_s(batch, k))
        best, second = ranked[0], ranked[1]
        gap = (expected_tokens(0.7, best) / profile.step_time_s(batch, best)) / (
            expected_tokens(0.7, second) / profile.step_time_s(batch, second)
        )
        if gap < 1.02:
            continue
        policy = make_policy({"name": "cost_model", "profile": name, "steps": depths[1:]})
        assert policy.decide(StepStats(batch)).num_steps == best, (name, batch)
        checked += 1
    assert checked >= 1


def test_profile_by_json_path(tmp_path: object) -> None:
    profile_mod = pytest.importorskip("specpolicy.profiles")
    names = profile_mod.available_profiles()
    if not names:
        pytest.skip("no shipped profiles in this checkout")
    doc = profile_mod.load_profile(names[0]).to_dict()
    path = tmp_path / "p.json"  # type: ignore[operator]
    path.write_text(json.dumps(doc))
    by_path = make_policy({"name": "cost_model", "profile": str(path)})
    by_name = make_policy({"name": "cost_model", "profile": names[0]})
    trace = _trace(11, 200)
    assert [by_path.decide(s) for s in trace] == [by_name.decide(s) for s in trace]


# -- configuration -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("overrides", "field_name", "allowed"),
    [
        ({"steps": []}, "steps", ""),
        ({"steps": [3, 2]}, "steps", ""),
        ({"steps": [0, 1]}, "steps.0", ""),
        ({"steps": [1, 65]}, "steps.1", ""),
        ({"prior_acceptance": 1.0}, "prior_acceptance", ""),
        ({"probe_budget": 0}, "probe_budget", ""),
        ({"switch_margin": -0.1}, "switch_margin", ""),
        ({"min_dwell_steps": -1}, "min_dwell_steps", ""),
        ({"buckets_per_octave": 0}, "buckets_per_octave", ""),
        ({"profile": ""}, "profile", ""),
        ({"profile": "no-such-profile-xyz"}, "profile", ""),
        ({"bogus": 1}, "bogus", ""),
        # probing and change detection
        ({"max_probe_share": 0}, "max_probe_share", "greater than 0"),
        ({"max_probe_share": 0.6}, "max_probe_share", "less than or equal to 0.5"),
        ({"change_threshold": 0}, "change_threshold", "greater than 0"),
        ({"change_threshold": 1e7}, "change_threshold", "less than or equal to 1000000"),
        # the prior
        ({"prior_weight": -1}, "prior_weight", "greater than or equal to 0"),
        ({"prior_weight": 1e7}, "prior_weight", "less than or equal to 1000000"),
        ({"prior_mismatch_ratio": 1.0}, "prior_mismatch_ratio", "greater than 1"),
        ({"prior_mismatch_ratio": 101}, "prior_mismatch_ratio", "less than or equal to 100"),
    ],
)
def test_bad_configs_name_the_field_and_range(
    overrides: dict[str, object], field_name: str, allowed: str
) -> None:
    with pytest.raises(ConfigError) as info:
        make_policy({"name": "cost_model", **overrides})
    assert f"cost_model.{field_name}" in str(info.value)
    assert allowed in str(info.value)


def test_config_round_trip_and_alias() -> None:
    config = parse_config("goodput", steps=[1, 3, 5], switch_margin=0.03)
    assert isinstance(config, CostModelConfig) and config.name == "cost_model"
    assert config.candidate_steps() == (0, 1, 3, 5)
    again = make_policy(config.model_dump_json())
    assert again.config == config  # type: ignore[attr-defined]
    original = make_policy(config)
    trace = _trace(3, 300)
    assert [original.decide(s) for s in trace] == [again.decide(s) for s in trace]
