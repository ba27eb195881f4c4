"""Plugins that misbehave: an alias taking a built-in's name, sys.exit() at import, unparsable metadata.

Each test installs small distributions into a temporary sys.path entry (a ``*.dist-info`` directory with an
``entry_points.txt`` and a module) and rebuilds the registry around them.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from specpolicy import ConfigError, make_policy, parse_config, registry
from specpolicy.policies.hysteresis import HysteresisPolicy
from specpolicy.registry import broken_plugins

_PLUGIN = '''
from typing import Literal
from specpolicy import PolicyConfig, PolicyEntry, SpecMode

class Cfg(PolicyConfig):
    name: Literal["{name}"] = "{name}"
    def candidate_steps(self):
        return (0,)

class Pol:
    def __init__(self, config):
        pass
    def decide(self, stats):
        return SpecMode.off()
    def reset(self):
        pass

ENTRY = PolicyEntry("{name}", Cfg, Pol, aliases={aliases!r})
'''


def _dist(root: Path, dist: str, entry_points: str, module: str = "", source: str = "") -> None:
    info = root / f"{dist}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    if module:
        (root / f"{module}.py").write_text(source)


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    registry._registry.cache_clear()
    registry._config_union.cache_clear()
    yield tmp_path
    registry._registry.cache_clear()
    registry._config_union.cache_clear()


def _plugin(root: Path, name: str, aliases: tuple[str, ...] = ()) -> None:
    module = f"sp_plugin_{name}"
    _dist(root, f"sp-plugin-{name}", f"[specpolicy.policies]\n{name} = {module}:ENTRY\n", module,
          _PLUGIN.format(name=name, aliases=aliases))


def test_a_plugin_alias_cannot_take_a_builtin_name(site: Path, caplog: pytest.LogCaptureFixture) -> None:
    _plugin(site, "hijack", aliases=("hysteresis", "goodput", "hijack_alias"))
    with caplog.at_level(logging.WARNING, logger="specpolicy.policy"):
        policy = make_policy({"name": "hysteresis", "disable_at": 8, "enable_at": 4})
    assert isinstance(policy, HysteresisPolicy)
    assert parse_config("goodput").name == "cost_model"
    assert parse_config("hijack_alias").name == "hijack"  # its own aliases still work
    warned = [r.getMessage() for r in caplog.records if "declares the alias" in r.getMessage()]
    assert len(warned) == 2 and all("'hijack'" in m and "sp_plugin_hijack" in m for m in warned)


def test_a_plugin_named_like_a_builtin_alias_is_not_registered(site: Path) -> None:
    _plugin(site, "goodput")
    assert parse_config("goodput").name == "cost_model"


def test_a_plugin_that_exits_at_import_is_skipped_and_the_rest_work(
    site: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _dist(site, "sp-exits", "[specpolicy.policies]\nexits = sp_exits:ENTRY\n", "sp_exits",
          "import sys\nsys.exit(3)\n")
    _plugin(site, "fine")
    with caplog.at_level(logging.ERROR, logger="specpolicy.policy"):
        assert parse_config("fine").name == "fine"
        assert parse_config("static").name == "static"
    lines = [r.getMessage() for r in caplog.records if "'exits'" in r.getMessage()]
    assert len(lines) == 1 and "SystemExit" in lines[0]


def test_a_malformed_entry_points_file_is_skipped_with_one_line(
    site: Path, caplog: pytest.LogCaptureFixture
) -> None:
    _dist(site, "sp-broken-metadata", "[specpolicy.policies]\nthis line has no equals sign\n")
    _plugin(site, "fine")
    with caplog.at_level(logging.ERROR, logger="specpolicy.policy"):
        assert "fine" in registry.available_policies() and "static" in registry.available_policies()
    lines = [r.getMessage() for r in caplog.records if "sp-broken-metadata" in r.getMessage()]
    assert len(lines) == 1 and "cannot parse" in lines[0]


def test_the_cli_keeps_working_beside_a_plugin_that_exits(tmp_path: Path) -> None:
    _dist(tmp_path, "sp-exits", "[specpolicy.policies]\nexits = sp_exits:ENTRY\n", "sp_exits",
          "import sys\nsys.exit(3)\n")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        from specpolicy.cli import main
        sys.exit(main(["check-config", "static"]))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert '"name": "static"' in out.stdout and "skipping policy plugin 'exits'" in out.stderr


_ODD_PLUGIN = '''
from typing import Literal
from pydantic import BaseModel
from specpolicy import PolicyConfig, PolicyEntry, SpecMode

class Pol:
    def __init__(self, config):
        pass
    def decide(self, stats):
        return SpecMode.off()
    def reset(self):
        pass

class NotPolicyConfig(BaseModel):
    name: Literal["plain_model"] = "plain_model"

class BadSteps(PolicyConfig):
    name: Literal["bad_steps"] = "bad_steps"
    def candidate_steps(self):
        raise RuntimeError("steps unknown")

class JunkSteps(PolicyConfig):
    name: Literal["junk_steps"] = "junk_steps"
    def candidate_steps(self):
        return (3, 1, 99)

class NotAPolicy(PolicyConfig):
    name: Literal["not_a_policy"] = "not_a_policy"
    def candidate_steps(self):
        return (0,)

def _entry(cls, factory=Pol):
    entry = object.__new__(PolicyEntry)  # past PolicyEntry's own checks, as a hand-made entry can be
    for field, value in (("name", cls.model_fields["name"].default), ("config", cls), ("factory", factory),
                         ("aliases", ()), ("builds_nested", False)):
        object.__setattr__(entry, field, value)
    return entry

PLAIN = _entry(NotPolicyConfig)
BAD_STEPS = PolicyEntry("bad_steps", BadSteps, Pol)
JUNK_STEPS = PolicyEntry("junk_steps", JunkSteps, Pol)
NOT_A_POLICY = PolicyEntry("not_a_policy", NotAPolicy, lambda config: "a string")
'''


def _odd_plugins(root: Path) -> None:
    names = ("plain_model", "bad_steps", "junk_steps", "not_a_policy")
    eps = "".join(f"{n} = sp_odd:{n.upper() if n != 'plain_model' else 'PLAIN'}\n" for n in names)
    _dist(root, "sp-odd", f"[specpolicy.policies]\n{eps}", "sp_odd", _ODD_PLUGIN)


def test_a_plugin_whose_config_is_not_a_policy_config_is_listed_as_broken(
    site: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from specpolicy.cli import main

    _odd_plugins(site)
    _plugin(site, "fine")
    assert "plain_model" not in registry.available_policies()
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    assert "static:" in out and "fine:" in out
    broken = out.split("broken plugins (not usable):", 1)[1]
    assert "plain_model" in broken and "PolicyConfig" in broken
    assert main(["policies", "--json"]) == 0
    assert "plain_model" in json.loads(capsys.readouterr().out)["broken_plugins"]


@pytest.mark.parametrize(
    ("name", "says"), [("bad_steps", "raised RuntimeError"), ("junk_steps", "ascending")]
)
def test_a_plugin_whose_candidate_steps_are_unusable_is_a_config_error(
    site: Path, name: str, says: str
) -> None:
    from specpolicy.runtime.settings import AdapterSettings

    _odd_plugins(site)
    with pytest.raises(ConfigError, match=rf"{name}\.candidate_steps: .*{says}"):
        parse_config(name)
    with pytest.raises(ConfigError, match="candidate_steps"):  # the adapters' settings: refused the same way
        AdapterSettings.build(name)


def test_a_factory_that_returns_no_policy_is_refused_when_building(site: Path) -> None:
    _odd_plugins(site)
    with pytest.raises(ConfigError, match=r"not_a_policy.*factory returned 'a string', not a policy"):
        make_policy("not_a_policy")


#: Static in capitals, with a Cyrillic s, in full-width letters; cost_model with a hyphen; an alias in
#: capitals; hysteresis with a Cyrillic y.
CONFUSABLE = [
    "Static",
    "\u0455tatic",
    "\uff33\uff54\uff41\uff54\uff49\uff43",
    "cost-model",
    "Goodput",
    "h\u0443steresis",
]


@pytest.mark.parametrize("name", CONFUSABLE)
def test_a_plugin_name_confusable_with_a_builtin_is_not_registered(site: Path, name: str) -> None:
    tag = name.encode().hex()  # one module per case: imports are cached
    module = f"sp_confusable_{tag}"
    _dist(site, f"sp-confusable-{tag}", f"[specpolicy.policies]\nlookalike = {module}:ENTRY\n", module,
          _PLUGIN.format(name=name, aliases=()))
    _plugin(site, "fine")
    assert name not in registry.available_policies() and "fine" in registry.available_policies()
    broken = broken_plugins()
    assert name in broken and "looks like the built-in policy" in broken[name]


def test_a_plugin_alias_confusable_with_a_builtin_is_not_registered(site: Path) -> None:
    _plugin(site, "mine", aliases=("Hysteresis", "mine_alias"))
    assert parse_config("mine_alias").name == "mine"
    with pytest.raises(ConfigError, match="unknown policy 'Hysteresis'"):
        parse_config("Hysteresis")


@pytest.mark.parametrize("group", ["console_scripts", "pydantic", "specpolicy.policies"])
def test_a_malformed_entry_points_file_anywhere_does_not_break_import_or_the_cli(
    tmp_path: Path, group: str
) -> None:
    _dist(tmp_path, "sp-broken-anywhere", f"[{group}]\nthis line has no equals sign\n")
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(tmp_path)!r})
        import specpolicy
        from specpolicy.cli import main
        assert specpolicy.parse_config("static").name == "static"
        sys.exit(main(["check-config", "static"]))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert '"name": "static"' in out.stdout
    assert "pydantic's plugin lookup failed" in out.stderr and out.stderr.count("plugin lookup failed") == 1
