"""Built-in policies, one module each (a config model + a class + its ``ENTRY``), and ``compose``: policies
made of other policies (``gate``, ``clamp``)."""

from __future__ import annotations

from ..policy import PolicyEntry
from . import acceptance, alternate, compose, cost_model, hysteresis, schedule, static, threshold

BUILTIN_ENTRIES: tuple[PolicyEntry, ...] = (
    static.ENTRY,
    threshold.ENTRY,
    hysteresis.ENTRY,
    schedule.ENTRY,
    acceptance.ENTRY,
    cost_model.ENTRY,
    alternate.ENTRY,
    *compose.ENTRIES,
)

__all__ = ["BUILTIN_ENTRIES"]
