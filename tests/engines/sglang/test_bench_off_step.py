"""benchmarks/bench_off_step.py runs on the real worker code of this release and reports every drafter."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import SGLANG_VERSION

from specpolicy.adapters.sglang.legacy.targets import SUPPORTED_VERSIONS

if SGLANG_VERSION not in SUPPORTED_VERSIONS:
    pytest.skip(f"legacy paths need sglang {' or '.join(SUPPORTED_VERSIONS)}", allow_module_level=True)

ROOT = Path(__file__).resolve().parents[3]


def test_the_off_step_benchmark_reports_each_drafter() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_off_step.py"), "--steps", "3", "--repeats", "2"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = re.findall(r"^(.+?)\s+([\d.]+) us per off step$", proc.stdout, flags=re.M)
    assert [label for label, _ in rows] == [
        "draft model, lazy",
        "EAGLE, lazy (hidden states kept)",
        "EAGLE, per_step (extend stand-in)",
    ]
    assert all(float(us) > 0 for _, us in rows)


def test_the_op_count_shows_the_eagle_drafter_keeping_its_hidden_state() -> None:
    """``--ops``: the lazy EAGLE off step dispatches the window's write, which the draft model's does not."""
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_off_step.py"),
            "--steps",
            "3",
            "--repeats",
            "1",
            "--ops",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = dict(re.findall(r"^(.+?)\s+[\d.]+ tensor ops per off step \((.*)\)$", proc.stdout, flags=re.M))
    assert set(rows) == {
        "draft model, lazy",
        "EAGLE, lazy (hidden states kept)",
        "EAGLE, per_step (extend stand-in)",
    }
    assert "index_put_" in rows["EAGLE, lazy (hidden states kept)"]
    assert "index_put_" not in rows["draft model, lazy"]
