"""cost_model with a profile that is wrong: the prior weighs a bounded number of pseudo-observations per cost
cell, measured step times override it, and the mismatch is reported once (log and ``estimates()``)."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import StepStats, make_policy
from specpolicy.policies.cost_model import make_cost_model
from specpolicy.policies.cost_model.costs import StepCosts
from specpolicy.policies.cost_model.table import BucketGrid
from tests.test_cost_model import Engine, best_depth, compute_bound, memory_bound, mode_of

ARMS = (0, 1, 2, 3, 4, 5, 6, 7)


class TableCost:
    """A StepCostModel from a function of (batch, depth)."""

    def __init__(self, fn: object) -> None:
        self.fn = fn

    def step_time_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float:
        return self.fn(int(batch_size), num_steps)  # type: ignore[operator, no-any-return]


def spec_scaled(fn: object, factor: float) -> object:
    """``fn`` with every speculative step (depth > 0) ``factor`` times dearer: the deployment's truth."""

    def scaled(batch: int, k: int) -> float:
        return fn(batch, k) * (factor if k > 0 else 1.0)  # type: ignore[operator, no-any-return]

    return scaled


def moderate(batch: int, k: int) -> float:
    """A deployment where speculation pays moderately at batch 64 (best depth 2-3 at acceptance 0.7)."""
    return 0.010 * (1.0 + 0.12 * k) + 0.0002 * batch * (1 + 0.1 * k)


# -- the case: a profile whose speculative steps are 3x too cheap ---------------------------------
def test_premise_the_prior_says_speculate_the_truth_says_off() -> None:
    truth = spec_scaled(moderate, 3.0)
    assert best_depth(moderate, 0.7, 64, range(8)) >= 2
    assert best_depth(truth, 0.7, 64, range(8)) == 0  # type: ignore[arg-type]


@pytest.mark.parametrize("lag", [1, 2])
def test_wrong_prior_is_overridden_by_measurements(lag: int) -> None:
    truth = spec_scaled(moderate, 3.0)
    policy = make_cost_model(TableCost(moderate))
    engine = Engine(truth, acceptance=0.7, batch=64, lag=lag)  # type: ignore[arg-type]
    engine.run(policy, 300)  # learning: the first probes of off, the mismatch
    tokens, elapsed = engine.tokens, engine.elapsed
    tail = engine.run(policy, 1500)
    assert mode_of(tail) == 0
    assert sum(d == 0 for d in tail) / len(tail) > 0.97
    static = Engine(truth, acceptance=0.7, batch=64, lag=lag)  # type: ignore[arg-type]
    for _ in range(1500):
        static.run_step(0)
    rate = (engine.tokens - tokens) / (engine.elapsed - elapsed)
    assert rate >= 0.99 * static.tokens / static.elapsed


# -- the mirror case: a profile whose speculative steps are too dear ----------------------------------------
@settings(max_examples=20, deadline=None)
@given(st.floats(2.0, 10.0), st.sampled_from([8, 64, 128]), st.sampled_from([1, 2]))
def test_a_prior_that_says_off_wrongly_is_found_out_within_a_few_steps(
    factor: float, batch: int, lag: int
) -> None:
    """The profile prices speculation ``factor`` times dearer than the deployment runs it: it says off, the
    truth says speculate (nearly 2x the tokens/s at batch 64). Off, the one kind run, is measured as the
    profile says, so nothing it measures shows the profile wrong: only a probe of speculation does, and it
    comes within ``update_interval`` steps (not after the ordinary exploration of a clear loser, up to
    ``max_probe_interval`` times its price)."""
    prior = spec_scaled(moderate, factor)
    assert best_depth(prior, 0.7, batch, range(8)) == 0  # type: ignore[arg-type]
    assert best_depth(moderate, 0.7, batch, range(8)) >= 2  # the premise
    policy = make_cost_model(TableCost(prior))
    engine = Engine(moderate, acceptance=0.7, batch=batch, lag=lag)
    depths = engine.run(policy, 64 + 256)
    assert depths[0] == 0  # it starts off, as the profile says
    assert sum(d > 0 for d in depths[64:]) / 256 > 0.97, depths
    assert policy.estimates()["prior_mismatch"] == 1.0


def test_mismatch_is_reported_once_in_log_and_estimates(caplog: pytest.LogCaptureFixture) -> None:
    policy = make_cost_model(TableCost(moderate))
    assert policy.estimates()["prior_mismatch"] == 0.0
    engine = Engine(spec_scaled(moderate, 3.0), acceptance=0.7, batch=64)  # type: ignore[arg-type]
    with caplog.at_level(logging.WARNING, logger="specpolicy.policy"):
        engine.run(policy, 600)
        engine.batch = 8  # another bucket: the mismatch is not reported again
        engine.run(policy, 600)
    warnings = [r for r in caplog.records if "does not match" in r.getMessage()]
    assert len(warnings) == 1
    est = policy.estimates()
    assert est["prior_mismatch"] == 1.0
    assert 2.0 < est["prior_mismatch_ratio"] < 4.0  # measured/profile spread: 3x, seen through jitter


@pytest.mark.parametrize(
    ("fn", "batch", "p"), [(moderate, 64, 0.7), (memory_bound, 4, 0.8), (compute_bound, 128, 0.7)]
)
def test_a_right_prior_is_not_called_wrong(fn: object, batch: int, p: float) -> None:
    policy = make_cost_model(TableCost(fn))
    engine = Engine(fn, acceptance=p, batch=batch)  # type: ignore[arg-type]
    tail = engine.run(policy, 2000)[-1000:]
    assert policy.estimates()["prior_mismatch"] == 0.0
    assert mode_of(tail) == best_depth(fn, p, batch, range(8))  # type: ignore[arg-type]


def test_a_uniformly_slower_machine_is_not_a_mismatch() -> None:
    """A profile from a 2x faster machine has the right shape: corrections are all ~2, not a mismatch."""
    policy = make_cost_model(TableCost(moderate))
    engine = Engine(lambda b, k: 2.0 * moderate(b, k), acceptance=0.7, batch=64)
    tail = engine.run(policy, 2000)[-1000:]
    assert policy.estimates()["prior_mismatch"] == 0.0
    assert mode_of(tail) == best_depth(moderate, 0.7, 64, range(8))


def _spec3x_profile(tmp_path: Path) -> Path:
    """The shipped h200-llama8b profile with every speculative cycle's parts (verify of 2+ tokens, draft
    steps, cycle overhead) 3x dearer; the off step keeps its plain forward pass."""
    profile_mod = pytest.importorskip("specpolicy.profiles")
    if "h200-llama8b" not in profile_mod.available_profiles():
        pytest.skip("h200-llama8b not shipped in this checkout")
    doc = profile_mod.load_profile("h200-llama8b").to_dict()
    doc["name"] = "h200-llama8b-spec3x"
    for g in doc["grids"]:
        g["target"] = [[v if j == 0 else 3 * v for j, v in enumerate(row)] for row in g["target"]]
        g["draft"] = [3 * v for v in g["draft"]]
    doc["overhead"]["spec"] = {k: 3 * v for k, v in doc["overhead"]["spec"].items()}
    path = tmp_path / "spec3x.json"
    path.write_text(json.dumps(doc))
    return path


def test_shipped_h200_prior_on_a_3x_dearer_deployment(tmp_path: Path) -> None:
    """The issue's case in the simulator: the shipped H200 profile as the prior, speculation 3x dearer than
    it says, concurrency 64 (off is best): within 1% of the best fixed depth."""
    run_mod = pytest.importorskip("specpolicy.sim.run")
    path = _spec3x_profile(tmp_path)
    spec = run_mod.SimulationSpec(
        profile=str(path),
        workload="sweep",
        concurrency=(64,),
        duration_s=30.0,
        decide_cost_us=1.5,
        jobs=1,
        policies=({"name": "cost_model", "profile": "h200-llama8b"},),
    )
    sim = run_mod.run_simulation(spec, progress=False)
    tok = {o.comparator.label: o.result.output_tokens / o.result.window_s for o in sim.outcomes}
    best_static = max(v for label, v in tok.items() if label.startswith("static-"))
    assert tok["static-0"] == best_static  # the premise: off is the best fixed depth here
    learned = next(v for label, v in tok.items() if label.startswith("cost_model"))
    assert learned >= 0.99 * best_static


# -- the bound on the prior's weight -----------------------------------------------------------------------
@given(
    st.floats(0.05, 20.0),  # how wrong the profile's speculative steps are (truth / profile)
    st.floats(0.1, 10.0),  # how wrong its overall level is
    st.floats(0.0, 16.0),  # prior_weight
    st.integers(1, 7),  # the measured speculative depth
    st.sampled_from([1, 8, 64, 300]),
)
def test_enough_measurements_override_any_prior(
    spec_factor: float, level: float, prior_weight: float, k: int, batch: int
) -> None:
    """With m measured steps in a cell, its estimate is within prior_weight / (prior_weight + m) of the
    measurement, whatever the profile claims: here m = 19 * prior_weight + 1 steps, so within 5%."""
    costs = StepCosts(BucketGrid(4), ARMS, 256.0, TableCost(moderate), prior_weight=prior_weight)
    truth = spec_scaled(lambda b, kk: level * moderate(b, kk), spec_factor)
    steps = int(19 * prior_weight) + 1
    step = 0
    for depth, n in ((0, 400), (k, steps)):  # the running depth (off), then the measured one
        for _ in range(n):
            step += 1
            costs.add(batch, ARMS.index(depth), None, truth(batch, depth), step, 1)  # type: ignore[operator]
    b = costs.grid.index[batch]
    rep = round(costs.grid.rep[b])  # the batch size the bucket is priced at
    times, _ = costs.predict(b, None, 0, True)
    for depth in (0, k):
        measured = truth(rep, depth)  # type: ignore[operator]
        assert math.isclose(times[ARMS.index(depth)], measured, rel_tol=0.05 + 1e-9), (depth, times)


@given(st.floats(0.05, 20.0), st.floats(0.0, 16.0))
def test_the_prior_moves_a_single_measurement_by_a_bounded_factor(spec_factor: float, w0: float) -> None:
    """One measured step against a profile wrong by any factor: the estimate is within 2x of the measurement
    (the claim is clipped to 2x) and between the two."""
    costs = StepCosts(BucketGrid(4), ARMS, 256.0, TableCost(moderate), prior_weight=w0)
    truth = spec_scaled(moderate, spec_factor)
    for step in range(1, 200):
        costs.add(64, 0, None, truth(64, 0), step, 1)  # type: ignore[operator]
    costs.add(64, 3, None, truth(64, 3), 200, 1)  # type: ignore[operator]
    b = costs.grid.index[64]
    times, _ = costs.predict(b, None, 0, True)
    measured = truth(round(costs.grid.rep[b]), 3)  # type: ignore[operator]
    est = times[3]
    assert measured / 2.0 <= est * (1 + 1e-9) and est <= 2.0 * measured * (1 + 1e-9)
    claimed = moderate(round(costs.grid.rep[b]), 3)  # the profile's own time (off measured as it says)
    assert min(measured, claimed) * (1 - 1e-9) <= est <= max(measured, claimed) * (1 + 1e-9)


# -- configuration -----------------------------------------------------------------------------------------
def test_prior_weight_zero_uses_measurements_alone() -> None:
    policy = make_policy({"name": "cost_model", "prior_weight": 0})
    assert policy.decide(StepStats(4)).num_steps in ARMS
