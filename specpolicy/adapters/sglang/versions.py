"""Which SGLang is installed, whether specpolicy supports it, and which worker path a server runs.

Supported means tested in CI against the real package (a row of ``releases.RELEASES``). Any other release is
refused at start-up with the reason, unless the user explicitly allows untested versions (then a loud
warning, and the release runs as the tested row whose code layout it has).
"""

from __future__ import annotations

import logging

from ...runtime.runtime import AdapterInstallError
from .. import _support
from . import releases
from .releases import Route

__all__ = [
    "SUPPORTED",
    "installed_version",
    "check_version",
    "route_for",
    "worker_path",
    "UnsupportedVersion",
    "Route",
]

log = logging.getLogger("specpolicy.sglang")

#: Releases the adapter is tested against, oldest first (``releases.tested()`` reads the table each call).
SUPPORTED: tuple[str, ...] = releases.tested()


class UnsupportedVersion(AdapterInstallError):
    """The installed SGLang release is not one specpolicy was tested with."""


def installed_version() -> str | None:
    """The installed SGLang release (from package metadata, without importing SGLang), or None."""
    return _support.installed_version("sglang")


def route_for(version: str) -> Route:
    """Which adapter code handles a release: the v2 workers' own off step (0.5.13+) or the legacy workers.

    A version older than every tested layout gets "legacy": ``check_version`` refuses it before it runs.
    """
    row = releases.layout_for(version)
    return row.route if row is not None else "legacy"


def check_version(version: str | None, allow_untested: bool = False) -> str:
    """Return the version when supported; raise UnsupportedVersion with the reason otherwise.

    With ``allow_untested`` an unsupported release is accepted with a loud warning, if its code layout is one
    the adapter knows (the oldest row's ``since`` and later).
    """
    supported = ", ".join(releases.tested())
    if version is None:
        raise UnsupportedVersion(
            f"SGLang is not installed (pip install 'sglang=={releases.tested()[-1]}'); specpolicy supports "
            f"SGLang {supported}"
        )
    if releases.release(version) is not None:
        return version
    layout = releases.layout_for(version)
    if allow_untested and layout is not None:
        log.warning(
            "specpolicy: SGLang %s is NOT a tested release (tested: %s); running anyway, as %s, because "
            "untested versions are allowed. Check the start-up line says the expected path is live, and run "
            "`specpolicy doctor --smoke` on a GPU before trusting it.",
            version,
            supported,
            layout.version,
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
    From 0.5.13 one worker family (``EAGLEWorkerV2``, ``StandaloneWorkerV2``) serves both.
    """
    route = route_for(version)
    mode = "overlap" if overlap else "non-overlap"
    if route == "v2":
        return f"v2 (EAGLEWorkerV2, {mode})"
    return "v2 (EAGLEWorkerV2, overlap)" if overlap else "v1 (EAGLEWorker, non-overlap)"
