"""The test-policy package for these tests, loaded as a module.

It is loaded from its file, not installed and not put on the import path as a project folder: a build of
that project leaves metadata there, and its entry points would then register the deliberately failing
test policies for every other test in the session. The tool itself is importable through the ``pythonpath``
setting of tools/livecheck/pyproject.toml (or an install).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator

import pytest
from specpolicy_livecheck.paths import POLICIES_PROJECT

if "specpolicy_gpucheck" not in sys.modules:
    _init = POLICIES_PROJECT / "specpolicy_gpucheck" / "__init__.py"
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
