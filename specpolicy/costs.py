"""The seam between step-cost knowledge (simulator profiles, fitted traces) and the policies that use it."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["StepCostModel"]


@runtime_checkable
class StepCostModel(Protocol):
    """Predicts the wall time of one engine step.

    ``num_steps`` is the draft depth of the step: k > 0 means k draft steps plus one verify of k+1 tokens per
    request (plus the fixed per-cycle overhead); 0 means speculation off inside the speculative engine (its
    cost includes whatever "off" still costs there, e.g. a draft catch-up pass). ``seq_len`` None means the
    model's reference context length.
    """

    def step_time_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float: ...
