"""Config checks shared by the policies that choose among a list of depths."""

from __future__ import annotations

from collections.abc import Sequence

from ..errors import FieldError, short_repr
from ..mode import MAX_NUM_STEPS


def check_depths(steps: Sequence[int], field: str = "steps") -> None:
    """Positive depths, strictly ascending: the engine pre-builds one state per entry."""
    for i, k in enumerate(steps):
        if not 1 <= k <= MAX_NUM_STEPS:
            raise FieldError(f"{field}.{i}", f"must be in [1, {MAX_NUM_STEPS}], got {short_repr(k)}")
        if i and k <= steps[i - 1]:
            raise FieldError(field, f"must be strictly ascending, got {short_repr(list(steps))}")
