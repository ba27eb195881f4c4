"""Configuration input is bounded and strict: every bad config in benchmarks/bench_bad_configs.py is refused
with a short ConfigError naming the problem, and check-config runs exactly make_policy's validation."""

from __future__ import annotations

from pathlib import Path

import pytest
from _benchmarks import load

from specpolicy import ConfigError, make_policy, parse_config
from specpolicy.cli import main

bench = load("bench_bad_configs")


@pytest.mark.parametrize("case", bench.CASES, ids=[c.label for c in bench.CASES])
def test_a_bad_config_gets_a_short_error_naming_the_problem(case: object) -> None:
    clear, what = bench.check(case)
    assert clear, what


def test_check_config_and_make_policy_reject_the_same_garbage_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prof = tmp_path / "profile.json"
    prof.write_text('{"not": "a profile"}')
    spec = f'{{"name": "cost_model", "profile": "{prof}"}}'
    with pytest.raises(ConfigError, match=r"^cost_model\.profile: "):
        make_policy(spec)
    assert main(["check-config", spec]) != 0
    assert "cost_model.profile" in capsys.readouterr().err


def test_anchors_without_aliases_and_lists_for_tuples_still_load(tmp_path: Path) -> None:
    f = tmp_path / "p.yaml"
    f.write_text("name: &n cost_model\nsteps: [1, 2, 4]\nprior_acceptance: 0.5\nmin_dwell_steps: 8\n")
    cfg = parse_config(f)
    assert cfg.name == "cost_model" and cfg.steps == (1, 2, 4)  # type: ignore[attr-defined]
    assert parse_config({"name": "cost_model", "switch_margin": 1}).switch_margin == 1.0  # type: ignore[attr-defined]
