"""Make scripts/gpu (the live GPU check's modules) and the test-policy package importable for these tests.

The test policies are loaded as a module, not by putting their project folder on sys.path: a build of that
project leaves metadata there, and its entry points would then register the deliberately failing test
policies for every other test in the session.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "scripts", ROOT / "scripts" / "gpu"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

if "specpolicy_gpucheck" not in sys.modules:
    _init = ROOT / "scripts" / "gpu" / "gpucheck_policies" / "specpolicy_gpucheck" / "__init__.py"
    _spec = importlib.util.spec_from_file_location("specpolicy_gpucheck", _init)
    assert _spec is not None and _spec.loader is not None
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["specpolicy_gpucheck"] = _mod
    _spec.loader.exec_module(_mod)


@pytest.fixture(autouse=True)
def _disarm_catch_up_skip() -> Iterator[None]:
    """The skipped-catch-up switch is process-wide (it wraps a class method): no test leaves it armed."""
    yield
    sys.modules["specpolicy_gpucheck"].CATCH_UP_SKIP.armed = False
