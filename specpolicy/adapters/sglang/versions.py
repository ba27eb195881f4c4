"""Which SGLang is installed, whether specpolicy supports it, and which worker path a server runs.

Supported means tested in CI against the real package. Any other release is refused at start-up with the
reason, unless the user explicitly allows untested versions (then a loud warning).
"""

from __future__ import annotations

import importlib.metadata
import logging
from typing import Literal

from ..runtime import AdapterInstallError

__all__ = [
    "SUPPORTED",
    "LEGACY",
    "installed_version",
    "check_version",
    "route_for",
    "worker_path",
    "UnsupportedVersion",
]

log = logging.getLogger("specpolicy.sglang")

#: Releases the adapter is tested against, oldest first.
SUPPORTED: tuple[str, ...] = ("0.5.10.post1", "0.5.12.post1", "0.5.23")
#: Releases with both workers (v1 non-overlap ``EAGLEWorker``, v2 overlap ``EAGLEWorkerV2``).
LEGACY: tuple[str, ...] = ("0.5.10.post1", "0.5.12.post1")

Route = Literal["legacy", "adaptive"]


class UnsupportedVersion(AdapterInstallError):
    """The installed SGLang release is not one specpolicy was tested with."""


def installed_version() -> str | None:
    """The installed SGLang release (from package metadata, without importing SGLang), or None."""
    try:
        return importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        return None


def _key(version: str) -> tuple[int, ...]:
    parts: list[int] = []
    for piece in version.replace(".post", ".").split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def route_for(version: str) -> Route:
    """Which adapter code handles a release: the 0.5.23-style adaptive bridge, or the legacy workers."""
    return "adaptive" if _key(version) >= _key("0.5.20") else "legacy"


def check_version(version: str | None, allow_untested: bool = False) -> str:
    """Return the version when supported; raise UnsupportedVersion with the reason otherwise.

    With ``allow_untested`` an unsupported release is accepted with a loud warning, if its code layout is one
    the adapter knows (0.5.10 and later).
    """
    supported = ", ".join(SUPPORTED)
    if version is None:
        raise UnsupportedVersion(f"SGLang is not installed; specpolicy supports SGLang {supported}")
    if version in SUPPORTED:
        return version
    if allow_untested and _key(version) >= _key("0.5.10"):
        log.warning(
            "specpolicy: SGLang %s is NOT a tested release (tested: %s); running anyway because untested "
            "versions are allowed. Check the start-up line says the expected path is live, and run "
            "`specpolicy doctor --smoke` on a GPU before trusting it.",
            version,
            supported,
        )
        return version
    hint = "" if allow_untested else " (pass --spec-policy-allow-untested to try anyway)"
    raise UnsupportedVersion(
        f"SGLang {version} is not supported: specpolicy is tested with SGLang {supported}{hint}"
    )


def worker_path(version: str, overlap: bool) -> str:
    """The speculative worker path a server runs, in the words of the start-up line.

    Legacy releases pick v1 (``EAGLEWorker``) when overlap scheduling is off, else v2 (``EAGLEWorkerV2``);
    SGLang itself turns overlap off for topk > 1 or SGLANG_ENABLE_SPEC_V2=0 while resolving the arguments.
    From 0.5.13 on only ``EAGLEWorkerV2`` exists and specpolicy drives its AdaptiveController.
    """
    if route_for(version) == "adaptive":
        mode = "overlap" if overlap else "non-overlap"
        return f"adaptive-controller (EAGLEWorkerV2, {mode})"
    return "v2 (EAGLEWorkerV2, overlap)" if overlap else "v1 (EAGLEWorker, non-overlap)"
