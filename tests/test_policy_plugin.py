"""A third-party policy registered through the ``specpolicy.policies`` entry point of an installed package.

The package lives in tests/fixtures/example_plugin and is installed (pip install -e) by scripts/test.sh;
nothing here touches the registry directly.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

import pytest

from specpolicy import SpecMode, StepStats, available_policies, make_policy, parse_config
from specpolicy.policy import ENTRY_POINT_GROUP

DIST = "specpolicy-example-plugin"


@pytest.fixture(scope="module", autouse=True)
def _installed() -> None:
    try:
        metadata.distribution(DIST)
    except metadata.PackageNotFoundError:
        pytest.fail(f"{DIST} is not installed: pip install -e tests/fixtures/example_plugin (test.sh does)")


def test_the_entry_point_is_declared_by_the_installed_distribution() -> None:
    eps = [ep for ep in metadata.entry_points(group=ENTRY_POINT_GROUP) if ep.name == "every_other"]
    assert eps and eps[0].dist is not None and eps[0].dist.metadata["Name"] == DIST
    assert eps[0].value == "specpolicy_example_plugin:ENTRY"


def test_listed_and_built_like_a_builtin() -> None:
    assert "every_other" in available_policies()
    policy = make_policy({"name": "every_other", "num_steps": 3})
    assert [policy.decide(StepStats(4)) for _ in range(4)] == [SpecMode.on(3), SpecMode.off()] * 2
    assert parse_config("every_other").candidate_steps() == (0, 2)


def test_its_config_is_validated_with_the_field_named() -> None:
    with pytest.raises(ValueError, match=r"^every_other\.num_steps: "):
        make_policy("every_other", num_steps=99)


def test_the_cli_lists_and_checks_it() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "specpolicy.cli", "policies"], capture_output=True, text=True, timeout=60
    )
    assert listed.returncode == 0 and "every_other: Alternate off / on(num_steps)" in listed.stdout
    checked = subprocess.run(
        [sys.executable, "-m", "specpolicy.cli", "check-config", '{"name": "every_other", "num_steps": 5}'],
        capture_output=True, text=True, timeout=60,
    )
    assert checked.returncode == 0 and '"num_steps": 5' in checked.stdout
