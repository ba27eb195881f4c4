"""The core commands: ``specpolicy --help``, ``policies`` and ``check-config``, with their exit codes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specpolicy import available_policies, parse_config
from specpolicy.cli import main


def test_help_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "policies" in out and "check-config" in out


def test_policies_lists_every_policy_with_parameters_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies"]) == 0
    out = capsys.readouterr().out
    for name in available_policies():
        assert f"\n{name}" in f"\n{out}", name
    assert "    max_batch_size: int = 32  [>=0]" in out
    assert "    min_dwell_steps: int = 32  [>=1]" in out
    assert "    probe_interval: int = 64  [>=1 <=1000000]" in out
    assert "    table: tuple[tuple[int, int, int], ...] = [[1, 7, 3]," in out


def test_policies_json_is_a_schema_per_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["policies", "--json"]) == 0
    schemas = json.loads(capsys.readouterr().out)
    assert set(schemas) == set(available_policies())
    assert schemas["hysteresis"]["properties"]["disable_at"]["minimum"] == 1


def test_check_config_prints_the_normalised_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check-config", '{"name": "schedule", "draft_len_schedule": {"4": 4, "8": 2}}']) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["table"] == [[1, 4, 4], [5, 8, 2], [9, 9, 0]]
    assert out["candidate_steps"] == [0, 2, 4]
    assert parse_config({k: v for k, v in out.items() if k != "candidate_steps"}).model_dump(mode="json") == {
        k: v for k, v in out.items() if k != "candidate_steps"
    }


def test_check_config_reads_files(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("name: acceptance\nsteps: [1, 3]\n")
    assert main(["check-config", str(path)]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["steps"] == [1, 3] and out["candidate_steps"] == [0, 1, 3]


@pytest.mark.parametrize(
    ("arg", "field"),
    [
        ('{"name": "hysteresis", "disable_at": 8, "enable_at": 9}', "hysteresis.enable_at"),
        ('{"name": "threshold", "bogus": 1}', "threshold.bogus"),
        ("nonexistent", "name"),
    ],
)
def test_check_config_exits_one_naming_the_field(
    arg: str, field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", arg]) == 1
    err = capsys.readouterr().err
    assert "invalid configuration" in err and f"{field}: " in err


def test_console_script_exit_codes() -> None:
    exe = shutil.which("specpolicy")
    cmd = [exe] if exe else [sys.executable, "-m", "specpolicy.cli"]
    ok = subprocess.run([*cmd, "check-config", "threshold"], capture_output=True, text=True, timeout=60)
    assert ok.returncode == 0 and '"max_batch_size": 32' in ok.stdout
    bad = subprocess.run(
        [*cmd, "check-config", '{"name": "threshold", "num_steps": 0}'],
        capture_output=True, text=True, timeout=60,
    )
    assert bad.returncode == 1 and "threshold.num_steps" in bad.stderr
    usage = subprocess.run([*cmd, "check-config"], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2  # argparse: missing argument


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from specpolicy import __version__

    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"specpolicy {__version__}"


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["simulate", "--seed", "x"], "--seed"), (["profile", "show"], "NAME|FILE"), (["tune"], "--policy")],
)
def test_a_bad_argument_is_one_line_not_the_whole_usage(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "usage:" not in err
    assert named in err and err.startswith(f"specpolicy {argv[0]}") and "--help)" in err
