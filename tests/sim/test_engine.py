"""The simulated engine: conservation, determinism, timing arithmetic, feedback timing, the oracle."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats
from specpolicy.sim.comparators import (
    Comparator,
    OracleDecider,
    PolicyDecider,
    build_decider,
    default_comparators,
)
from specpolicy.sim.engine import EngineConfig, simulate
from specpolicy.sim.scenario import Requests, Scenario
from specpolicy.sim.workloads import load_workload


@dataclasses.dataclass(frozen=True)
class LinearProfile:
    """An analytic profile: target(B, q) = base + slope * B * q; draft = d0 + d1 * B; constant overheads.

    Small batches are memory-bound (deep speculation pays), large ones compute-bound (it does not), so the
    best static depth changes with load.
    """

    max_steps: int = 4
    off_cost: Literal["catch_up", "lazy"] = "catch_up"
    base: float = 5e-3
    slope: float = 40e-6
    d0: float = 0.3e-3
    d1: float = 2e-6
    overhead: float = 0.2e-3
    prefill_per_token: float = 1e-6

    def target_s(self, b: float, q: int) -> float:
        return self.base + self.slope * b * q

    def draft_s(self, b: float) -> float:
        return self.d0 + self.d1 * b

    def step_time_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float:
        if num_steps > 0:
            return (
                num_steps * self.draft_s(batch_size)
                + self.target_s(batch_size, num_steps + 1)
                + self.overhead
            )
        t = self.target_s(batch_size, 1) + self.overhead
        return t + self.draft_s(batch_size) if self.off_cost == "catch_up" else t

    def never_step_s(self, batch_size: float, seq_len: float | None = None) -> float:
        return self.target_s(batch_size, 1)

    def catch_up_s(self, batch_size: float, num_tokens: int = 1, seq_len: float | None = None) -> float:
        return self.draft_s(batch_size * num_tokens)

    def prefill_s(self, num_tokens: int) -> float:
        return self.base + self.prefill_per_token * num_tokens

    def is_extrapolated(self, batch_size: float, seq_len: float | None = None) -> bool:
        return batch_size > 512


class Recorder:
    """A policy that replays a depth pattern and records every StepStats it sees."""

    def __init__(self, pattern: list[int]) -> None:
        self.pattern = pattern
        self.seen: list[StepStats] = []

    def decide(self, stats: StepStats) -> SpecMode:
        self.seen.append(stats)
        return SpecMode.of(self.pattern[(len(self.seen) - 1) % len(self.pattern)])

    def reset(self) -> None:
        self.seen.clear()


def _requests(n: int, out: int | list[int], acceptance: float | None = None, gap: float = 0.0) -> Requests:
    outs = np.asarray(out if isinstance(out, list) else [out] * n, dtype=np.int64)
    return Requests(
        np.arange(n, dtype=np.float64) * gap,
        np.full(n, 100, dtype=np.int64),
        outs,
        np.full(n, math.nan if acceptance is None else acceptance),
    )


def _drain(reqs: Requests) -> Scenario:
    return Scenario("file", 1.0, requests=reqs, drain=True)


PROFILE = LinearProfile()


# -- conservation --------------------------------------------------------------------------------------------
def _all_comparators() -> list[Comparator]:
    return default_comparators(PROFILE.max_steps)[0]


@pytest.mark.parametrize("comp", _all_comparators(), ids=lambda c: c.label)
def test_every_request_gets_exactly_its_output_tokens(comp: Comparator) -> None:
    rng = np.random.default_rng(3)
    outs = [int(x) for x in rng.integers(1, 60, size=40)]
    reqs = _requests(40, outs, gap=0.004)
    res = simulate(
        _drain(reqs),
        PROFILE,
        build_decider(comp, PROFILE),
        EngineConfig(speculative=comp.kind != "never", max_running=16),
        track_requests=True,
    )
    assert sorted(res.emitted_per_request) == list(range(40)), "a request was lost or duplicated"
    for rid, (emitted, owed) in res.emitted_per_request.items():
        assert emitted == owed == outs[rid], (rid, emitted, owed)
    assert res.output_tokens == sum(outs)
    assert res.requests_completed == 40


def test_conservation_under_a_policy_that_switches_every_step() -> None:
    rec = Recorder([0, 4, 1, 0, 3, 2])
    outs = [1, 2, 3, 17, 64, 5, 200, 9]
    res = simulate(
        _drain(_requests(8, outs, acceptance=0.95)),
        PROFILE,
        PolicyDecider(rec),
        EngineConfig(max_running=3),
        track_requests=True,
    )
    assert {r: e for r, (e, _) in res.emitted_per_request.items()} == dict(enumerate(outs))
    assert res.switches > 0


@settings(max_examples=40, deadline=None)
@given(
    pattern=st.lists(st.integers(0, 9), min_size=1, max_size=12),
    outs=st.lists(st.integers(1, 40), min_size=1, max_size=12),
    acceptance=st.floats(0.0, 1.0),
    max_running=st.integers(1, 6),
    lag=st.integers(0, 1),
    off_cost=st.sampled_from(["catch_up", "lazy"]),
)
def test_conservation_holds_for_any_depth_sequence(
    pattern: list[int],
    outs: list[int],
    acceptance: float,
    max_running: int,
    lag: int,
    off_cost: Literal["catch_up", "lazy"],
) -> None:
    prof = dataclasses.replace(PROFILE, off_cost=off_cost)
    rec = Recorder(pattern)
    res = simulate(
        _drain(_requests(len(outs), outs, acceptance=acceptance, gap=0.003)),
        prof,
        PolicyDecider(rec),
        EngineConfig(max_running=max_running, feedback_lag=lag),
        track_requests=True,
    )
    assert {r: e for r, (e, _) in res.emitted_per_request.items()} == dict(enumerate(outs))
    assert res.output_tokens == sum(outs)
    assert all(1 <= s.batch_size <= max_running for s in rec.seen)
    # Every decode step emits at least one token per running request, so steps are bounded by the outputs.
    assert res.decode_steps <= sum(outs)


def test_closed_loop_conservation_after_drain() -> None:
    sc = dataclasses.replace(load_workload("transition", profile=PROFILE, duration_s=5.0)[0], drain=True)
    res = simulate(sc, PROFILE, OracleDecider(PROFILE), EngineConfig(), track_requests=True)
    assert len(res.emitted_per_request) == res.requests_created
    assert all(e == o for e, o in res.emitted_per_request.values())


# -- determinism ---------------------------------------------------------------------------------------------
def _summary(res: object) -> str:
    d = {k: v for k, v in vars(res).items() if k not in ("wall_s", "emitted_per_request", "timeline")}
    return json.dumps({k: (v.tolist() if hasattr(v, "tolist") else v) for k, v in d.items()}, sort_keys=True)


def test_same_seed_same_numbers_different_seed_different_numbers() -> None:
    def run(seed: int) -> str:
        sc = load_workload("sweep", profile=PROFILE, seed=seed, duration_s=4.0, concurrency=[24])[0]
        comp = Comparator("acceptance", "policy", {"name": "acceptance"})
        return _summary(
            simulate(sc, PROFILE, build_decider(comp, PROFILE), EngineConfig(seed=seed, decide_cost_s=1e-6))
        )

    assert run(7) == run(7)
    assert run(7) != run(8)


# -- step timing ---------------------------------------------------------------------------------------------
def test_step_time_is_the_profile_cost_plus_the_decide_charge() -> None:
    # Acceptance 0: every step emits exactly one token, so the step count is known: out - 1 decode steps.
    charge = 3e-6
    for k in (0, 1, 3):
        rec = Recorder([k])
        res = simulate(
            _drain(_requests(1, 11, acceptance=0.0)),
            PROFILE,
            PolicyDecider(rec),
            EngineConfig(decide_cost_s=charge, jitter=0.0),
        )
        expected = PROFILE.prefill_s(100) + 10 * (PROFILE.step_time_s(1, k) + charge)
        assert res.sim_end_s == pytest.approx(expected, rel=1e-12)
        assert res.decode_steps == 10


def test_never_engine_pays_no_draft_and_no_decide_charge() -> None:
    res = simulate(
        _drain(_requests(1, 11)),
        PROFILE,
        None,
        EngineConfig(speculative=False, decide_cost_s=1.0, jitter=0.0),
    )
    assert res.sim_end_s == pytest.approx(PROFILE.prefill_s(100) + 10 * PROFILE.never_step_s(1))
    assert res.spec_steps == 0


def test_lazy_off_cost_charges_the_missed_tokens_on_re_enable() -> None:
    lazy = dataclasses.replace(PROFILE, off_cost="lazy")
    rec = Recorder([0, 0, 0, 2])  # three off steps, then one speculative step: repeat
    res = simulate(
        _drain(_requests(1, 9, acceptance=0.0)), lazy, PolicyDecider(rec), EngineConfig(jitter=0.0)
    )
    # 8 decode steps: off, off, off, on(+catch-up of 3 tokens), off, off, off, on(+3).
    expected = (
        lazy.prefill_s(100)
        + 6 * lazy.step_time_s(1, 0)
        + 2 * (lazy.step_time_s(1, 2) + lazy.catch_up_s(1, 3))
    )
    assert res.sim_end_s == pytest.approx(expected, rel=1e-12)
    # catch_up: every off step pays one draft pass instead, and re-enabling pays nothing extra.
    rec2 = Recorder([0, 0, 0, 2])
    res2 = simulate(
        _drain(_requests(1, 9, acceptance=0.0)), PROFILE, PolicyDecider(rec2), EngineConfig(jitter=0.0)
    )
    assert res2.sim_end_s == pytest.approx(
        PROFILE.prefill_s(100) + 6 * PROFILE.step_time_s(1, 0) + 2 * PROFILE.step_time_s(1, 2), rel=1e-12
    )


def test_depths_beyond_the_profile_are_clamped_and_counted() -> None:
    res = simulate(
        _drain(_requests(2, 30, acceptance=1.0)), PROFILE, PolicyDecider(Recorder([9])), EngineConfig()
    )
    assert res.clamped_steps == res.decode_steps > 0
    # Acceptance 1 at the clamped depth 4: 5 tokens per step, 29 tokens after the first -> 6 steps.
    assert res.decode_steps == 6


def test_a_raising_policy_is_contained_and_reported() -> None:
    class Boom:
        def decide(self, stats: StepStats) -> SpecMode:
            raise RuntimeError("boom")

        def reset(self) -> None:
            pass

    res = simulate(
        _drain(_requests(3, 5)), PROFILE, PolicyDecider(Boom()), EngineConfig(), track_requests=True
    )
    assert res.policy_errors == res.decode_steps > 0
    assert res.first_error == "RuntimeError: boom"
    assert all(e == o for e, o in res.emitted_per_request.values())


# -- what the policy sees ------------------------------------------------------------------------------------
@pytest.mark.parametrize("lag", [0, 1])
def test_stats_describe_the_step_the_feedback_lag_says(lag: int) -> None:
    pattern = [3, 0, 2, 1, 0, 4]
    rec = Recorder(pattern)
    sc = load_workload("sweep", profile=PROFILE, duration_s=2.0, concurrency=[12])[0]
    simulate(sc, PROFILE, PolicyDecider(rec), EngineConfig(feedback_lag=lag))
    seen = rec.seen
    assert len(seen) > 20
    for i, stats in enumerate(seen):
        src = i - 1 - lag
        want = pattern[src % len(pattern)] if src >= 0 else 0
        assert stats.last_num_steps == want, (i, stats)
        if want == 0:
            assert stats.accepted_draft_tokens is None and stats.mean_accepted is None
        else:
            acc = stats.accepted_draft_tokens
            assert acc is not None and all(0 <= a <= want for a in acc)
            assert stats.mean_accepted == pytest.approx(sum(acc) / len(acc))
        assert 1 <= stats.batch_size <= 12
        assert stats.mean_seq_len is not None and stats.mean_seq_len > 100
        if src >= 0:
            assert stats.last_step_time_s is not None and stats.last_step_time_s > 0


@pytest.mark.parametrize("lag", [0, 1])
def test_stats_name_the_described_decision_as_the_adapters_do(lag: int) -> None:
    """The fields that say which decision an outcome describes (its batch size, the depth decided for it,
    its context length) come from that decision, as every adapter's do: the simulator goes through the
    same controller. Depth 9 is beyond the profile's 4: decided 9, ran 4, and both are said."""
    pattern = [3, 9, 0, 2]
    rec = Recorder(pattern)
    outs = [20, 40, 60, 80, 100, 120] * 2  # requests finish one after another: the batch shrinks
    simulate(_drain(_requests(len(outs), outs)), PROFILE, PolicyDecider(rec), EngineConfig(feedback_lag=lag))
    seen = rec.seen
    assert len(seen) > 20 and len({s.batch_size for s in seen}) > 3
    for i, stats in enumerate(seen):
        src = i - 1 - lag
        if src < 0:
            assert stats.last_batch_size is None and stats.last_decided_steps is None
            assert stats.last_mean_seq_len is None
            continue
        described = seen[src]
        assert stats.last_batch_size == described.batch_size
        assert stats.last_decided_steps == pattern[src % len(pattern)]
        assert stats.last_num_steps == min(pattern[src % len(pattern)], PROFILE.max_steps)
        assert stats.last_mean_seq_len == described.mean_seq_len
    # the coming step's context would not do: it differs from the described one's
    assert sum(s.last_mean_seq_len != s.mean_seq_len for s in seen[lag + 1 :]) > len(seen) // 2


def test_batch_never_exceeds_max_running_and_the_rest_wait() -> None:
    rec = Recorder([2])
    sc = load_workload("sweep", profile=PROFILE, duration_s=2.0, concurrency=[40])[0]
    simulate(sc, PROFILE, PolicyDecider(rec), EngineConfig(max_running=16))
    assert max(s.batch_size for s in rec.seen) == 16
    assert max(s.num_waiting for s in rec.seen) > 0


def test_acceptance_phases_change_realised_acceptance() -> None:
    sc = load_workload("transition", profile=PROFILE, duration_s=240.0)[0]
    high = Scenario("hi", 8.0, closed_loop=((0.0, 32),), acceptance_phases=((0.0, 0.85),), prewarmed=True)
    low = Scenario("lo", 8.0, closed_loop=((0.0, 32),), acceptance_phases=((0.0, 0.35),), prewarmed=True)
    cfg = EngineConfig()
    r_hi = simulate(high, PROFILE, PolicyDecider(Recorder([4])), cfg)
    r_lo = simulate(low, PROFILE, PolicyDecider(Recorder([4])), cfg)
    assert r_hi.mean_accept_len is not None and r_lo.mean_accept_len is not None
    # Chain of 4 at per-token acceptance a: 1 + a + a^2 + a^3 + a^4 for a single request; the population is
    # spread around the phase mean, so only the ordering and a broad band are asserted.
    assert r_hi.mean_accept_len > 3.0 > 1.8 > r_lo.mean_accept_len
    assert [m for _, m in sc.acceptance_phases] == [0.85, 0.35, 0.85, 0.35]


# -- the oracle ----------------------------------------------------------------------------------------------
def test_oracle_is_not_beaten_on_stationary_sweeps() -> None:
    sc_all = load_workload("sweep", profile=PROFILE, duration_s=6.0, concurrency=[1, 16, 96])
    comps, _ = default_comparators(PROFILE.max_steps)
    for sc in sc_all:
        tok = {}
        for comp in comps:
            if comp.kind == "sglang":
                continue
            res = simulate(
                sc, PROFILE, build_decider(comp, PROFILE), EngineConfig(speculative=comp.kind != "never")
            )
            tok[comp.label] = res.output_tok_s
        best_other = max(v for k, v in tok.items() if k != "oracle")
        assert tok["oracle"] >= 0.99 * best_other, (sc.concurrency, tok)


def test_oracle_picks_the_depth_with_the_best_expected_rate() -> None:
    oracle = OracleDecider(PROFILE)
    stats = StepStats(4)
    # Everyone accepts everything: deepest wins at batch 4 (memory-bound); nobody accepts: off wins.
    rem = np.full(4, 100, dtype=np.int64)
    assert oracle(stats, np.full(4, 1.0 - 1e-12), rem, 500.0) == PROFILE.max_steps
    assert oracle(stats, np.zeros(4), rem, 500.0) == 0
    # A request with one token left gains nothing from drafts.
    assert oracle(StepStats(1), np.full(1, 0.99), np.ones(1, dtype=np.int64), 500.0) == 0


def test_progress_callback_covers_the_simulated_duration() -> None:
    got: list[float] = []
    sc = load_workload("sweep", profile=PROFILE, duration_s=6.0, concurrency=[8])[0]
    simulate(sc, PROFILE, PolicyDecider(Recorder([2])), EngineConfig(), progress=got.append)
    assert sum(got) == pytest.approx(6.0, abs=1e-6)


def test_engine_config_rejects_bad_values_naming_them() -> None:
    with pytest.raises(ValueError, match="max_running"):
        EngineConfig(max_running=0)
    with pytest.raises(ValueError, match="feedback_lag"):
        EngineConfig(feedback_lag=2)
    with pytest.raises(ValueError, match="jitter"):
        EngineConfig(jitter=-0.1)


def test_shipped_profile_runs(tmp_path: Path) -> None:
    from specpolicy.sim.run import resolve_profile

    prof = resolve_profile("h200-llama8b", None)
    sc = load_workload("sweep", profile=prof, duration_s=3.0, concurrency=[64])[0]
    res = simulate(sc, prof, OracleDecider(prof), EngineConfig())
    assert res.output_tok_s > 0 and res.decode_steps > 10
