"""Built-in policies, one module each (a config model + a class + its ``ENTRY``)."""

from __future__ import annotations

from ..policy import PolicyEntry
from . import acceptance, alternate, cost_model, hysteresis, schedule, static, threshold

BUILTIN_ENTRIES: tuple[PolicyEntry, ...] = (
    static.ENTRY,
    threshold.ENTRY,
    hysteresis.ENTRY,
    schedule.ENTRY,
    acceptance.ENTRY,
    cost_model.ENTRY,
    alternate.ENTRY,
)

__all__ = ["BUILTIN_ENTRIES"]
