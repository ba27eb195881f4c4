"""A third-party policy registered through the ``specpolicy.policies`` entry point of an installed package.

The package (tests/fixtures/example_plugin) is installed by pip into a directory this module owns, and the
checks run in Python processes that have that directory on their path: the route is the real one (a built
distribution, its entry-point metadata), and the environment running the tests never sees the plugin.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specpolicy import available_policies

#: pip builds and installs a package (a few seconds): out of the fast loop.
pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).parent / "fixtures" / "example_plugin"
DIST = "specpolicy-example-plugin"


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory: pytest.TempPathFactory) -> str:
    work = tmp_path_factory.mktemp("plugin")
    source, target = work / "source", work / "site"
    shutil.copytree(FIXTURE, source)  # pip builds in the source tree: keep the checkout clean
    cmd = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(source)]
    # Offline and faster with the build tools at hand; otherwise pip fetches them (build isolation).
    proc = subprocess.run([*cmd, "--no-build-isolation"], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    root = Path(__file__).resolve().parents[1]
    return os.pathsep.join([str(target), str(root)])


def _python(plugin_path: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=plugin_path)
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, env=env, check=False
    )


def _run(plugin_path: str, code: str) -> str:
    proc = _python(plugin_path, "-c", code)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_entry_point_is_declared_by_the_installed_distribution(plugin_path: str) -> None:
    out = _run(
        plugin_path,
        "from importlib import metadata\n"
        "ep = [e for e in metadata.entry_points(group='specpolicy.policies') if e.name == 'every_other'][0]\n"
        "print(ep.dist.metadata['Name'], ep.value)",
    )
    assert out.split() == [DIST, "specpolicy_example_plugin:ENTRY"]


def test_listed_and_built_like_a_builtin(plugin_path: str) -> None:
    out = _run(
        plugin_path,
        "from specpolicy import SpecMode, StepStats, available_policies, make_policy, parse_config\n"
        "p = make_policy({'name': 'every_other', 'num_steps': 3})\n"
        "print('every_other' in available_policies())\n"
        "print([p.decide(StepStats(4)) == m for m in (SpecMode.on(3), SpecMode.off()) * 2])\n"
        "print(parse_config('every_other').candidate_steps())",
    )
    assert out.splitlines() == ["True", "[True, True, True, True]", "(0, 2)"]


def test_its_config_is_validated_with_the_field_named(plugin_path: str) -> None:
    out = _run(
        plugin_path,
        "from specpolicy import ConfigError, make_policy\n"
        "try:\n    make_policy('every_other', num_steps=99)\n"
        "except ConfigError as exc:\n    print(exc)",
    )
    assert out.startswith("every_other.num_steps: ")


def test_the_cli_lists_and_checks_it(plugin_path: str) -> None:
    listed = _python(plugin_path, "-m", "specpolicy.cli", "policies")
    assert listed.returncode == 0 and "every_other: Alternate off / on(num_steps)" in listed.stdout
    config = '{"name": "every_other", "num_steps": 5}'
    checked = _python(plugin_path, "-m", "specpolicy.cli", "check-config", config)
    assert checked.returncode == 0 and '"num_steps": 5' in checked.stdout


def test_the_environment_running_the_tests_does_not_have_it(plugin_path: str) -> None:
    assert "every_other" not in available_policies()
    assert importlib.util.find_spec("specpolicy_example_plugin") is None
