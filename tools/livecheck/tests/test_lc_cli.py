"""specpolicy-livecheck: every subcommand answers --help under its own name, the plan prints without a
GPU, and a wrong name is refused with the list of right ones."""

from __future__ import annotations

import subprocess
import sys

import pytest
import tomllib
from lc_env import child_env
from specpolicy_livecheck import cli, plan
from specpolicy_livecheck.paths import PACKAGE

SUBCOMMANDS = sorted(cli.COMMANDS)
BUNDLE_TOOLS = sorted(cli.BUNDLE)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    """The command as a user runs it (``python -m``: the console script calls the same ``main``)."""
    return subprocess.run(
        [sys.executable, "-m", "specpolicy_livecheck", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=child_env(),
        check=False,
    )


def test_the_console_script_is_the_clis_main() -> None:
    meta = tomllib.loads((PACKAGE.parents[1] / "pyproject.toml").read_text())
    assert meta["project"]["scripts"] == {"specpolicy-livecheck": "specpolicy_livecheck.cli:main"}


def test_the_overview_lists_every_subcommand() -> None:
    proc = _run("--help")
    assert proc.returncode == 0, proc.stderr
    listed = {ln.split()[0] for ln in proc.stdout.splitlines() if ln.startswith("  ")}
    assert listed == {*cli.COMMANDS, "bundle"}


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_each_subcommand_has_its_own_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:  # argparse exits 0 after printing the help
        cli.main([name, "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {cli.PROG} {name}"), out[:200]


@pytest.mark.parametrize("tool", BUNDLE_TOOLS)
def test_each_bundle_tool_has_its_own_help(tool: str, capsys: pytest.CaptureFixture[str]) -> None:
    entry = cli.BUNDLE[tool]
    if isinstance(entry, cli.Script):  # a shell script: its usage comment
        assert cli.main(["bundle", tool, "--help"]) == 0
        out = capsys.readouterr().out
        assert "Usage: specpolicy-livecheck bundle " + tool in out, out[:400]
        return
    with pytest.raises(SystemExit) as exc:
        cli.main(["bundle", tool, "--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {cli.PROG} bundle {tool}")


def test_the_plan_prints_the_runs_dry_run_without_a_gpu() -> None:
    """``plan`` is ``run --dry-run`` without the folders: the same plan, the same estimate."""
    opts = ["--paths", "v2,base_v2", "--concurrency", "1,16", "--ramp-s", "0", "--budget-s", "400"]
    planned = _run("plan", *opts)
    dry = _run("run", "--work", "/nonexistent/w", "--out", "/nonexistent/o", *opts, "--dry-run")
    assert planned.returncode == 0 and dry.returncode == 0, planned.stderr + dry.stderr
    assert planned.stdout == dry.stdout
    runs = plan.build_plan(("v2", "base_v2"), concurrency=(1, 16), ramp_s=0)
    assert planned.stdout.strip() == plan.format_plan(runs, 400.0, margin_s=10.0).strip()
    assert "v2/triton" in planned.stdout and "base_v2/triton" in planned.stdout


def test_a_bundle_row_prints_through_the_cli(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["bundle", "sglang", "pins", "--release", "0.5.17"]) == 0
    assert capsys.readouterr().out.split()[0] == "sglang==0.5.17"


@pytest.mark.parametrize(("argv", "named"), [(["nonsense"], "plan"), (["bundle", "nonsense"], "make-sglang")])
def test_an_unknown_name_is_refused_with_the_known_ones(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "nonsense" in err and named in err


def test_no_subcommand_prints_the_overview_and_fails(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert "usage: specpolicy-livecheck <subcommand>" in capsys.readouterr().out
