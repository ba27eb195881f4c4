"""Where the tests find the repository, and the environment of a child process that runs the tool."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from specpolicy_livecheck.paths import POLICIES_PROJECT, REPO, SOURCE_ROOT

HERE = Path(__file__).resolve().parent
#: the stand-in SGLang package (``import sglang`` in a child finds it first)
FAKES = HERE / "fakes"
__all__ = ["FAKES", "POLICIES_PROJECT", "REPO", "SOURCE_ROOT", "child_env"]


def child_env(*first: Path | str, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this environment) with ``first``, then the tool's source folder, first on
    PYTHONPATH: a child started with ``-m specpolicy_livecheck...`` imports this checkout's tool."""
    env = dict(os.environ if base is None else base)
    parts = [*map(str, first), str(SOURCE_ROOT), *filter(None, [env.get("PYTHONPATH")])]
    env["PYTHONPATH"] = os.pathsep.join(parts)
    return env
