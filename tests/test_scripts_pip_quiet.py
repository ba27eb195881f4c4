"""scripts/pip-quiet.sh: the engine-env build hides pip's expected conflict report and nothing else."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "pip-quiet.sh"

# What pip 23-25 print after a --no-deps engine install (its resolver block), then a real failure.
FAKE_PIP = r"""
import sys
err = sys.stderr.write
err("ERROR: pip's dependency resolver does not currently take into account all the packages that are "
    "installed. This behaviour is the source of the following dependency conflicts.\n")
err("sglang 0.5.23 requires torch==2.14.1, but you have torch 2.13.0+cpu which is incompatible.\n")
err("sglang 0.5.23 requires flashinfer-python==0.6.1, which is not installed.\n")
print("Successfully installed x")
err("ERROR: No matching distribution found for nosuch==1\n")
sys.exit(int(sys.argv[1]))
"""


def _run(tmp_path: Path, status: int) -> tuple[subprocess.CompletedProcess[str], str]:
    tally = tmp_path / "conflicts.txt"
    env = dict(os.environ, SPECPOLICY_PIP_CONFLICTS=str(tally))
    proc = subprocess.run(
        ["bash", str(SCRIPT), sys.executable, "-c", FAKE_PIP, str(status)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )
    return proc, tally.read_text() if tally.exists() else ""


def test_the_conflict_report_is_counted_not_shown(tmp_path: Path) -> None:
    proc, tally = _run(tmp_path, 0)
    assert proc.returncode == 0
    assert "dependency resolver" not in proc.stderr and "requires" not in proc.stderr
    assert tally.splitlines() == [
        "sglang 0.5.23 requires torch==2.14.1, but you have torch 2.13.0+cpu which is incompatible.",
        "sglang 0.5.23 requires flashinfer-python==0.6.1, which is not installed.",
    ]
    assert proc.stdout == "Successfully installed x\n"


def test_real_errors_and_the_exit_status_stay(tmp_path: Path) -> None:
    proc, _ = _run(tmp_path, 1)
    assert proc.returncode == 1
    assert proc.stderr == "ERROR: No matching distribution found for nosuch==1\n"
