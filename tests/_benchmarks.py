"""Load a script from benchmarks/ or scripts/ as a module, so tests can run small versions of it."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"


def _load(key: str, path: Path) -> ModuleType:
    if key in sys.modules:
        return sys.modules[key]
    spec = importlib.util.spec_from_file_location(key, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[key] = module
    spec.loader.exec_module(module)
    return module


def load(name: str) -> ModuleType:
    """benchmarks/<name>.py as a module (loaded once per test run)."""
    return _load(f"_specpolicy_bench_{name}", BENCHMARKS / f"{name}.py")


def load_script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (loaded once per test run)."""
    return _load(f"_specpolicy_script_{name}", ROOT / "scripts" / f"{name}.py")
