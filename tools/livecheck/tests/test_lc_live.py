"""The live check itself: only where a CUDA GPU and SGLang 0.5.12.post1 are installed (never in CI).

It runs a shortened plan of ``specpolicy-livecheck run`` on both worker paths (one repeat, a 10 s ramp,
two resume stretches) and requires every check to pass. The full run and its figures are in
docs/results/methodology.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest


def _gpu_and_sglang() -> str | None:
    if importlib.util.find_spec("torch") is None:
        return "torch is not installed"
    import torch

    if not torch.cuda.is_available():
        return (
            "no CUDA GPU on this machine (the live SGLang check needs one; "
            "results: docs/results/methodology.md)"
        )
    try:
        import importlib.metadata as md

        version = md.version("sglang")
    except Exception:
        return "sglang is not installed"
    if version != "0.5.12.post1":
        return f"the live check targets sglang 0.5.12.post1, found {version}"
    if importlib.util.find_spec("specpolicy_gpucheck") is None:
        return "the test policies (pip install tools/livecheck/policies) are not installed"
    return None


REASON = _gpu_and_sglang()


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(REASON is not None, reason=REASON or "")
def test_live_check_passes_on_both_worker_paths(tmp_path: Path) -> None:
    script = ["-m", "specpolicy_livecheck"]
    out = tmp_path / "out"
    rc = subprocess.call(
        [
            sys.executable,
            *script,
            "run",
            "--work",
            str(tmp_path / "w"),
            "--out",
            str(out),
            "--paths",
            "v2,v1",
            "--concurrency",
            "1,8",
            "--perf-tokens",
            "64",
            "--repeats",
            "1",
            "--min-batch-s",
            "0",
            "--ramp-s",
            "10",
            "--resume-k",
            "1,8",
            "--budget-s",
            os.environ.get("GC_BUDGET_S", "900"),
        ]
    )
    res = tmp_path / "res"
    with tarfile.open(out / "results-v2-v1-triton.tar.gz") as tar:
        tar.extractall(res)
    rc_a = subprocess.call([sys.executable, *script, "analyze", str(res), "--json", str(tmp_path / "r.json")])
    report = json.loads((tmp_path / "r.json").read_text())
    assert rc == 0 and rc_a == 0, json.dumps({k: e["verdicts"] for k, e in report["engines"].items()})
