"""The shipped profiles are what scripts/build_profiles.py makes from the measured data (if present)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from specpolicy.profiles import available_profiles

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "build_profiles.py"
#: the raw H200 measurements (h200-step-costs.json), where a machine has them
DATA = Path(os.environ.get("SPECPOLICY_STEP_COST_DATA", "/nonexistent/h200-step-costs.json"))


@pytest.mark.skipif(not DATA.is_file(), reason="SPECPOLICY_STEP_COST_DATA names no raw H200 data file")
def test_shipped_profiles_are_reproducible_from_the_data() -> None:
    spec = importlib.util.spec_from_file_location("build_profiles", SCRIPT)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    built = mod.build(DATA)
    # Every shipped profile except those fitted from a live engine trace is rebuilt from the measured data.
    assert sorted(built) == [n for n in available_profiles() if n != "h200-live-sglang"]
    for name, doc in built.items():
        shipped = json.loads((ROOT / "specpolicy" / "profiles" / "shipped" / f"{name}.json").read_text())
        assert shipped == doc, f"{name}.json is stale: run scripts/build_profiles.py"
