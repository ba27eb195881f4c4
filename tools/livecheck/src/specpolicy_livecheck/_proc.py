"""How the tool starts a copy of itself in a child process (engine runs, probes, variants).

A child runs a module of this package with ``-m`` and an environment whose PYTHONPATH starts with the
folder this copy was imported from, so that it imports the same code whether the package is installed or
run from a source checkout.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from specpolicy_livecheck.paths import SOURCE_ROOT


def module_command(module: str, *args: str) -> list[str]:
    """The command line that runs ``specpolicy_livecheck.<module>`` with ``args``."""
    return [sys.executable, "-m", f"specpolicy_livecheck.{module}", *args]


def child_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with this package's folder first on PYTHONPATH."""
    env = dict(os.environ if base is None else base)
    parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    root = str(SOURCE_ROOT)
    env["PYTHONPATH"] = os.pathsep.join([root, *(p for p in parts if p != root)])
    return env
