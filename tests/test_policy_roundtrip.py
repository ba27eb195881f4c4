"""What ``check-config`` prints is valid input again, giving an equal config; ``candidate_steps`` = steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specpolicy import available_policies, parse_config
from specpolicy.cli import main
from specpolicy.errors import ConfigError


def _check_config(capsys: pytest.CaptureFixture[str], arg: str) -> dict[str, object]:
    assert main(["check-config", arg]) == 0
    printed: dict[str, object] = json.loads(capsys.readouterr().out)
    return printed


@pytest.mark.parametrize("name", available_policies())
def test_every_default_config_round_trips_through_check_config(
    name: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    printed = _check_config(capsys, name)
    assert "candidate_steps" in printed  # the derived field is part of what is printed
    again = _check_config(capsys, json.dumps(printed))
    assert again == printed
    path = tmp_path / "printed.json"
    path.write_text(json.dumps(printed))
    assert parse_config(path) == parse_config(name)


def test_a_non_default_config_round_trips(capsys: pytest.CaptureFixture[str]) -> None:
    spec = {"name": "cost_model", "steps": [2, 4], "allow_off": False, "switch_margin": 0.05}
    printed = _check_config(capsys, json.dumps(spec))
    assert printed["candidate_steps"] == [2, 4]
    assert parse_config(printed) == parse_config(spec)


def test_a_candidate_steps_that_contradicts_the_fields_is_named() -> None:
    with pytest.raises(ConfigError, match=r"hysteresis\.candidate_steps: .*\[0, 3\]"):
        parse_config({"name": "hysteresis", "candidate_steps": [0, 2]})
    with pytest.raises(ConfigError, match=r"acceptance\.candidate_steps"):
        parse_config({"name": "acceptance", "steps": [1, 2], "candidate_steps": [0, 1, 3]})


@pytest.mark.parametrize("name", ["acceptance", "cost_model"])
def test_candidate_steps_stands_for_steps(name: str) -> None:
    assert parse_config({"name": name, "candidate_steps": [1, 3]}).steps == (1, 3)  # type: ignore[attr-defined]
    # SGLang's lists carry 0 (off); off stays the policy's rule, as with steps
    cfg = parse_config({"name": name, "candidate_steps": [0, 2, 5]})
    assert cfg.steps == (2, 5)  # type: ignore[attr-defined]
    assert cfg.candidate_steps() == (0, 2, 5)
    with pytest.raises(ConfigError, match=rf"{name}\.steps: must be strictly ascending"):
        parse_config({"name": name, "candidate_steps": [0, 3, 2]})


def test_candidate_steps_is_no_alias_for_policies_without_steps() -> None:
    with pytest.raises(ConfigError, match=r"threshold\.candidate_steps"):
        parse_config({"name": "threshold", "candidate_steps": [0, 5]})


def test_tuned_configs_round_trip(capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("cost_model", "acceptance"):
        rc = main(
            [
                "tune", "--policy", name, "--workload", "sweep", "--concurrency", "4,96", "--duration", "2",
                "--budget", "2", "--decide-cost-us", "0.5", "--jobs", "1",
            ]
        )
        assert rc == 0
        tuned = json.loads(capsys.readouterr().out)
        printed = _check_config(capsys, json.dumps(tuned))
        assert parse_config(printed) == parse_config(tuned)
        assert _check_config(capsys, json.dumps(printed)) == printed
