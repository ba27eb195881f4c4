"""SpecMode: value semantics, interning, and errors that name the allowed range."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specpolicy import MAX_NUM_STEPS, SpecMode


def test_off_is_disabled_with_zero_steps() -> None:
    off = SpecMode.off()
    assert not off.enabled and off.num_steps == 0
    assert off == SpecMode.of(0) == SpecMode(0)
    assert repr(off) == "SpecMode.off()"


@given(st.integers(1, MAX_NUM_STEPS))
def test_on_is_enabled_and_equal_by_value(k: int) -> None:
    m = SpecMode.on(k)
    assert m.enabled and m.num_steps == k
    assert m == SpecMode(k) and hash(m) == hash(SpecMode(k))
    assert m is SpecMode.on(k) is SpecMode.of(k)  # interned: decide() allocates nothing for its answer
    assert m != SpecMode.off()
    assert {m, SpecMode(k)} == {m}


def test_modes_are_immutable() -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        SpecMode.on(2).num_steps = 3  # type: ignore[misc]


@pytest.mark.parametrize("bad", [0, -1, MAX_NUM_STEPS + 1, 2.0, True, None, "3"])
def test_on_rejects_depths_outside_its_range(bad: object) -> None:
    with pytest.raises(ValueError, match=rf"num_steps must be an int in \[1, {MAX_NUM_STEPS}\]"):
        SpecMode.on(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, MAX_NUM_STEPS + 1, 1.5, None])
def test_of_and_constructor_reject_depths_outside_its_range(bad: object) -> None:
    with pytest.raises(ValueError, match=rf"num_steps must be an int in \[0, {MAX_NUM_STEPS}\]"):
        SpecMode.of(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="num_steps"):
        SpecMode(bad)  # type: ignore[arg-type]
