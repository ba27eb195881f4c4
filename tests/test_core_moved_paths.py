"""Modules that moved keep their old import paths working, with the very same objects (one mechanism each)."""

from __future__ import annotations

import importlib

import pytest

MOVED = [
    ("specpolicy.sim.profile", "specpolicy.profiles", ["CostProfile", "load_profile", "available_profiles",
                                                       "profile_from_dict", "with_off_cost", "ProfileError",
                                                       "PROFILE_FORMAT", "ProfileFile"]),
    ("specpolicy.sim", "specpolicy.profiles", ["CostProfile", "load_profile", "with_off_cost"]),
    ("specpolicy.costs", "specpolicy.profiles", ["StepCostModel"]),
    ("specpolicy.policy", "specpolicy.registry", ["parse_config", "make_policy", "get_entry",
                                                  "available_policies", "config_union", "config_json_schema",
                                                  "ENTRY_POINT_GROUP", "_registry", "_config_union"]),
    ("specpolicy", "specpolicy.registry", ["parse_config", "make_policy", "available_policies"]),
    ("specpolicy.policies._cost_table", "specpolicy.policies.cost_model.table", ["BucketGrid", "CostCells"]),
    ("specpolicy.policies._cost_acceptance", "specpolicy.policies.cost_model.acceptance",
     ["AcceptanceEstimator"]),
    ("specpolicy.adapters.sglang.legacy.runtime", "specpolicy.policies.compose", ["OnOffAtDepth"]),
]


@pytest.mark.parametrize(("old", "new", "names"), MOVED, ids=[m[0] for m in MOVED])
def test_an_old_import_path_gives_the_moved_object(old: str, new: str, names: list[str]) -> None:
    before, after = importlib.import_module(old), importlib.import_module(new)
    for name in names:
        assert getattr(before, name) is getattr(after, name), f"{old}.{name}"


def test_the_cost_model_module_keeps_its_public_names() -> None:
    from specpolicy.policies import cost_model

    assert set(cost_model.__all__) == {"CostModelConfig", "CostModelPolicy", "ENTRY", "make_cost_model"}
    assert cost_model.ENTRY.config is cost_model.CostModelConfig
    assert cost_model.make_cost_model().config == cost_model.CostModelConfig()


def test_an_unknown_name_is_still_an_attribute_error() -> None:
    import specpolicy.policy as policy

    with pytest.raises(AttributeError, match="no_such_name"):
        policy.no_such_name  # noqa: B018
