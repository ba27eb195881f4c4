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
ROWS = [
    "speculation-free decode (v1 baseline)",
    "v1 draft model, lazy",
    "v1 EAGLE, lazy (hidden states kept)",
    "v1 EAGLE, per_step (extend stand-in)",
    "v2 draft model, lazy",
    "v2 EAGLE, lazy (hidden states kept)",
]


def _run(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_off_step.py"), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc.stdout


def test_the_off_step_benchmark_reports_each_drafter_on_each_worker() -> None:
    out = _run("--steps", "3", "--repeats", "2")
    rows = re.findall(
        r"^(.+?)\s+([\d.]+) us per off step,\s+(-?[\d.]+) us less the stand-in forwards$", out, flags=re.M
    )
    assert [label for label, _, _ in rows] == ROWS
    assert all(float(whole) > 0 for _, whole, _ in rows)
    assert f"specpolicy from {ROOT / 'specpolicy'}" in out  # the checkout's package, not an installed one


def test_the_op_count_shows_what_the_eagle_drafter_adds() -> None:
    """``--ops``: the lazy EAGLE off step adds the window's write, one ``index_copy_``, to the draft model's
    (v1 and v2: the FutureMap carries no placeholder for either), and no allocation; the catch-up of a full
    window is counted on its own."""
    out = _run("--steps", "3", "--repeats", "1", "--ops")
    pattern = (
        r"^(.+?)\s+per off step:\s+([\d.]+) tensor ops,\s+([\d.]+) allocations,\s+([\d.]+) Python calls"
        r" \((.*)\)$"
    )
    rows = {m[0]: m[1:] for m in re.findall(pattern, out, flags=re.M)}
    assert set(rows) == set(ROWS)
    for path in ("v1", "v2"):
        eagle, draft = rows[f"{path} EAGLE, lazy (hidden states kept)"], rows[f"{path} draft model, lazy"]
        assert "index_copy_ 1" in eagle[3] and "index_copy_" not in draft[3]
        assert float(eagle[0]) == float(draft[0]) + 1 and float(eagle[1]) == float(draft[1])
    # A v1 lazy off step dispatches what a speculation-free decode step does, plus the host-side sum of the
    # lengths the policy reads (two CPU ops, one allocation); its layout of the same ops differs: it lengthens
    # no ``orig_seq_lens`` (this batch has none) and converts no ids (the sampled int64 ones are fed as they
    # are; the speculation-free step's ``output_ids.to(int64)`` is a no-op here too).
    free = rows["speculation-free decode (v1 baseline)"]
    for label in ("v1 draft model, lazy", "v1 EAGLE, lazy (hidden states kept)"):
        extra = 1 if "EAGLE" in label else 0  # the window's write
        assert float(rows[label][0]) <= float(free[0]) + 1 + extra
        assert float(rows[label][1]) <= float(free[1]) + 1
    catch_up = r"^(v[12]) EAGLE, catch-up of a full window\s+once per W off steps:"
    catch_ups = re.findall(catch_up, out, flags=re.M)
    assert catch_ups == ["v1", "v2"]
