"""Where step-cost profiles used to live; they are core knowledge in ``specpolicy.profiles`` now.

Kept so that existing imports (``from specpolicy.sim.profile import load_profile``) keep working.
"""

from __future__ import annotations

from ..profiles import (
    PROFILE_FORMAT,
    CostProfile,
    LinearCost,
    OffCost,
    Overheads,
    PrefillModel,
    ProfileError,
    ProfileFile,
    ProfileGrid,
    available_profiles,
    load_profile,
    profile_from_dict,
    with_off_cost,
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
    "available_profiles",
    "load_profile",
    "profile_from_dict",
    "with_off_cost",
]
