"""Shared set-up for the tests that run against a real SGLang package (one venv per pinned release).

Installs the stub finder for CUDA-only imports (see ``_stubs.py``) before anything imports SGLang, provides
the ``sglang_version`` fixture, and skips the whole directory with the reason when SGLang is not importable,
e.g. when these tests run in the core Python by mistake (``scripts/test.sh`` runs them inside the engine
venvs).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _stubs  # noqa: E402

STUBBED = _stubs.install()

try:
    SGLANG_VERSION: str | None = importlib.metadata.version("sglang")
except importlib.metadata.PackageNotFoundError:
    SGLANG_VERSION = None
_reason = None
if SGLANG_VERSION is None or importlib.util.find_spec("sglang") is None:
    _reason = (
        "sglang is not installed in this Python; run these tests inside an engine venv, e.g. "
        ".venvs/sglang-0.5.23/bin/python -m pytest tests/engines/sglang (scripts/engine-envs.sh builds them)"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.sglang)
            if _reason:
                item.add_marker(pytest.mark.skip(reason=_reason))


def pytest_report_header(config: pytest.Config) -> str:
    stubs = ", ".join(STUBBED) or "none"
    return f"sglang: {SGLANG_VERSION or 'not installed'} (stubbed CUDA-only packages: {stubs})"


@pytest.fixture(scope="session")
def sglang_version() -> str:
    """The installed SGLang release, e.g. ``"0.5.23"``."""
    assert SGLANG_VERSION is not None
    return SGLANG_VERSION


def requires_version(*versions: str) -> pytest.MarkDecorator:
    """Mark a test as meaningful only on the given SGLang releases."""
    return pytest.mark.skipif(
        SGLANG_VERSION not in versions, reason=f"needs sglang {' or '.join(versions)}, found {SGLANG_VERSION}"
    )
