"""decide() never raises and returns a configured depth, for anything in any StepStats field.

Hypothesis fills every field of ``StepStats.fast`` (the unvalidated path an adapter may take) with values of
the wrong type or range: numpy arrays of floats, iterables without ``len``, counts beyond any float, NaN,
tensor-like objects whose conversions raise, request ids that cannot be hashed. Every built-in policy, and
the compositions over acceptance (whose mean is the per-request reader), must decide through all of it.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specpolicy import SpecMode, StepStats, make_policy, parse_config
from specpolicy.policies import BUILTIN_ENTRIES

#: A numpy warning is an exception under ``-W error``: decide() must contain it as well. Generating the
#: hostile stats takes most of the time (about 15 s for the module): out of the fast loop.
pytestmark = [pytest.mark.filterwarnings("error"), pytest.mark.slow]


class NoLen:
    """An iterable without ``len``: not a sequence."""

    def __init__(self, values: list[Any]) -> None:
        self._values = values

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)


class Raising:
    """A container whose every operation raises, as a tensor on the wrong device does."""

    def __len__(self) -> int:
        raise RuntimeError("no len")

    def __getitem__(self, i: object) -> Any:
        raise RuntimeError("no item")

    def __array__(self) -> Any:
        raise RuntimeError("no array")


_huge = st.sampled_from([10**400, 2**64, 2**53, -(10**400), 1e308, -1e308])
_number = (
    st.integers(-5, 70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | _huge
    | st.sampled_from([None, True, "3", np.int64(3), np.float64(2.5), np.uint8(200), np.float32(math.nan)])
)
_items = st.lists(_number, max_size=12)
_container = (
    st.none()
    | _items
    | _items.map(tuple)
    | _items.map(NoLen)
    | _items.map(lambda v: (x for x in v))
    | st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=12).map(np.asarray)
    | st.lists(st.integers(-3, 9), max_size=12).map(np.asarray)
    | st.sampled_from(["abc", b"x", 7, 2.5, Raising(), np.float64(3.0), np.array(5), [[1, 2]], [{}]])
)
_count = _number | st.integers(0, 600)
_field = _number | _container


@st.composite
def _acceptance(draw: st.DrawFn) -> tuple[Any, Any, Any]:
    """last_num_steps, accepted_draft_tokens, drafted_tokens: half the time well-formed counts beside one
    malformed field, so the reader gets past its first checks."""
    if draw(st.booleans()):
        return draw(st.integers(0, 8) | _count), draw(_container), draw(_container)
    k = draw(st.integers(1, 8))
    n = draw(st.integers(1, 12))
    acc: Any = draw(
        st.lists(st.integers(0, k), min_size=n, max_size=n) | st.lists(_number, min_size=n, max_size=n)
    )
    good = draw(st.lists(st.integers(0, k), min_size=n, max_size=n))
    drafted = draw(
        st.sampled_from([good, np.asarray(good, dtype=float), NoLen(good), tuple(good), (x for x in good)])
        | _container
    )
    if draw(st.booleans()):
        acc = draw(
            st.sampled_from([np.asarray(acc if all(type(v) is int for v in acc) else good), NoLen(acc)])
        )
    return k, acc, drafted


@st.composite
def fuzzed_stats(draw: st.DrawFn) -> StepStats:
    k, acc, drafted = draw(_acceptance())
    fields: list[Any] = [
        draw(_count),  # batch_size
        draw(_count),  # num_waiting
        draw(_number),  # mean_seq_len
        k,  # last_num_steps
        acc,  # accepted_draft_tokens
        drafted,  # drafted_tokens
        draw(_number),  # last_step_time_s
        draw(st.none() | _number),  # mean_accepted
        draw(_field),  # last_batch_size
        draw(_field),  # last_decided_steps
        draw(_number),  # last_mean_seq_len
        draw(_container | st.just([[1], [2]])),  # last_request_ids (lists: unhashable ids)
        draw(_container | st.just([{}])),  # request_ids
    ]
    return StepStats.fast(*fields)


SPECS: list[dict[str, Any]] = [{"name": e.name} for e in BUILTIN_ENTRIES] + [
    {"name": "clamp", "inner": {"name": "acceptance"}, "depths": [0, 2]},
    {"name": "gate", "inner": {"name": "acceptance", "probe_interval": 1}},
]


@pytest.mark.parametrize("spec", SPECS, ids=[f"{s['name']}-{i}" for i, s in enumerate(SPECS)])
@settings(max_examples=60, deadline=None)
@given(seq=st.lists(fuzzed_stats(), min_size=1, max_size=30))
def test_decide_never_raises_and_returns_a_configured_depth(
    spec: dict[str, Any], seq: list[StepStats]
) -> None:
    config = parse_config(spec)
    allowed = set(config.candidate_steps())
    policy = make_policy(config)
    for stats in seq:
        mode = policy.decide(stats)
        assert type(mode) is SpecMode and mode.num_steps in allowed, (stats, mode)
