"""Configuration: every spec form make_policy accepts, and a corpus of bad configs with the field named."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from specpolicy import ConfigError, SpecMode, StepStats, available_policies, make_policy, parse_config
from specpolicy.registry import config_json_schema, config_union

HYST = {"name": "hysteresis", "disable_at": 40, "enable_at": 20, "min_dwell_steps": 5, "num_steps": 4}


def _behaviour(spec: Any) -> list[int]:
    p = make_policy(spec)
    return [p.decide(StepStats(b)).num_steps for b in (1, 45, 45, 30, 10, 10, 10, 10, 10, 10, 50)]


def test_spec_forms_agree() -> None:
    want = _behaviour(HYST)
    assert want == [4, 0, 0, 0, 0, 0, 4, 4, 4, 4, 4]  # off at step 1 is held 5 steps; on at 6 holds past 10
    assert _behaviour(json.dumps(HYST)) == want
    assert _behaviour(parse_config(HYST)) == want
    built = make_policy("hysteresis", disable_at=40, enable_at=20, min_dwell_steps=5, num_steps=4)
    assert built.config == parse_config(HYST)  # type: ignore[attr-defined]


@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml", ".toml"])
def test_file_configs(tmp_path: Path, suffix: str) -> None:
    path = tmp_path / f"policy{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(HYST))
    elif suffix == ".toml":
        path.write_text("".join(f"{k} = {json.dumps(v)}\n" for k, v in HYST.items()))
    else:
        path.write_text("".join(f"{k}: {v}\n" for k, v in HYST.items()))
    assert parse_config(str(path)) == parse_config(HYST)
    assert parse_config(path) == parse_config(HYST)  # os.PathLike
    assert _behaviour(str(path)) == _behaviour(HYST)


def test_file_with_a_policy_table_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "engine.toml"
    path.write_text('[policy]\nname = "threshold"\nmax_batch_size = 16\n')
    config = parse_config(str(path), num_steps=5)
    assert config.model_dump() == {"name": "threshold", "max_batch_size": 16, "num_steps": 5}


@pytest.mark.parametrize(
    ("spec", "overrides", "pattern"),
    [
        ("no_such_policy", {}, r"^name: unknown policy 'no_such_policy'; available: .*threshold"),
        ({"disable_at": 3}, {}, r"^name: missing policy name"),
        ({"name": 7}, {}, r"^name: must be a policy name \(a string\), got 7"),
        ("threshold", {"max_batch_size": -1}, r"^threshold\.max_batch_size: .*greater than or equal to 0"),
        ("threshold", {"max_batch_size": "many"}, r"^threshold\.max_batch_size: must be an integer, got"),
        ("threshold", {"num_steps": 0}, r"^threshold\.num_steps: .*greater than or equal to 1"),
        ("threshold", {"num_steps": 65}, r"^threshold\.num_steps: .*less than or equal to 64"),
        ("threshold", {"max_batch": 4}, r"^threshold\.max_batch: unknown field"),
        ("static", {"num_steps": -1}, r"^static\.num_steps: "),
        ("hysteresis", {"enable_at": 60}, r"^hysteresis\.enable_at: must be < disable_at \(48\), got 60"),
        ("hysteresis", {"min_dwell_steps": 1.5}, r"^hysteresis\.min_dwell_steps: "),
        ("schedule", {"table": [[1, 2, 1], [2, 3, 0]]}, r"^schedule\.table: entry 1 \[2, 3, 0\] overlaps"),
        ("schedule", {"table": "1-4:3"}, r"^schedule\.table: "),
        ("acceptance", {"steps": [4, 2]}, r"^acceptance\.steps: must be strictly ascending"),
        ("acceptance", {"ewma_alpha": "fast"}, r"^acceptance\.ewma_alpha: "),
        ("acceptance", {"probe_interval": -5}, r"^acceptance\.probe_interval: .*greater than or equal to 1"),
        ('{"name": "threshold",', {}, r"not valid JSON"),
        ("missing/policy.yaml", {}, r"policy config file not found: missing/policy.yaml"),
        (3.5, {}, r"policy spec must be a name, a mapping, a JSON string or a file path"),
    ],
)
def test_bad_config_corpus_names_the_field(spec: Any, overrides: dict[str, Any], pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        make_policy(spec, **overrides)


def test_bad_file_contents(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        parse_config(str(bad))
    listy = tmp_path / "list.json"
    listy.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="top level must be a mapping"):
        parse_config(str(listy))
    other = tmp_path / "x.ini"
    other.write_text("name=static")
    with pytest.raises(ConfigError, match="unsupported extension"):
        parse_config(other)


def test_config_union_is_tagged_on_name_and_covers_every_policy() -> None:
    schema = config_json_schema()
    assert schema["discriminator"]["propertyName"] == "name"
    assert set(schema["discriminator"]["mapping"]) == set(available_policies())
    parsed = config_union().validate_python({"name": "threshold", "max_batch_size": 9})
    assert parsed == parse_config({"name": "threshold", "max_batch_size": 9})
    with pytest.raises(ValueError, match="max_batch_size"):
        config_union().validate_python({"name": "threshold", "max_batch_size": -9})


def test_make_policy_returns_independent_instances() -> None:
    a, b = make_policy("hysteresis", min_dwell_steps=1), make_policy("hysteresis", min_dwell_steps=1)
    assert a.decide(StepStats(100)) == SpecMode.off()
    assert b.decide(StepStats(30)) == SpecMode.on(3)  # b did not see a's history
