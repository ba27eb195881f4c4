"""Names the package re-exports are the very objects of the module that owns them (one mechanism each)."""

from __future__ import annotations

import importlib

import pytest

REEXPORTED = [
    ("specpolicy", "specpolicy.registry", ["parse_config", "make_policy", "available_policies"]),
]


@pytest.mark.parametrize(("where", "owner", "names"), REEXPORTED, ids=[m[0] for m in REEXPORTED])
def test_a_reexported_name_is_the_owners_object(where: str, owner: str, names: list[str]) -> None:
    before, after = importlib.import_module(where), importlib.import_module(owner)
    for name in names:
        assert getattr(before, name) is getattr(after, name), f"{where}.{name}"


def test_the_cost_model_module_keeps_its_public_names() -> None:
    from specpolicy.policies import cost_model

    assert set(cost_model.__all__) == {"CostModelConfig", "CostModelPolicy", "ENTRY", "make_cost_model"}
    assert cost_model.ENTRY.config is cost_model.CostModelConfig
    assert cost_model.make_cost_model().config == cost_model.CostModelConfig()


@pytest.mark.parametrize(
    "module",
    [
        "specpolicy.costs",
        "specpolicy.sim.profile",
        "specpolicy.policies._cost_table",
        "specpolicy.policies._cost_acceptance",
        "specpolicy.adapters.commands_adapters",
    ],
)
def test_no_module_is_kept_only_for_a_former_import_path(module: str) -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(module)


def test_the_registry_names_are_not_importable_from_the_policy_module() -> None:
    import specpolicy.policy as policy

    assert not hasattr(policy, "parse_config") and not hasattr(policy, "make_policy")
