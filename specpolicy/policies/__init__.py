"""Built-in policies, one module each (a config model + a class + its ``ENTRY``)."""

from __future__ import annotations

from ..policy import PolicyEntry
from . import static

BUILTIN_ENTRIES: tuple[PolicyEntry, ...] = (
    static.ENTRY,
)

__all__ = ["BUILTIN_ENTRIES"]
