"""One StepStats field list: TraceRecord, the trace writer's dict and StepStats.fast all follow it."""

from __future__ import annotations

from dataclasses import fields

from hypothesis import given
from hypothesis import strategies as st

from specpolicy import StepStats
from specpolicy.trace import TraceRecord, record_dict

maybe_float = st.none() | st.floats(0, 1e6, allow_nan=False)
counts = st.integers(0, 10_000)


@st.composite
def stats(draw: st.DrawFn) -> StepStats:
    k = draw(st.integers(0, 8))
    n = draw(st.integers(0, 6))
    acc = None if k == 0 else draw(st.none() | st.lists(st.integers(0, k), min_size=n, max_size=n))
    drafted = None if acc is None else draw(st.none() | st.just([k] * len(acc)))
    mean = None if k == 0 else draw(st.none() | st.floats(0, k))
    return StepStats(
        draw(counts), draw(counts), draw(maybe_float), k, acc, drafted, draw(maybe_float), mean,
        draw(st.none() | counts),
    )


@given(stats(), st.integers(1, 10**6), st.integers(0, 8), maybe_float)
def test_a_record_carries_every_stats_field_and_gives_the_stats_back(
    s: StepStats, step: int, k: int, t: float | None
) -> None:
    rec = TraceRecord.from_stats(step, s, k, t, rank=2)
    assert rec.stats() == s
    assert (rec.step, rec.num_steps, rec.step_time_s, rec.rank) == (step, k, t, 2)
    d = record_dict(step, s, k, t, rank=2)
    assert [f for f in d if f in StepStats._fields] == list(StepStats._fields)
    assert TraceRecord.from_dict(d) == rec  # what the writer serialises reads back as the same record
    assert StepStats.fast(*s) == s


def test_trace_record_declares_the_stats_fields_with_their_defaults() -> None:
    declared = {f.name: f.default for f in fields(TraceRecord)}
    for name in StepStats._fields:
        assert name in declared
        if name in StepStats._field_defaults:
            assert declared[name] == StepStats._field_defaults[name]
    assert StepStats.fast(4) == StepStats(4) == (4, 0, None, 0) + (None,) * 10


def test_the_trace_leaves_request_ids_out() -> None:
    s = StepStats(
        2, 0, None, 3, [1, 3], None, 0.01, None, 2, last_request_ids=["a", "b"], request_ids=["b", "c"]
    )
    d = record_dict(7, s, 3, 0.01)
    assert d["last_request_ids"] is None and d["request_ids"] is None
    assert d["accepted_draft_tokens"] == [1, 3]
    assert TraceRecord.from_dict(d).stats() == s._replace(last_request_ids=None, request_ids=None)
