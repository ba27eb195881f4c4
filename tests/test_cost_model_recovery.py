"""cost_model after a transient episode: back at the right decision within a bound in steps.

A slowdown of one kind of step (a co-tenant, a throttle, a cold start) or bad step times poison the
estimates of the depths it touched. The probe schedule's audit (``probes.ProbeSchedule.audit_due``)
re-measures the other kind of depth at least every ``AUDIT_STEPS`` steps whatever it looks like it costs,
and an estimate found stale in one bucket raises an alarm in the others; a sample far faster than its
estimate is believed.
The closed loop is ``benchmarks/bench_recovery.py`` (its synthetic engine, its definition of recovered).
"""

from __future__ import annotations

import pytest
from _benchmarks import load
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy.policies.cost_model.probes import AUDIT_SHARE, AUDIT_STEPS, AUDIT_WINDOW, ProbeSchedule

bench = load("bench_recovery")

#: After any episode of up to 5,000 steps, the right decision again within this many steps of its end.
BOUND = 1000


def _recovery(kind: str, factor: float, length: int, buckets: int, dwell: int, seed: int) -> int:
    ep = bench.Episode(kind, factor, length, buckets, dwell=dwell, after=BOUND + 4 * bench.WINDOW, seed=seed)
    return int(bench.run(ep).recovery)


@settings(max_examples=25)
@given(
    kind=st.sampled_from(("spec-slow", "off-slow")),
    factor=st.floats(2.0, 20.0),
    length=st.integers(1, 1000),
    buckets=st.integers(1, 8),
    dwell=st.sampled_from((1, 10, 100, 1000)),
    seed=st.integers(0, 2**16),
)
def test_after_an_episode_it_decides_right_within_the_bound(
    kind: str, factor: float, length: int, buckets: int, dwell: int, seed: int
) -> None:
    """Both directions: speculation slowed (a good drafter afterwards: speculate) and off slowed (a useless
    drafter afterwards: off), 2-20x, over one bucket or a batch moving over up to eight."""
    rec = _recovery(kind, factor, length, buckets, dwell, seed)
    assert 0 <= rec <= BOUND, (kind, factor, length, buckets, dwell, seed, rec)


@pytest.mark.slow
@settings(max_examples=60)
@given(
    kind=st.sampled_from(("spec-slow", "off-slow")),
    factor=st.floats(2.0, 20.0),
    length=st.integers(1, 5000),
    buckets=st.integers(1, 8),
    dwell=st.sampled_from((1, 10, 100, 1000)),
    seed=st.integers(0, 2**16),
)
def test_after_a_long_episode_it_decides_right_within_the_bound(
    kind: str, factor: float, length: int, buckets: int, dwell: int, seed: int
) -> None:
    rec = _recovery(kind, factor, length, buckets, dwell, seed)
    assert 0 <= rec <= BOUND, (kind, factor, length, buckets, dwell, seed, rec)


@pytest.mark.parametrize("factor", [4.0, 10.0])
@pytest.mark.parametrize("buckets", [1, 8])
@pytest.mark.parametrize("kind", ["spec-slow", "off-slow"])
def test_the_figures_of_the_report(kind: str, factor: float, buckets: int) -> None:
    """The cases the report measured (1,000 steps slow): within the bound, where it took 13,900-57,300
    steps in one bucket before."""
    assert 0 <= _recovery(kind, factor, 1000, buckets, 10, 0) <= BOUND


def test_the_audit_ignores_the_price_and_counts_steps_not_visits() -> None:
    """A measured depth of the other kind that looks 100x dearer (its loss and price put the budgeted
    re-measurement beyond the horizon) is audited once its measurement is AUDIT_STEPS steps old, however
    rarely its bucket is visited; then not again for AUDIT_STEPS steps."""
    n = 4
    sched = ProbeSchedule(8, n, 0.002, 4096)
    v = [1.0, 0.01, 0.01, 0.01]  # off runs; the speculative depths look 100x worse
    t = [1.0, 100.0, 100.0, 100.0]
    sched.stamp[3] = [10, 10, 10, 10]
    sched.seen[3] = [1, 1, 1, 1]
    sched.visits[3] = 2  # the bucket was visited twice in all
    sched.plan(3, v, 0, [False] * n, [3] * n, False, 0, None, t, now=AUDIT_STEPS + 9)
    assert sched.probe_at[3] > 10**5  # not yet due: in visits the budget waits 400,000 visits
    sched.plan(3, v, 0, [False] * n, [3] * n, False, 0, None, t, now=AUDIT_STEPS + 10)
    assert sched.probe_at[3] <= sched.visits[3] and sched.probe_i[3] in (1, 2, 3)
    assert sched.take(3, sched.visits[3], AUDIT_STEPS + 10) >= 1
    # another bucket, just as stale: the clock is shared, so the next audit is AUDIT_STEPS later
    sched.stamp[5] = [10, 10, 10, 10]
    sched.seen[5] = [1, 1, 1, 1]
    sched.plan(5, v, 0, [False] * n, [3] * n, False, 0, None, t, now=AUDIT_STEPS + 20)
    assert sched.probe_at[5] > 10**5
    sched.plan(5, v, 0, [False] * n, [3] * n, False, 0, None, t, now=2 * AUDIT_STEPS + 10)
    assert sched.probe_at[5] <= sched.visits[5]


def test_an_alarm_audits_every_other_bucket_at_once() -> None:
    """A depth found stale in one bucket: every bucket that has not measured it since audits it on its next
    refresh, without waiting for the shared clock; a bucket that answered is not asked again by the same
    wave."""
    n = 4
    sched = ProbeSchedule(6, n, 0.002, 4096)
    for b in range(6):
        sched.stamp[b] = [5, 5, 5, 5]
        sched.seen[b] = [1, 1, 1, 1]
    sched.audit_next = 10**6  # the clock would allow none
    v = [1.0, 0.01, 0.01, 0.01]
    sched.raise_alarm(0, 2, 100)
    for b in range(1, 6):
        sched.plan(b, v, 0, [False] * n, [3] * n, False, 0, None, None, now=101)
        assert (sched.probe_at[b] <= sched.visits[b], sched.probe_i[b]) == (True, 2)
    sched.plan(0, v, 0, [False] * n, [3] * n, False, 0, None, None, now=101)
    assert sched.probe_at[0] > 1000  # the bucket that found it: its budgeted probe only
    assert sched.take(1, 0, 101) == 2 and sched.stamp[1][2] == 101
    sched.raise_alarm(4, 2, 150)  # the same wave, found again: bucket 1 answered already
    assert not sched.alarm[1] >> 2 & 1 and sched.alarm[3] >> 2 & 1


@settings(max_examples=12, deadline=None)
@given(
    factor=st.floats(2.0, 20.0),
    entries=st.integers(1, 5),
    buckets=st.integers(1, 8),
    seed=st.integers(0, 2**16),
)
def test_slow_first_entries_into_a_depth_do_not_keep_it_out(
    factor: float, entries: int, buckets: int, seed: int
) -> None:
    """The first entries into a good depth (the steps after each switch into it) run 2-20x slow, over one
    bucket or a batch moving over up to eight: a speculative depth again within the bound of the last slow
    entry (the first hardening round measured 9,592 steps at 10x over three entries, a later one 97,408)."""
    ep = bench.Episode("outliers", factor, entries, buckets, after=BOUND + 4 * bench.WINDOW, seed=seed)
    rec = int(bench.run(ep).recovery)
    assert 0 <= rec <= BOUND, (factor, entries, buckets, seed, rec)


@settings(max_examples=50)
@given(
    cheap_at=st.integers(0, 50_000),
    prices=st.lists(st.floats(0.0, 1000.0), min_size=1, max_size=40),
    spacing=st.integers(1, AUDIT_STEPS),
)
def test_a_slowdowns_dear_audits_never_space_the_audits_out(
    cheap_at: int, prices: list[float], spacing: int
) -> None:
    """However dear the audits during a slowdown (up to ``AUDIT_WINDOW - AUDIT_STEPS`` steps after a cheap
    audit, they are at most ``AUDIT_STEPS`` apart), the spacing stays ``AUDIT_STEPS``: the least of the
    window's prices is the cheap one. (The least of the last four let four dear audits of a slowdown
    longer than 2,700 steps space the next one out past the bound.)"""
    sched = ProbeSchedule(2, 4, 0.002, 4096)
    sched.price_audit(0.0, cheap_at)
    step = cheap_at
    for p in prices:
        step += spacing
        if step - cheap_at > AUDIT_WINDOW - AUDIT_STEPS:
            break
        sched.price_audit(p, step)
        assert sched.audit_gap == AUDIT_STEPS, (p, step - cheap_at)


def test_audits_measured_dear_in_steady_state_are_spaced_by_their_price() -> None:
    """Past the window, dear audits (a lazy drafter's catch-up, 8 steps each) are spaced so that they cost
    ``AUDIT_SHARE`` of the steps; one cheap audit brings the spacing back."""
    sched = ProbeSchedule(2, 4, 0.002, 4096)
    step = 0
    for _ in range(20):
        step += sched.audit_gap
        sched.price_audit(8.0, step)
    assert sched.audit_gap == int(8.0 / AUDIT_SHARE)
    assert len(sched.prices) <= 32
    sched.price_audit(0.5, step + sched.audit_gap)
    assert sched.audit_gap == AUDIT_STEPS


def test_dear_switches_space_the_audits_from_the_start() -> None:
    """An audit that ran two steps measured its switches apart (a lazy drafter's catch-up on resuming:
    15 steps here): they space the audits at once, without waiting for the start's free price to leave the
    window; what the audited depth's own steps cost still waits for it (a slowdown that begins with the
    run makes them dear)."""
    sched = ProbeSchedule(2, 4, 0.002, 4096)
    sched.price_audit(16.0, 700)  # one step: not measured apart; the next one will be
    assert sched.audit_gap == AUDIT_STEPS and sched.measure_switch
    sched.price_audit(17.0, 1400, 15.0)
    assert sched.audit_gap == int(15.0 / AUDIT_SHARE) and not sched.measure_switch
    sched.price_audit(16.5, 1400 + AUDIT_WINDOW)  # one step again: its switch as measured
    assert sched.audit_gap == int(15.0 / AUDIT_SHARE) and not sched.measure_switch
    sched.price_audit(3.0, 1400 + 2 * AUDIT_WINDOW)  # cheaper than its switch: measure it again
    assert sched.measure_switch
    fresh = ProbeSchedule(2, 4, 0.002, 4096)
    fresh.price_audit(17.0, 700, 0.5)  # dear by its steady steps: the free start holds
    assert fresh.audit_gap == AUDIT_STEPS
