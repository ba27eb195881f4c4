"""Where cost_model's bucket grid and learned cells used to live (``cost_model.table`` now)."""

from __future__ import annotations

from .cost_model.table import BucketGrid, CostCells

__all__ = ["BucketGrid", "CostCells"]
