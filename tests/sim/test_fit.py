"""``profile fit``: a trace simulated from a known profile, with noise and outliers, recovers that profile."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpolicy.profiles import CostProfile, ProfileError, load_profile, profile_from_dict
from specpolicy.sim.fit import FitOptions, estimate_acceptance, fit_profile, fit_trace_files, synthetic_trace
from specpolicy.trace import TraceRecord

# Stated tolerance: every fitted step time within 5% of the true one inside the traced range (batch
# sizes, context lengths between the 10th and 90th percentile), with 3% log-normal noise and 3% outliers.
TOLERANCE = 0.05


@pytest.fixture(scope="module")
def truth() -> CostProfile:
    return load_profile("h200-llama8b")


@pytest.fixture(scope="module")
def fitted(truth: CostProfile) -> tuple[CostProfile, object]:
    res = fit_profile(synthetic_trace(truth), FitOptions(name="fit-8b"))
    return profile_from_dict(res.profile), res


def test_fit_recovers_step_times_within_tolerance(
    truth: CostProfile, fitted: tuple[CostProfile, object]
) -> None:
    p, _ = fitted
    assert p.max_steps == 7
    worst = 0.0
    for b in (1, 2, 5, 16, 40, 64, 100, 128, 200, 256):
        for s in (1400.0, 2500.0, 3700.0):
            for k in range(0, 8):
                err = abs(p.step_time_s(b, k, s) / truth.step_time_s(b, k, s) - 1)
                worst = max(worst, err)
    assert worst < TOLERANCE


def test_fit_reports_rejected_outliers_and_residuals(fitted: tuple[CostProfile, object]) -> None:
    from specpolicy.sim.fit import FitResult

    _, res = fitted
    assert isinstance(res, FitResult)
    assert [d.num_steps for d in res.depths] == list(range(8))
    total = sum(d.used + d.rejected for d in res.depths)
    rejected = sum(d.rejected for d in res.depths)
    assert total == 6000
    # ~3% outliers were injected (x1.5-4): most are caught, few good steps are thrown away.
    assert 0.02 * total < rejected < 0.06 * total
    for d in res.depths:
        assert d.rel_rms < 0.045  # the injected noise is 3%
    assert res.batch_range[0] == 1 and res.batch_range[1] <= 256


def test_fit_estimates_the_acceptance(fitted: tuple[CostProfile, object]) -> None:
    p, _ = fitted
    assert p.acceptance == pytest.approx(0.7, abs=0.01)


def test_fit_extrapolation_is_flagged(fitted: tuple[CostProfile, object]) -> None:
    p, _ = fitted
    assert not p.is_extrapolated(100, 2500.0)
    assert p.is_extrapolated(1000, 2500.0)


def test_fit_on_a_narrow_context_makes_one_grid(truth: CostProfile) -> None:
    recs = synthetic_trace(truth, n=2000, depths=(0, 3), seq=(1500.0, 1600.0), max_batch=64, seed=3)
    res = fit_profile(recs)
    p = profile_from_dict(res.profile)
    assert len(p.seq_lens) == 1 and p.max_steps == 3
    for b in (1, 8, 32, 64):
        for k in (0, 3):
            assert p.step_time_s(b, k, 1550.0) == pytest.approx(
                truth.step_time_s(b, k, 1550.0), rel=TOLERANCE
            )
    # Depths between the traced ones are interpolated: a k=1 step costs between k=0 and k=3.
    assert p.step_time_s(16, 0) < p.step_time_s(16, 1) < p.step_time_s(16, 3)


def test_fit_of_a_moe_profile(truth: CostProfile) -> None:
    moe = load_profile("moe-verify-heavy")
    res = fit_profile(synthetic_trace(moe, n=4000, seq=(1024.0, 4096.0), max_batch=128, seed=5))
    p = profile_from_dict(res.profile)
    for b in (1, 4, 32, 128):
        for k in (0, 2, 5, 7):
            assert p.step_time_s(b, k, 2000.0) == pytest.approx(moe.step_time_s(b, k, 2000.0), rel=TOLERANCE)


def test_fit_needs_off_and_spec_steps(truth: CostProfile) -> None:
    with pytest.raises(ProfileError, match="depth 0") as exc:
        fit_profile(synthetic_trace(truth, n=200, depths=(3,)))
    assert "3: 200" in str(exc.value)
    with pytest.raises(ProfileError, match="no step records"):
        fit_profile([])
    untimed = [TraceRecord(step=i, batch_size=4, num_steps=0) for i in range(50)]
    with pytest.raises(ProfileError, match="no timed steps"):
        fit_profile(untimed)


def test_fit_uses_one_rank(truth: CostProfile) -> None:
    recs = synthetic_trace(truth, n=1500, depths=(0, 2), max_batch=32, seed=7)
    # Rank 1 wrote garbage times: the default (lowest rank) ignores it.
    noisy = [
        TraceRecord(
            step=r.step,
            batch_size=r.batch_size,
            num_steps=r.num_steps,
            step_time_s=1.0,
            rank=1,
            mean_seq_len=r.mean_seq_len,
        )
        for r in recs
    ]
    p = profile_from_dict(fit_profile(recs + noisy).profile)
    assert p.step_time_s(8, 2, 2000.0) == pytest.approx(truth.step_time_s(8, 2, 2000.0), rel=TOLERANCE)


def test_estimate_acceptance_counts_early_stops() -> None:
    recs = [
        TraceRecord(step=0, batch_size=3, num_steps=3, last_num_steps=3, accepted_draft_tokens=[3, 1, 0]),
        TraceRecord(
            step=1, batch_size=1, num_steps=3, last_num_steps=0, accepted_draft_tokens=[2]
        ),  # ignored
    ]
    # 4 accepted drafts; chains that stopped early: the 1 and the 0 -> 4 / (4 + 2)
    assert estimate_acceptance(recs) == pytest.approx(4 / 6)
    assert estimate_acceptance(recs[1:]) is None


def test_fit_options_are_checked() -> None:
    with pytest.raises(ValueError, match="draft_share"):
        FitOptions(draft_share=0.9)
    with pytest.raises(ValueError, match="min_steps_per_depth"):
        FitOptions(min_steps_per_depth=1)


def test_fit_trace_files_reads_headers_and_parts(truth: CostProfile, tmp_path: Path) -> None:
    recs = synthetic_trace(truth, n=1200, depths=(0, 1, 3), max_batch=64, seed=9)
    a, b = tmp_path / "trace.jsonl", tmp_path / "trace.1.jsonl"
    header = {"kind": "header", "format": "specpolicy-trace/1", "engine": "sglang", "version": "0.5.23"}
    a.write_text(json.dumps(header) + "\n" + "\n".join(r.to_json() for r in recs[:600]) + "\n")
    b.write_text("\n".join(r.to_json() for r in recs[600:]) + "\n")
    res = fit_trace_files([a, b], FitOptions(name="mine"))
    assert res.profile["name"] == "mine"
    assert "sglang 0.5.23" in res.profile["source"]
    assert sum(d.used + d.rejected for d in res.depths) == 1200


def test_fit_without_context_or_batch_spread(truth: CostProfile) -> None:
    """A trace at one batch size and without mean_seq_len still fits, and says what it could not model."""
    recs = [
        TraceRecord(
            step=r.step, batch_size=8, num_steps=r.num_steps, step_time_s=truth.step_time_s(8, r.num_steps)
        )
        for r in synthetic_trace(truth, n=300, depths=(0, 3), seed=13)
    ]
    res = fit_profile(recs)
    p = profile_from_dict(res.profile)
    assert any("no mean_seq_len" in n for n in res.notes)
    assert p.step_time_s(8, 3) == pytest.approx(truth.step_time_s(8, 3), rel=1e-3)
    assert p.is_extrapolated(9) and not p.is_extrapolated(8)
    # Prefill from the one measured point: the verify's mean cost per token, an upper bound.
    assert p.prefill_per_token_s == pytest.approx(p.target_s(8, 4) / 32)
