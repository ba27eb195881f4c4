"""Where cost_model's per-position acceptance estimator used to live (``cost_model.acceptance`` now)."""

from __future__ import annotations

from .cost_model.acceptance import AcceptanceEstimator

__all__ = ["AcceptanceEstimator"]
