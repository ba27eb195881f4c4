"""The simulator: step-cost profiles, workloads, an engine model and reports (``specpolicy simulate``)."""

from ..profiles import (
    PROFILE_FORMAT,
    CostProfile,
    ProfileError,
    available_profiles,
    load_profile,
    with_off_cost,
)

__all__ = [
    "PROFILE_FORMAT",
    "CostProfile",
    "ProfileError",
    "available_profiles",
    "load_profile",
    "with_off_cost",
]
