"""Step-cost profiles: what one engine step costs, by batch size, tokens per request and context length.

Core knowledge shared by the simulator (its clock) and the ``cost_model`` policy (its prior). A profile is a
JSON document (``schema``, format ``specpolicy-profile/1``, docs/reference/profiles.md) of measured or fitted
grids of target-forward and draft-step times plus per-step overheads; ``load_profile`` validates one once and
builds a ``CostProfile`` (``cost``) whose lookups are plain-Python interpolation. The shipped ones are in
``shipped/``. ``StepCostModel`` is the seam a policy depends on: anything that prices a step.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from .cost import CostProfile, with_off_cost
from .load import available_profiles, load_profile, profile_from_dict
from .schema import (
    PROFILE_FORMAT,
    LinearCost,
    OffCost,
    Overheads,
    PrefillModel,
    ProfileError,
    ProfileFile,
    ProfileGrid,
)

__all__ = [
    "PROFILE_FORMAT",
    "CostProfile",
    "LinearCost",
    "OffCost",
    "Overheads",
    "PrefillModel",
    "ProfileError",
    "ProfileFile",
    "ProfileGrid",
    "StepCostModel",
    "available_profiles",
    "load_profile",
    "profile_from_dict",
    "with_off_cost",
]


@runtime_checkable
class StepCostModel(Protocol):
    """Predicts the wall time of one engine step.

    ``num_steps`` is the draft depth of the step: k > 0 means k draft steps plus one verify of k+1 tokens per
    request (plus the fixed per-cycle overhead); 0 means speculation off inside the speculative engine (its
    cost includes whatever "off" still costs there, e.g. a draft catch-up pass). ``seq_len`` None means the
    model's reference context length.
    """

    def step_time_s(self, batch_size: float, num_steps: int, seq_len: float | None = None) -> float: ...
