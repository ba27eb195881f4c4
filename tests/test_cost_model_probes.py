"""cost_model's probe schedule: a probe is priced by the time it takes, not only by its value's shortfall."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from specpolicy.policies.cost_model.probes import ProbeSchedule

N = 4  # depth indices: 0 (running) and three others
values = st.lists(st.floats(0.05, 2.0), min_size=N, max_size=N)
times = st.lists(st.floats(0.1, 50.0), min_size=N, max_size=N)


def _due(v: list[float], t: list[float] | None, seen: int = 0, max_interval: int = 4096) -> tuple[int, int]:
    """(visit, depth index) of bucket 0's next probe with depth 0 running, every depth measured at ``seen``
    on three samples."""
    sched = ProbeSchedule(1, N, 0.002, max_interval)
    sched.seen[0] = [seen] * N
    sched.plan(0, v, 0, [False] * N, [3] * N, False, 0, None, t)
    return sched.probe_at[0], sched.probe_i[0]


def test_a_dear_depth_is_probed_as_often_as_its_time_allows() -> None:
    """Two depths lose the same share of value against the running one; the one whose step takes 4x as long
    loses 4x the time per probe, so it is re-measured 4x less often (the cap on the interval included)."""
    share = 0.002 / 3
    cheap = _due([1.0, 0.9, 0.1, 0.1], [1.0, 1.0, 1.0, 1.0])
    dear = _due([1.0, 0.9, 0.1, 0.1], [1.0, 4.0, 1.0, 1.0])
    assert cheap[1] == dear[1] == 1
    assert abs(cheap[0] - 0.1 / share) <= 1 and abs(dear[0] - 0.4 / share) <= 1
    # every other depth 3x as long as the running one: the cap on the interval stretches as much
    capped = _due([1.0, 0.2, 0.1, 0.1], [1.0, 3.0, 3.0, 3.0], max_interval=128)
    assert capped[0] == 3 * 128 and _due([1.0, 0.2, 0.1, 0.1], None, max_interval=128)[0] == 128


@given(values, times)
def test_pricing_by_time_never_brings_a_probe_forward(v: list[float], t: list[float]) -> None:
    """A probe's price in time is at least its value's shortfall: knowing the step times can only space the
    probes further apart, never closer."""
    plain, _ = _due(v, None, seen=5)
    timed, _ = _due(v, t, seen=5)
    assert timed >= plain
