"""Configuration errors say what to do: the extension, the field meant, every problem at once."""

from __future__ import annotations

from pathlib import Path

import pytest

from specpolicy import parse_config
from specpolicy.cli import main
from specpolicy.errors import ConfigError


def _error(spec: object) -> str:
    with pytest.raises(ConfigError) as exc:
        parse_config(spec)
    return str(exc.value)


@pytest.mark.parametrize("relative", [True, False])
def test_an_unsupported_extension_is_named_with_the_supported_ones(tmp_path: Path, relative: bool) -> None:
    path = tmp_path / "p.cfg"
    path.write_text('{"name": "static"}')
    msg = _error("p.cfg" if relative else str(path))
    assert "unknown policy" not in msg
    assert "unsupported extension '.cfg'" in msg and ".json, .yaml, .yml, .toml" in msg


def test_an_unknown_field_suggests_the_closest_one() -> None:
    assert "did you mean 'disable_at'?" in _error({"name": "hysteresis", "disabel_at": 10})
    assert "did you mean" not in _error({"name": "hysteresis", "colour": "red"})


def test_a_cross_field_error_is_shown_next_to_field_errors() -> None:
    msg = _error({"name": "hysteresis", "disable_at": 10, "enable_at": 20, "min_dwell_steps": 0})
    lines = msg.splitlines()
    assert lines[0].startswith("hysteresis.min_dwell_steps: ")
    assert lines[1].startswith("hysteresis.enable_at: must be < disable_at (10), got 20")


def test_no_cross_field_error_is_made_up_from_a_default() -> None:
    # disable_at is invalid; its default (48) is above enable_at, so no second line may blame enable_at
    assert _error({"name": "hysteresis", "disable_at": 0, "enable_at": 20}).count("\n") == 0


def test_the_cli_prints_every_line(capsys: pytest.CaptureFixture[str]) -> None:
    spec = '{"name": "acceptance", "steps": [1], "min_accept_length": 5, "ewma_alpha": 0}'
    assert main(["check-config", spec]) == 1
    err = capsys.readouterr().err
    assert "acceptance.ewma_alpha" in err
    assert "acceptance.min_accept_length: must be < 1 + the smallest" in err
