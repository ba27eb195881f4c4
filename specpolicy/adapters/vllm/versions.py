"""Which vLLM is installed and whether specpolicy supports it.

Supported means tested in CI against the real package: the adapter overrides scheduler internals
(``_update_after_schedule``, ``make_spec_decoding_stats``) whose meaning moves between releases. Any other
release is refused at start-up with the reason, unless the user explicitly allows untested versions; releases
before 0.24.0 are refused regardless, because they lack the per-batch-size speculation machinery the adapter
drives.
"""

from __future__ import annotations

import importlib.metadata
import logging
import re

from ..runtime import AdapterInstallError

__all__ = [
    "SUPPORTED",
    "FIRST_DYNAMIC",
    "UnsupportedVersion",
    "installed_version",
    "check_version",
    "version_key",
]

log = logging.getLogger("vllm.specpolicy")

#: Releases the adapter is tested against.
SUPPORTED: tuple[str, ...] = ("0.33.0",)
#: First release with ``num_speculative_tokens_per_batch_size`` (vLLM PR #32374); nothing older can vary K.
FIRST_DYNAMIC = "0.24.0"


class UnsupportedVersion(AdapterInstallError):
    """The installed vLLM release is not one specpolicy was tested with."""


def installed_version() -> str | None:
    """The installed vLLM release, from package metadata (vLLM is not imported), or None."""
    try:
        return importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        return None


def version_key(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release string such as ``0.33.0``, ``0.24.1rc2`` or ``0.34.0.dev3+gabc``."""
    m = re.match(r"\s*v?(\d+)(?:\.(\d+))?(?:\.(\d+))?", version)
    if m is None:
        raise ValueError(f"not a vLLM version string: {version!r}")
    major, minor, patch = (int(g) if g else 0 for g in m.groups())
    return major, minor, patch


def check_version(version: str | None, allow_untested: bool = False) -> str:
    """Return ``version`` when supported; raise UnsupportedVersion with the reason otherwise.

    With ``allow_untested`` a release from 0.24.0 on that is not in SUPPORTED (other releases, release
    candidates, source builds) is accepted with a loud warning.
    """
    tested = ", ".join(SUPPORTED)
    if version is None:
        raise UnsupportedVersion(f"vLLM is not installed; specpolicy supports vLLM {tested}")
    if version in SUPPORTED:
        return version
    try:
        key = version_key(version)
    except ValueError:
        key = (0, 0, 0)
    if key < version_key(FIRST_DYNAMIC):
        raise UnsupportedVersion(
            f"vLLM {version} is not supported: it predates num_speculative_tokens_per_batch_size "
            f"(first in {FIRST_DYNAMIC}), so no scheduler can choose the speculative length per step; "
            f"specpolicy is tested with vLLM {tested}"
        )
    if allow_untested:
        log.warning(
            "specpolicy: vLLM %s is NOT a tested release (tested: %s); running anyway because untested "
            "versions are allowed. The adapter overrides private scheduler methods whose meaning can change "
            "between releases: check the start-up line and run `specpolicy doctor --smoke` on a GPU first.",
            version,
            tested,
        )
        return version
    raise UnsupportedVersion(
        f"vLLM {version} is not supported: specpolicy is tested with vLLM {tested} and overrides private "
        'scheduler methods that change between releases (set "allow_untested": true in the specpolicy '
        "settings, or SPECPOLICY_ALLOW_UNTESTED=1, to try anyway)"
    )
