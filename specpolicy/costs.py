"""Where ``StepCostModel`` used to live; it is part of ``specpolicy.profiles`` now (kept for old imports)."""

from __future__ import annotations

from .profiles import StepCostModel

__all__ = ["StepCostModel"]
