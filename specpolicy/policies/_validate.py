"""Config checks shared by the policies that choose among a list of depths."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import FieldError, short_repr
from ..mode import MAX_NUM_STEPS


def check_depths(steps: Sequence[int], field: str = "steps", *, with_off: bool = False) -> None:
    """Positive depths (0 too ``with_off``), strictly ascending: the engine pre-builds one state per entry."""
    low = 0 if with_off else 1
    for i, k in enumerate(steps):
        if not low <= k <= MAX_NUM_STEPS:
            raise FieldError(f"{field}.{i}", f"must be in [{low}, {MAX_NUM_STEPS}], got {short_repr(k)}")
        if i and k <= steps[i - 1]:
            raise FieldError(field, f"must be strictly ascending, got {short_repr(list(steps))}")
