"""Configuration text that used to escape as a traceback, or to print megabytes: each is one ConfigError.

A control character in a YAML file, a NUL byte in a path, nesting hundreds of levels deep in a mapping
passed directly, YAML 1.1's base-60 numbers, and a config with 200,000 unknown keys (whose message is cut to
``MAX_ERROR_LINES`` problems and a count).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError

from specpolicy import ConfigError, parse_config
from specpolicy.config_files import MAX_DEPTH, load_file
from specpolicy.errors import MAX_ERROR_LINES, format_validation_error
from specpolicy.runtime.settings import AdapterSettings


@pytest.mark.parametrize("char", ["\x07", "\x00", "\x1b", "\ufffe"])
def test_a_control_character_in_a_yaml_file_is_a_config_error(tmp_path: Path, char: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"name: static\nnum_steps: 3{char}\n", encoding="utf-8")
    with pytest.raises(ConfigError, match=r"p\.yaml: cannot parse: .*character"):
        parse_config(path)


@pytest.mark.parametrize("text", ["1:04", "1:00:00", "-2:30", "1:30.5"])
def test_yaml_base_60_numbers_are_strings_so_a_number_field_refuses_them(tmp_path: Path, text: str) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(f"name: static\nnum_steps: {text}\n")
    with pytest.raises(ConfigError, match=r"num_steps: .*" + repr(text)):
        parse_config(path)
    path.write_text(f"a: {text}\nb: 64\nc: 0.5\n")
    assert load_file(path) == {"a": text, "b": 64, "c": 0.5}  # plain numbers are still numbers


@pytest.mark.parametrize("spec", ["cfg\x00.json", Path("cfg\x00.yaml")])
def test_a_path_with_a_nul_byte_is_a_config_error(spec: Any) -> None:
    with pytest.raises(ConfigError, match="NUL byte"):
        parse_config(spec)


def _nested(name: str, depth: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "static"}
    for _ in range(depth):
        spec = {"name": name, "inner": spec}
    return spec


@pytest.mark.parametrize("name", ["gate", "clamp"])
def test_compositions_nested_hundreds_deep_are_a_config_error(name: str) -> None:
    with pytest.raises(ConfigError, match=f"nested more than {MAX_DEPTH} levels deep"):
        parse_config(_nested(name, 400))
    with pytest.raises(ConfigError, match="nested more than"):
        AdapterSettings.build(_nested(name, 400))
    assert parse_config(_nested(name, 3)).name == name  # a sane nesting still parses


def test_two_hundred_thousand_unknown_keys_give_a_bounded_message(tmp_path: Path) -> None:
    path = tmp_path / "big.json"
    path.write_text(json.dumps({"name": "static", **{f"k{i}": 1 for i in range(200_000)}}))
    with pytest.raises(ConfigError) as info:
        parse_config(path)
    lines = str(info.value).splitlines()
    assert len(lines) == MAX_ERROR_LINES + 1
    assert lines[0] == "static.k0: unknown field (not a parameter of this policy)"
    assert lines[-1] == f"... and {200_000 - MAX_ERROR_LINES} more unknown fields (200000 in all)"


def test_many_bad_values_are_cut_to_the_first_problems_and_a_count() -> None:
    with pytest.raises(ValidationError) as info:
        TypeAdapter(list[int]).validate_python(["x"] * 50)
    lines = format_validation_error(info.value).splitlines()
    assert len(lines) == MAX_ERROR_LINES + 1
    assert lines[0].startswith("0: ") and lines[MAX_ERROR_LINES - 1].startswith(f"{MAX_ERROR_LINES - 1}: ")
    assert lines[-1] == f"... and {50 - MAX_ERROR_LINES} more problems (50 in all)"
