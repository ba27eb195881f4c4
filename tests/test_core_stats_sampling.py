"""decide() reads a bounded sample of the per-request fields, whatever container holds them.

The docs promise that decide() does not grow with the batch. Timing is not asserted (the CPU is shared);
the work is: a container that counts every entry it hands out stands in for a numpy array or a tensor, and
each policy may read at most a fixed number of entries of a batch of 65,536.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any, overload

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import ReportsEstimates, StepStats, available_policies, make_policy, parse_config
from specpolicy.clean import sample_sequence
from specpolicy.stats import mean_accepted_drafts

BATCH = 65_536
#: Entries a policy may read per field per step: far below the batch, above any policy's sample.
READ_BOUND = 2_048


class Counted(Sequence[int]):
    """A sequence that counts the entries read from it (through indexing, slicing or iteration)."""

    def __init__(self, values: list[int], reads: list[int]) -> None:
        self._values = values
        self.reads = reads

    def __len__(self) -> int:
        return len(self._values)

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> Counted: ...
    def __getitem__(self, i: int | slice) -> int | Counted:
        if isinstance(i, slice):
            part = self._values[i]
            self.reads[0] += len(part)
            return Counted(part, self.reads)
        self.reads[0] += 1
        return self._values[i]

    def __iter__(self) -> Iterator[int]:
        for v in self._values:
            self.reads[0] += 1
            yield v


def _specs() -> list[Any]:
    out: list[Any] = [pytest.param({"name": name}, id=name) for name in available_policies()]
    out.append(pytest.param({"name": "clamp", "inner": {"name": "acceptance"}}, id="clamp-acceptance"))
    out.append(pytest.param({"name": "gate", "inner": {"name": "acceptance"}}, id="gate-acceptance"))
    return out


@pytest.mark.parametrize("spec", _specs())
def test_decide_reads_a_bounded_sample_of_a_huge_non_list_batch(spec: dict[str, Any]) -> None:
    policy = make_policy(parse_config(spec))
    reads = [0]
    for step in range(20):
        acc = Counted([step % 4] * BATCH, reads)
        drafted = Counted([3] * BATCH, reads)
        ids = Counted(list(range(step * BATCH, (step + 1) * BATCH)), reads)
        before = reads[0]
        policy.decide(
            StepStats.fast(BATCH, 0, 1000.0, 3, acc, drafted, 0.02, None, BATCH, 3, 1000.0, ids, ids)
        )
        assert reads[0] - before <= 3 * READ_BOUND, f"step {step}: read {reads[0] - before} entries"


@pytest.mark.parametrize(
    "container", [np.asarray, tuple, lambda v: Counted(v, [0])], ids=["numpy", "tuple", "seq"]
)
@given(values=st.lists(st.integers(0, 5), min_size=1, max_size=300), limit=st.integers(0, 40))
def test_the_sample_is_the_strided_list_whatever_the_container(
    container: Any, values: list[int], limit: int
) -> None:
    got = sample_sequence(container(values), limit)
    assert got is not None
    sample, n = got
    assert n == len(values)
    stride = -(-len(values) // limit) if 0 < limit < len(values) else 1
    assert sample == values[::stride] and type(sample) is list
    assert all(type(v) is int for v in sample)


def test_a_numpy_batch_gives_the_mean_a_list_of_it_gives() -> None:
    rng = np.random.default_rng(1)
    acc: Any = rng.integers(0, 4, 10_000)
    drafted: Any = np.full(10_000, 3)
    for limit in (0, 32, 1000):
        as_np = mean_accepted_drafts(StepStats.fast(10_000, 0, None, 3, acc, drafted), limit)
        as_list = mean_accepted_drafts(
            StepStats.fast(10_000, 0, None, 3, acc.tolist(), drafted.tolist()), limit
        )
        assert as_np == as_list and as_np is not None


@pytest.mark.parametrize("value", ["abc", b"ab", 12, object(), iter([1, 2]), None])
def test_anything_but_a_sequence_is_no_sample(value: object) -> None:
    assert sample_sequence(value, 8) is None


@pytest.mark.parametrize("container", [np.asarray, tuple], ids=["numpy", "tuple"])
@given(
    steps=st.lists(
        st.tuples(
            st.integers(1, 40),  # batch
            st.integers(0, 3),  # accepted (of depth 3), per request below
            st.booleans(),  # drafts trimmed to 2 for every other request
            st.floats(0.005, 0.05),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_cost_model_decides_the_same_from_any_container(
    container: Any, steps: list[tuple[int, int, bool, float]]
) -> None:
    """cost_model samples a numpy array or a tuple as it samples a list: the same decisions and estimates."""
    as_list = make_policy(parse_config({"name": "cost_model"}))
    other = make_policy(parse_config({"name": "cost_model"}))
    for i, (batch, a, trimmed, t) in enumerate(steps):
        drafted = [2 if trimmed and j % 2 else 3 for j in range(batch)]
        acc = [min((a + j) % 4, d) for j, d in enumerate(drafted)]
        ids = list(range(i, i + batch))
        lists = StepStats.fast(batch, 0, 500.0, 3, acc, drafted, t, None, batch, 3, 500.0, ids, ids)
        others = StepStats.fast(
            batch, 0, 500.0, 3, container(acc), container(drafted), t, None, batch, 3, 500.0, ids, ids
        )
        assert as_list.decide(lists) == other.decide(others), i
    assert isinstance(as_list, ReportsEstimates) and isinstance(other, ReportsEstimates)
    assert as_list.estimates() == other.estimates()
