"""acceptance: closed-loop behaviour against a small synthetic engine, probing liveness, data hygiene."""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import ConfigError, Policy, SpecMode, StepStats, make_policy


class SyntheticEngine:
    """A decode batch whose drafts are accepted token by token with probability ``p`` (chain drafts).

    A k-deep chain accepts ``min(k, G)`` drafts, ``P(G >= i) = p**i``. Results reach the policy ``lag`` steps
    late (lag 1 = overlap scheduling), and a step that did not speculate reports no acceptance.
    """

    def __init__(self, batch: int = 16, lag: int = 0, seed: int = 0) -> None:
        self.batch, self.lag = batch, lag
        self.rng = random.Random(seed)
        self.done: deque[tuple[int, list[int] | None]] = deque(maxlen=lag + 1)

    def stats(self) -> StepStats:
        if len(self.done) <= self.lag:
            return StepStats(self.batch)
        k, acc = self.done[0]
        return StepStats(self.batch, last_num_steps=k, accepted_draft_tokens=acc)

    def run(self, k: int, p: float) -> None:
        acc = None
        if k:
            acc = []
            for _ in range(self.batch):
                n = 0
                while n < k and self.rng.random() < p:
                    n += 1
                acc.append(n)
        self.done.append((k, acc))


def closed_loop(
    policy: Policy, phases: Sequence[tuple[float, int]], lag: int = 0, seed: int = 0
) -> list[int]:
    """Run the policy against the engine through (acceptance p, steps) phases; returns the depth per step."""
    engine = SyntheticEngine(lag=lag, seed=seed)
    depths = []
    for p, steps in phases:
        for _ in range(steps):
            k = policy.decide(engine.stats()).num_steps
            engine.run(k, p)
            depths.append(k)
    return depths


@pytest.mark.parametrize("lag", [0, 1, 2])
def test_turns_off_when_drafts_fail_and_back_on_when_they_recover(lag: int) -> None:
    policy = make_policy("acceptance", probe_interval=32)
    depths = closed_loop(policy, [(0.03, 3000), (0.9, 3000)], lag=lag)
    bad, good = depths[1000:3000], depths[-1500:]
    assert sum(k > 0 for k in bad) / len(bad) < 0.05, "kept speculating with a useless drafter"
    assert all(k > 0 for k in good), "never recovered: probing must bring speculation back"
    assert sum(k > 0 for k in bad) >= len(bad) // 32 - 1, "must probe about once per probe_interval while off"


@pytest.mark.parametrize("lag", [0, 1])
def test_depth_follows_acceptance(lag: int) -> None:
    def mean_depth(p: float) -> float:
        d = closed_loop(make_policy("acceptance", steps=[1, 2, 3, 4, 5, 6]), [(p, 1500)], lag=lag)[500:]
        return sum(d) / len(d)

    high, mid, low = mean_depth(0.97), mean_depth(0.75), mean_depth(0.45)
    assert high > 5.0, high  # nearly every draft accepted: it climbs to the deepest step
    assert high > mid > low > 0, (high, mid, low)


def _perfect_liveness_bound(cfg: dict[str, Any]) -> int:
    """Steps after which a perfect drafter must have turned the policy back on, from the EWMA definition.

    Worst case the EWMA sits at 1.0 (nothing accepted); each probe at depth s0 reports 1 + s0. After n probes
    the EWMA is 1 + s0 * (1 - (1 - alpha)^n), which passes min_accept_length for the n below.
    """
    s0, alpha = cfg["steps"][0], cfg["ewma_alpha"]
    m, interval = cfg["min_accept_length"], cfg["probe_interval"]
    need = (m - 1) / s0
    n = 1 if alpha == 1 else math.ceil(math.log(1 - need) / math.log(1 - alpha)) + 1
    return int((n + 1) * (interval + 3))


_junk_stats = st.builds(
    StepStats.fast,
    st.integers(0, 64) | st.just(math.nan) | st.none(),
    st.just(0),
    st.none(),
    st.integers(0, 5) | st.just(-1) | st.just(math.nan),
    st.none() | st.lists(st.integers(-5, 9) | st.just(math.nan) | st.just(math.inf), max_size=8),
)
_zero_stats = st.builds(
    lambda k: StepStats(8, last_num_steps=k, accepted_draft_tokens=[0] * 8), st.integers(1, 5)
)


@given(
    cfg=st.fixed_dictionaries(
        {
            "steps": st.sampled_from([[1], [1, 2, 3], [2, 4, 8], [3, 5]]),
            "ewma_alpha": st.sampled_from([0.05, 0.2, 0.5, 1.0]),
            "probe_interval": st.integers(1, 50),
            "min_accept_length": st.floats(1.0, 1.95),
        }
    ),
    prefix=st.lists(_junk_stats | _zero_stats, max_size=120),
    lag=st.integers(0, 2),
)
def test_liveness_any_history_then_a_perfect_drafter_turns_it_back_on(
    cfg: dict[str, Any], prefix: list[StepStats], lag: int
) -> None:
    policy = make_policy({"name": "acceptance", **cfg})
    for s in prefix:
        policy.decide(s)
    bound = _perfect_liveness_bound(cfg)
    depths = closed_loop(policy, [(1.0, bound + 100)], lag=lag)
    assert all(k > 0 for k in depths[bound:]), (bound, depths)


def test_probes_exactly_every_interval_while_no_data_returns() -> None:
    p = make_policy("acceptance", probe_interval=5, ewma_alpha=1.0, steps=[2, 3])
    got = [p.decide(StepStats(8, last_num_steps=3, accepted_draft_tokens=[0] * 8)).num_steps]
    got += [p.decide(StepStats(8)).num_steps for _ in range(15)]
    assert got == [0, 0, 0, 0, 2] * 3 + [0]  # one probe, at the smallest step, in every probe_interval steps


def test_steps_without_speculation_are_not_zero_acceptance() -> None:
    p = make_policy("acceptance", initial_steps=3, ewma_alpha=1.0)
    for _ in range(300):  # an adapter bug: zeros reported for steps that did not speculate
        assert p.decide(StepStats.fast(8, last_num_steps=0, accepted_draft_tokens=[0] * 8)) == SpecMode.on(3)
    assert math.isnan(p.estimates()["ewma_accept_length"])  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("acc", "k", "want"),
    [
        ([10, 10], 2, 3.0),  # clipped to the drafted count
        ([math.nan, 2], 2, 3.0),  # NaN ignored
        ([-4, 1, math.inf], 3, 2.0),  # negative and inf ignored
    ],
)
def test_bad_acceptance_values_are_clipped_or_ignored(acc: list[float], k: int, want: float) -> None:
    p = make_policy("acceptance", ewma_alpha=1.0)
    p.decide(StepStats.fast(2, last_num_steps=k, accepted_draft_tokens=acc))  # type: ignore[arg-type]
    assert p.estimates()["ewma_accept_length"] == want  # type: ignore[attr-defined]


def test_precomputed_mean_accepted_is_used() -> None:
    a, b = make_policy("acceptance"), make_policy("acceptance")
    for _ in range(20):
        ma = a.decide(StepStats(64, last_num_steps=4, accepted_draft_tokens=[3] * 32 + [1] * 32))
        mb = b.decide(StepStats(64, last_num_steps=4, mean_accepted=2.0))
        assert ma == mb
    assert a.estimates() == b.estimates()  # type: ignore[attr-defined]


def test_starts_at_the_median_or_initial_step() -> None:
    assert make_policy("acceptance", steps=[1, 2, 3, 4, 5]).decide(StepStats(1)) == SpecMode.on(3)
    assert make_policy("acceptance", steps=[2, 6]).decide(StepStats(1)) == SpecMode.on(2)
    assert make_policy("acceptance", steps=[2, 6], initial_steps=6).decide(StepStats(1)) == SpecMode.on(6)


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"steps": [3, 2]}, "steps"),
        ({"steps": [1, 1]}, "steps"),
        ({"steps": [0, 2]}, "steps.0"),
        ({"steps": [1, 65]}, "steps.1"),
        ({"steps": []}, "steps"),
        ({"initial_steps": 3, "steps": [1, 2]}, "initial_steps"),
        ({"min_accept_length": 2.0}, "min_accept_length"),
        ({"min_accept_length": 0.5}, "min_accept_length"),
        ({"ewma_alpha": 0.0}, "ewma_alpha"),
        ({"ewma_alpha": 1.5}, "ewma_alpha"),
        ({"probe_interval": 0}, "probe_interval"),
        ({"lookahead": -1}, "lookahead"),
    ],
)
def test_bad_configs_name_the_field(overrides: dict[str, Any], field: str) -> None:
    with pytest.raises(ConfigError, match=rf"^acceptance\.{field}: "):
        make_policy("acceptance", **overrides)
