"""The legacy releases' hook tables, as the legacy adapter and its contract tests read them.

The tables themselves are rows of ``sglang.releases.RELEASES``; this module gives them by version string.
``install`` checks the table before patching anything (a mismatch refuses with the list of problems), and
the contract tests check it against the real packages, so a renamed method or parameter fails loudly in CI
instead of silently disabling the adapter in production.
"""

from __future__ import annotations

from ..._support import Target, release_key, resolve
from ..._support import check_targets as _check
from ..releases import legacy_releases, release

__all__ = ["SUPPORTED_VERSIONS", "Target", "TARGETS", "check_targets", "resolve", "release_tuple"]

#: The tested legacy releases, oldest first.
SUPPORTED_VERSIONS: tuple[str, ...] = tuple(r.version for r in legacy_releases())
TARGETS: dict[str, tuple[Target, ...]] = {r.version: r.hooks for r in legacy_releases()}


def release_tuple(version: str) -> tuple[int, ...]:
    """``"0.5.12.post1"`` -> ``(0, 5, 12)``: the release numbers, for ordering versions."""
    return release_key(version, length=0)


def check_targets(version: str) -> list[str]:
    """Problems found with the hook table of the tested release ``version`` (empty when all match)."""
    row = release(version)
    if row is None:
        raise KeyError(f"no hook table for SGLang {version}")
    return [f"{name}: {why}" for name, why in _check(row.hooks).items() if why is not None]
