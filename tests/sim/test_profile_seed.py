"""The seed profile reproduces the field report's table (docs/reference/profiles.md) within 10%.

Checked twice: by the steady-state closed loop (no simulator needed) and through the simulator itself, with
``never`` (a speculation-free engine) and the launch configuration (a static chain at the profile's own
acceptance), closed loop at each concurrency on the reference request shape.
"""

from __future__ import annotations

import importlib.util

import pytest

from specpolicy.profiles import load_profile
from specpolicy.sim.steady_state import ClosedLoop, closed_loop_tok_s, expected_tokens_per_step

# concurrency: (EAGLE-3 launch configuration tok/s, speculation-free baseline tok/s), from the field report.
SEED_TABLE = {1: (77.5, 92.6), 10: (239.6, 457.2), 70: (337.7, 784.2), 250: (340.9, 772.1)}
TOLERANCE = 0.10


def test_seed_profile_has_a_fitted_acceptance_and_an_equivalent_chain() -> None:
    p = load_profile("seed-k25-tp8-pcie")
    assert p.acceptance is not None
    # About the accept length reported for this model's EAGLE-3 (~3 tokens per verify).
    assert 2.5 < expected_tokens_per_step(p.acceptance, p.max_steps) < 3.5


@pytest.mark.parametrize("concurrency", sorted(SEED_TABLE))
def test_seed_calibration_steady_state(concurrency: int) -> None:
    p = load_profile("seed-k25-tp8-pcie")
    spec, base = SEED_TABLE[concurrency]
    assert closed_loop_tok_s(p, concurrency, None) == pytest.approx(base, rel=TOLERANCE)
    assert closed_loop_tok_s(p, concurrency, p.max_steps) == pytest.approx(spec, rel=TOLERANCE)


def test_seed_speculation_loses_under_load_at_every_depth() -> None:
    """What the field report found: under load no depth beats the speculation-free engine."""
    p = load_profile("seed-k25-tp8-pcie")
    for c in (10, 70, 250):
        never = closed_loop_tok_s(p, c, None)
        for k in range(0, p.max_steps + 1):
            assert closed_loop_tok_s(p, c, k, acceptance=0.7) < never


def test_steady_state_inverse_round_trips() -> None:
    loop = ClosedLoop()
    for c, tau in ((1, 1.0), (10, 2.5), (250, 3.0)):
        step = loop.required_step_s(500.0, c, tau, 0.01, 1e-4)
        assert loop.throughput(step, c, tau, 0.01, 1e-4) == pytest.approx(500.0)
    with pytest.raises(ValueError, match="unreachable"):
        loop.required_step_s(1e9, 10, 1.0, 0.01, 1e-4)


def test_expected_tokens_per_step() -> None:
    assert expected_tokens_per_step(0.5, 0) == 1.0
    assert expected_tokens_per_step(0.5, 1) == pytest.approx(1.5)
    assert expected_tokens_per_step(0.8, 3) == pytest.approx(1 + 0.8 + 0.64 + 0.512)
    with pytest.raises(ValueError, match="acceptance"):
        expected_tokens_per_step(1.0, 3)


_HAS_ENGINE = importlib.util.find_spec("specpolicy.sim.engine") is not None
# Simulated seconds per level: enough steps for the closed loop to forget its synchronised start.
_DURATION_S = {1: 200.0, 10: 300.0, 70: 600.0, 250: 900.0}


@pytest.mark.skipif(not _HAS_ENGINE, reason="the simulator engine is not available")
@pytest.mark.parametrize("concurrency", sorted(SEED_TABLE))
def test_seed_calibration_through_the_simulator(concurrency: int) -> None:
    from specpolicy.sim.acceptance import BetaAcceptance
    from specpolicy.sim.engine import EngineConfig, simulate
    from specpolicy.sim.scenario import Scenario

    p = load_profile("seed-k25-tp8-pcie")
    a = p.acceptance
    assert a is not None
    k = p.max_steps
    scenario = Scenario(
        "sweep",
        _DURATION_S[concurrency],
        concurrency=concurrency,
        closed_loop=((0.0, concurrency),),
        acceptance=BetaAcceptance(a * 1e6, (1 - a) * 1e6),  # every request at the profile's acceptance
    )
    never = simulate(scenario, p, None, EngineConfig(speculative=False))
    launch = simulate(scenario, p, lambda *_: k, EngineConfig())
    spec, base = SEED_TABLE[concurrency]
    assert never.output_tok_s == pytest.approx(base, rel=TOLERANCE)
    assert launch.output_tok_s == pytest.approx(spec, rel=TOLERANCE)
    assert launch.spec_step_share == 1.0
