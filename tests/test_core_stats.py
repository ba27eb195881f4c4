"""StepStats: validation on the public constructor, the unvalidated fast path, and the robust readers."""

from __future__ import annotations

import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import StepStats
from specpolicy.clean import clean_count, clean_float
from specpolicy.stats import mean_accepted_drafts


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"batch_size": -1}, "batch_size"),
        ({"batch_size": 2.0}, "batch_size"),
        ({"batch_size": 4, "num_waiting": -3}, "num_waiting"),
        ({"batch_size": 4, "mean_seq_len": math.nan}, "mean_seq_len"),
        ({"batch_size": 4, "mean_seq_len": -1.0}, "mean_seq_len"),
        ({"batch_size": 4, "last_num_steps": -1}, "last_num_steps"),
        ({"batch_size": 4, "last_step_time_s": math.inf}, "last_step_time_s"),
        ({"batch_size": 4, "last_step_time_s": -0.5}, "last_step_time_s"),
        ({"batch_size": 2, "last_num_steps": 0, "accepted_draft_tokens": [0, 0]}, "accepted_draft_tokens"),
        (
            {"batch_size": 2, "last_num_steps": 3, "accepted_draft_tokens": [1, 2], "drafted_tokens": [3]},
            "drafted_tokens",
        ),
        ({"batch_size": 2, "last_num_steps": 0, "mean_accepted": 1.0}, "mean_accepted"),
        ({"batch_size": 2, "last_num_steps": 2, "mean_accepted": 2.5}, "mean_accepted"),
        ({"batch_size": 2, "last_num_steps": 2, "mean_accepted": math.nan}, "mean_accepted"),
    ],
)
def test_constructor_rejects_bad_values_naming_the_field(kwargs: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=rf"StepStats\.{field}\b"):
        StepStats(**kwargs)  # type: ignore[arg-type]


class _Tensorish:
    def __float__(self) -> float:
        raise RuntimeError("a Tensor with 2 elements cannot be converted to Scalar")

    __int__ = __index__ = __float__


_FIELDS = ("batch_size", "num_waiting", "mean_seq_len", "last_num_steps", "last_step_time_s")
_BAD = ("3", b"3", 10**400, True, math.inf, -1, _Tensorish(), object(), [1], "x" * 10**6)


@pytest.mark.parametrize("field", _FIELDS)
@pytest.mark.parametrize("value", _BAD, ids=lambda v: type(v).__name__)
def test_every_bad_value_raises_value_error_naming_field_and_range(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"StepStats\.{field} must be .*(\[0, |>= 0)") as info:
        StepStats(**{"batch_size": 1, field: value})  # type: ignore[arg-type]
    assert len(str(info.value)) < 300  # the bad value's repr is bounded


@pytest.mark.parametrize("field", ["accepted_draft_tokens", "drafted_tokens"])
@pytest.mark.parametrize("value", ["abc", 5, object()], ids=lambda v: type(v).__name__)
def test_per_request_fields_must_be_sequences(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=rf"StepStats\.{field} must be a sequence"):
        StepStats(**{"batch_size": 1, "last_num_steps": 2, field: value})  # type: ignore[arg-type]


def test_constructor_converts_numpy_numbers_to_python_ones() -> None:
    np = pytest.importorskip("numpy")
    s = StepStats(np.int64(4), np.int32(1), np.float32(100.0), np.int64(2), [1, 2], None, np.float64(0.5),
                  np.float64(1.5))
    assert s == (4, 1, 100.0, 2, [1, 2], None, 0.5, 1.5, None, None, None, None, None, None)
    assert [type(v) for v in s[:4]] == [int, int, float, int] and type(s.last_step_time_s) is float


_valid_stats = st.builds(
    lambda b, w, L, k, acc_seed, t: (b, w, L, k, None if k == 0 or acc_seed is None else
                                     [x % (k + 1) for x in acc_seed], None, t),
    st.integers(0, 512),
    st.integers(0, 100),
    st.none() | st.floats(0, 1e6),
    st.integers(0, 8),
    st.none() | st.lists(st.integers(0, 100), min_size=1, max_size=20),
    st.none() | st.floats(0, 10),
)


@given(_valid_stats)
def test_fast_path_builds_the_same_value_as_the_validating_constructor(args: tuple[object, ...]) -> None:
    a = StepStats(*args)  # type: ignore[arg-type]
    b = StepStats.fast(*args)  # type: ignore[arg-type]
    assert a == b and type(a) is type(b) is StepStats
    assert a.batch_size == args[0] and a.accepted_draft_tokens == args[4]
    assert a.mean_accepted is None  # appended field defaults; positional use of the first seven is unchanged


def test_stats_is_an_immutable_tuple() -> None:
    s = StepStats(3, last_num_steps=2, accepted_draft_tokens=[1, 2, 0])
    with pytest.raises(AttributeError):
        s.batch_size = 4  # type: ignore[misc]
    assert s[0] == 3 and len(s) == len(StepStats._fields) == 14


def _reference_mean(acc: list[object], drafted: list[object] | None, k: int) -> float | None:
    """The documented repair: clip to [0, drafted_i]; skip non-finite, negative or non-numeric entries."""
    vals = []
    for i, v in enumerate(acc):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or v < 0:
            continue
        cap = k
        if drafted is not None and i < len(drafted):
            d = drafted[i]
            if isinstance(d, int) and 0 <= d < k:
                cap = d
        vals.append(min(float(v), cap))
    return sum(vals) / len(vals) if vals else None


@given(st.integers(1, 8), st.lists(st.integers(0, 8), min_size=1, max_size=300))
def test_mean_of_well_formed_acceptance_is_the_plain_mean(k: int, raw: list[int]) -> None:
    acc = [min(v, k) for v in raw]
    got = mean_accepted_drafts(StepStats.fast(len(acc), last_num_steps=k, accepted_draft_tokens=acc))
    assert got == pytest.approx(sum(acc) / len(acc))
    s = StepStats(len(acc), last_num_steps=k, accepted_draft_tokens=acc)
    assert s.mean_acceptance_length() == pytest.approx(1 + sum(acc) / len(acc))


@given(
    st.integers(1, 6),
    st.lists(
        st.integers(0, 50) | st.floats(allow_nan=True, allow_infinity=True) | st.none(),
        min_size=1,
        max_size=40,
    ),
)
def test_out_of_range_acceptance_is_repaired_per_request(k: int, acc: list[object]) -> None:
    """The documented split: a numeric total inside [0, k * n] is used as is (the mean, capped at k); any
    other total (over the cap, NaN, non-numbers) gets the per-request repair."""
    stats = StepStats.fast(len(acc), last_num_steps=k, accepted_draft_tokens=acc)  # type: ignore[arg-type]
    got = mean_accepted_drafts(stats)
    numeric = all(type(v) in (int, float) for v in acc)
    total = sum(acc) if numeric else math.nan  # type: ignore[arg-type]
    if 0 <= total <= k * len(acc):
        assert got == pytest.approx(min(total / len(acc), k))
    else:
        want = _reference_mean(acc, None, k)
        assert (got is None and want is None) or got == pytest.approx(want)
    if got is not None:
        assert 0.0 <= got <= k


@given(st.integers(1, 6), st.integers(1, 600), st.integers(1, 100), st.randoms(use_true_random=False))
def test_sampling_bounds_the_requests_read(k: int, n: int, cap: int, rnd: Any) -> None:
    acc = [rnd.randint(0, k) for _ in range(n)]
    stats = StepStats(n, last_num_steps=k, accepted_draft_tokens=acc)
    step = -(-n // cap)  # ceil: the documented even stride
    sample = acc[::step] if n > cap else acc
    assert len(sample) <= cap
    assert mean_accepted_drafts(stats, cap) == pytest.approx(sum(sample) / len(sample))
    assert mean_accepted_drafts(stats, 0) == pytest.approx(sum(acc) / n)


def test_over_the_cap_values_are_clipped_to_the_drafted_count() -> None:
    s = StepStats.fast(2, last_num_steps=3, accepted_draft_tokens=[9, 9])
    assert mean_accepted_drafts(s) == 3.0
    trimmed = StepStats.fast(2, last_num_steps=3, accepted_draft_tokens=[9, 9], drafted_tokens=[1, 2])
    assert mean_accepted_drafts(trimmed) == 1.5
    nan = StepStats.fast(2, last_num_steps=3, accepted_draft_tokens=[math.nan, 2])  # type: ignore[list-item]
    assert mean_accepted_drafts(nan) == 2.0


@pytest.mark.parametrize(
    "stats",
    [
        StepStats.fast(4),  # nothing reported
        StepStats.fast(4, last_num_steps=0, accepted_draft_tokens=[0, 0, 0, 0]),  # no speculation != zero
        StepStats.fast(4, last_num_steps=-2, accepted_draft_tokens=[1, 1]),
        StepStats.fast(4, last_num_steps=math.nan, accepted_draft_tokens=[1, 1]),  # type: ignore[arg-type]
        StepStats.fast(4, last_num_steps=3, accepted_draft_tokens=[]),
        StepStats.fast(4, last_num_steps=3, accepted_draft_tokens=[-1, math.inf, None]),  # type: ignore[list-item]
        StepStats.fast(4, last_num_steps=3, accepted_draft_tokens="abc"),  # type: ignore[arg-type]
        StepStats.fast(4, last_num_steps=3, accepted_draft_tokens=7),  # type: ignore[arg-type]
    ],
)
def test_no_usable_acceptance_reads_as_none(stats: StepStats) -> None:
    assert mean_accepted_drafts(stats) is None
    assert stats.mean_acceptance_length() is None


def test_huge_counts_in_both_lists_do_not_overflow_the_mean() -> None:
    huge = StepStats.fast(1, last_num_steps=3, accepted_draft_tokens=[10**400], drafted_tokens=[10**400])
    assert mean_accepted_drafts(huge) is None  # nothing usable: the one entry is not a finite count
    deep = StepStats.fast(1, last_num_steps=10**400, accepted_draft_tokens=[10**399])
    assert mean_accepted_drafts(deep) is None  # a depth beyond any count is no depth


def test_precomputed_mean_wins_over_the_list_and_is_clipped() -> None:
    s = StepStats(3, last_num_steps=4, accepted_draft_tokens=[0, 0, 0], mean_accepted=2.5)
    assert mean_accepted_drafts(s) == 2.5 and s.has_acceptance
    assert mean_accepted_drafts(StepStats.fast(3, last_num_steps=2, mean_accepted=7.0)) == 2.0
    # a bad aggregate falls back to the list
    bad = StepStats.fast(2, last_num_steps=2, accepted_draft_tokens=[1, 2], mean_accepted=math.nan)
    assert mean_accepted_drafts(bad) == 1.5
    assert mean_accepted_drafts(StepStats.fast(3, last_num_steps=2, mean_accepted=-1.0)) is None


@pytest.mark.parametrize(
    ("value", "want"),
    [(3, 3), (0, 0), (-1, None), (3.0, 3), (2.5, None), (math.nan, None), (math.inf, None), (None, None),
     (True, None), ("x", None), ("4", None), (10**400, None), (2.0**60, None), (_Tensorish(), None)],
)
def test_clean_count(value: object, want: int | None) -> None:
    assert clean_count(value) == want


def test_clean_count_accepts_numpy_integers() -> None:
    np = pytest.importorskip("numpy")
    assert clean_count(np.int64(17)) == 17 and clean_count(np.int32(-2)) is None


@pytest.mark.parametrize(
    ("value", "want"),
    [(0.25, 0.25), (0, 0.0), (-0.1, None), (math.nan, None), (math.inf, None), (None, None), ("0.5", None),
     (True, None), (10**400, None), (_Tensorish(), None)],
)
def test_clean_float(value: object, want: float | None) -> None:
    assert clean_float(value) == want


def test_request_ids_follow_the_accepted_counts_and_must_be_hashable() -> None:
    s = StepStats(
        3, 0, None, 2, [0, 2], None, None, None, 2,
        last_request_ids=("r1", "r2"), request_ids=["r2", "r3", "r4"],
    )
    assert s.last_request_ids == ("r1", "r2") and s.request_ids == ["r2", "r3", "r4"]
    with pytest.raises(ValueError, match=r"StepStats\.last_request_ids must have one entry per request"):
        StepStats(2, 0, None, 2, [0, 2], last_request_ids=["r1"])
    with pytest.raises(ValueError, match=r"StepStats\.request_ids must hold hashable request ids"):
        StepStats(1, request_ids=[["r1"]])
    with pytest.raises(ValueError, match=r"StepStats\.request_ids must be a sequence of request ids"):
        StepStats(1, request_ids="r1")
    assert StepStats(1).request_ids is None and StepStats(1).last_request_ids is None
