"""The request population: a Beta or a mixture of Betas for acceptance, and the request shape.

The mixture's statistics are checked against what its weights and components imply, by sampling; drawing is
reproducible per seed; a one-component mixture is the plain Beta, draw for draw.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.sim.acceptance import BetaAcceptance, BetaMixture, logit, shifted
from specpolicy.sim.scenario import RequestShape, RequestStream
from specpolicy.sim.workloads import load_workload

params = st.floats(min_value=0.05, max_value=50.0, allow_nan=False)
means = st.floats(min_value=0.02, max_value=0.98, allow_nan=False)
concentrations = st.floats(min_value=0.5, max_value=200.0, allow_nan=False)
weights = st.floats(min_value=0.05, max_value=10.0, allow_nan=False)


class Prof:
    def never_step_s(self, batch_size: float, seq_len: float | None = None) -> float:
        return 0.010

    def prefill_s(self, num_tokens: int) -> float:
        return 0.020


@st.composite
def mixtures(draw: st.DrawFn, max_components: int = 4) -> BetaMixture:
    n = draw(st.integers(min_value=1, max_value=max_components))
    comps = tuple(
        (draw(weights), BetaAcceptance.from_mean(draw(means), draw(concentrations))) for _ in range(n)
    )
    return BetaMixture(comps)


@settings(max_examples=30, deadline=None)
@given(mix=mixtures(), seed=st.integers(0, 2**32 - 1))
def test_the_sampled_mean_matches_the_weighted_component_means(mix: BetaMixture, seed: int) -> None:
    x = mix.draw(np.random.default_rng(seed), 200_000)
    total = sum(w for w, _ in mix.components)
    expected = sum(w / total * c.alpha / (c.alpha + c.beta) for w, c in mix.components)
    # Any variable in [0, 1] has variance <= 1/4: the mean of 200k draws is within 0.0011 per sigma.
    assert float(x.mean()) == pytest.approx(expected, abs=0.008)
    assert mix.mean == pytest.approx(expected, rel=1e-12)


@settings(max_examples=20, deadline=None)
@given(w=st.floats(min_value=0.05, max_value=0.95), seed=st.integers(0, 2**32 - 1))
def test_each_request_belongs_to_a_component_with_its_weight(w: float, seed: int) -> None:
    # Two components that do not overlap (concentration 2000: within +-0.05 of 0.9 and 0.2), so a draw
    # tells which component it came from.
    hi, lo = BetaAcceptance.from_mean(0.9, 2000.0), BetaAcceptance.from_mean(0.2, 2000.0)
    x = BetaMixture(((w, hi), (1.0 - w, lo))).draw(np.random.default_rng(seed), 100_000)
    assert not ((x > 0.35) & (x < 0.75)).any()
    assert float((x > 0.55).mean()) == pytest.approx(w, abs=0.01)


@settings(max_examples=60, deadline=None)
@given(
    comps=st.lists(st.tuples(weights, params, params), min_size=1, max_size=4),
    seed=st.integers(0, 2**32 - 1),
)
def test_every_acceptance_drawn_is_a_probability(comps: list[tuple[float, float, float]], seed: int) -> None:
    mix = BetaMixture(tuple((w, BetaAcceptance(a, b)) for w, a, b in comps))
    x = mix.draw(np.random.default_rng(seed), 5000)
    assert x.shape == (5000,) and np.all((x >= 0.0) & (x <= 1.0))
    stream = RequestStream(seed, RequestShape(), mix)
    assert all(0.0 <= stream.get(i)[2] <= 1.0 for i in range(0, 3000, 7))


@settings(max_examples=25, deadline=None)
@given(
    mix=mixtures(), seed=st.integers(0, 2**31), idx=st.lists(st.integers(0, 5000), min_size=1, max_size=20)
)
def test_the_same_seed_gives_the_same_requests(mix: BetaMixture, seed: int, idx: list[int]) -> None:
    shape = RequestShape(prompt_mean=900, output_mean=100, prompt_spread=0.2, output_spread=0.9)
    a, b = RequestStream(seed, shape, mix), RequestStream(seed, shape, mix)
    # Whatever order the requests are asked for in, request i is the same.
    assert [a.get(i) for i in idx] == [b.get(i) for i in reversed(idx)][::-1]
    other = RequestStream(seed + 1, shape, mix)
    assert [a.get(i) for i in range(50)] != [other.get(i) for i in range(50)]


def test_the_same_seed_gives_the_same_open_loop_requests() -> None:
    mix = BetaMixture(((1.0, BetaAcceptance.from_mean(0.9)), (1.0, BetaAcceptance.from_mean(0.2))))
    runs = [
        load_workload("bursty", profile=Prof(), seed=s, duration_s=60.0, acceptance=mix)[0].requests
        for s in (3, 3, 4)
    ]
    a, b, c = runs
    assert a is not None and b is not None and c is not None
    for field in ("arrival_s", "prompt_tokens", "output_tokens", "acceptance"):
        assert np.array_equal(getattr(a, field), getattr(b, field))
    assert not np.array_equal(a.acceptance[:50], c.acceptance[:50])


@settings(max_examples=40, deadline=None)
@given(a=params, b=params, w=weights, seed=st.integers(0, 2**32 - 1), n=st.integers(1, 3000))
def test_a_one_component_mixture_is_the_plain_beta(a: float, b: float, w: float, seed: int, n: int) -> None:
    beta = BetaAcceptance(a, b)
    mix = BetaMixture(((w, beta),))
    assert np.array_equal(mix.draw(np.random.default_rng(seed), n), beta.draw(np.random.default_rng(seed), n))
    assert mix.mean == pytest.approx(beta.mean, rel=1e-12)
    sa, sb = RequestStream(seed, RequestShape(), mix), RequestStream(seed, RequestShape(), beta)
    assert [sa.get(i) for i in range(0, 2000, 13)] == [sb.get(i) for i in range(0, 2000, 13)]
    if 0.05 < beta.mean < 0.95:
        assert mix.shift_for_mean(0.5) == beta.shift_for_mean(0.5)


@settings(max_examples=15, deadline=None)
@given(mix=mixtures(max_components=3), target=st.floats(min_value=0.1, max_value=0.9))
def test_a_phase_shift_moves_the_mixtures_mean_to_the_target(mix: BetaMixture, target: float) -> None:
    # The quadrature's shift, checked by sampling: shifted draws average to the target.
    x = mix.draw(np.random.default_rng(7), 200_000)
    shifted_mean = float(shifted(logit(x), mix.shift_for_mean(target)).mean())
    assert shifted_mean == pytest.approx(target, abs=0.01)


@settings(max_examples=30, deadline=None)
@given(
    pm=st.integers(1, 20000),
    om=st.integers(1, 4000),
    ps=st.floats(min_value=0.0, max_value=0.99),
    os_=st.floats(min_value=0.0, max_value=0.99),
)
def test_request_lengths_lie_within_the_shapes_spread(pm: int, om: int, ps: float, os_: float) -> None:
    shape = RequestShape(prompt_mean=pm, output_mean=om, prompt_spread=ps, output_spread=os_)
    stream = RequestStream(1, shape, BetaAcceptance())
    got = [stream.get(i) for i in range(400)]
    for prompt, out, _ in got:
        assert max(1, round(pm * (1 - ps))) <= prompt <= max(1, round(pm * (1 + ps)))
        assert max(1, round(om * (1 - os_))) <= out <= max(1, round(om * (1 + os_)))


def test_request_lengths_average_to_the_shapes_means() -> None:
    shape = RequestShape(prompt_mean=8000, output_mean=64, prompt_spread=0.1, output_spread=0.9)
    stream = RequestStream(2, shape, BetaAcceptance())
    prompts, outs, _ = zip(*(stream.get(i) for i in range(20_000)), strict=True)
    assert np.mean(prompts) == pytest.approx(8000, rel=0.005)
    assert np.mean(outs) == pytest.approx(64, rel=0.02)
    assert min(prompts) >= 7200 and max(prompts) <= 8800 and min(outs) >= 6 and max(outs) <= 122


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"prompt_mean": 0}, "prompt_mean"),
        ({"output_mean": 2.5}, "output_mean"),
        ({"prompt_spread": 1.0}, "prompt_spread"),
        ({"output_spread": -0.1}, "output_spread"),
    ],
)
def test_a_bad_shape_is_refused_naming_the_field(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        RequestShape(**kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: BetaAcceptance.from_mean(1.0), "mean"),
        (lambda: BetaAcceptance.from_mean(0.5, 0.0), "concentration"),
        (lambda: BetaMixture(()), "at least one"),
        (lambda: BetaMixture(((0.0, BetaAcceptance()),)), "weight"),
    ],
)
def test_a_bad_acceptance_model_is_refused_naming_the_field(make: object, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        make()  # type: ignore[operator]
