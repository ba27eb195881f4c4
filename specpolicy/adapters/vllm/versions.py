"""Which vLLM is installed and whether specpolicy supports it.

Supported means tested in CI against the real package: the adapter overrides scheduler internals
(``_update_after_schedule``, ``make_spec_decoding_stats``) whose meaning moves between releases. Any other
release is refused at start-up with the reason, unless the user explicitly allows untested versions; releases
before 0.24.0 are refused regardless, because they lack the per-batch-size speculation machinery the adapter
drives.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ...runtime.runtime import AdapterInstallError
from .. import _support

__all__ = [
    "Release",
    "RELEASES",
    "SUPPORTED",
    "FIRST_DYNAMIC",
    "UnsupportedVersion",
    "installed_version",
    "check_version",
    "release",
    "version_key",
]

log = logging.getLogger("vllm.specpolicy")


@dataclass(frozen=True)
class Release:
    """How one tested release differs from the newest, where the adapter has to know.

    ``absent``: names of ``contract.TARGETS`` the release does not have. ``mrv2_drafts_k``: whether the V2
    model runner drafts ``num_spec_tokens_to_schedule`` tokens; where it does not (0.26), it always drafts
    ``num_speculative_tokens``, and the plugin installs ``drafter_depth``'s hook, which makes the
    autoregressive drafter (EAGLE, EAGLE-3, MTP) draft the step's depth; any other drafter there still
    drafts them all, which the sync scheduler then schedules whatever the policy chose, and which the async
    scheduler trims to the policy's depth only at verification. ``v1_runner``: whether the release
    still has the V1 model runner (0.34 removed it, with ``VllmConfig.use_v2_model_runner``: every engine
    runs the V2 runner there). ``mrv2_graphs_per_depth``: whether the V2 runner keeps one decode-graph
    table per query length (0.33, 0.34), so every depth the schedule lists replays a FULL graph at each
    batch size it covers; 0.26 looks graphs up by token count first, and a depth-0 batch whose token count
    falls short of a deeper depth's rounded graph size runs without a graph. ``mrv2_off_drafter``: whether
    the plugin installs ``off_drafter``'s hook there (0.34's draft-model drafter runs no forward at depth 0
    and catches up on resume; 0.26's V2 runner has no draft-model drafter); ``mrv2_off_eagle``: the same for
    the EAGLE / EAGLE-3 / MTP drafter (``off_eagle``; 0.26, 0.33, 0.34). ``runner_hooks`` installs what a row
    turns on as one plan; on 0.26 ``off_eagle`` wraps ``drafter_depth``'s propose and reads its depth note.
    """

    version: str
    absent: tuple[str, ...] = ()
    mrv2_drafts_k: bool = True
    v1_runner: bool = True
    mrv2_graphs_per_depth: bool = False
    mrv2_off_drafter: bool = False
    mrv2_off_eagle: bool = False


#: The releases the adapter is tested against, oldest first.
RELEASES: tuple[Release, ...] = (
    Release(
        "0.26.0",
        absent=("vllm.v1.core.sched.output.SchedulerOutput.skip_drafts",),
        mrv2_drafts_k=False,
        mrv2_off_eagle=True,
    ),
    Release("0.33.0", mrv2_graphs_per_depth=True, mrv2_off_eagle=True),
    Release(
        "0.34.0",
        absent=("vllm.config.vllm.VllmConfig.use_v2_model_runner",),
        v1_runner=False,
        mrv2_graphs_per_depth=True,
        mrv2_off_drafter=True,
        mrv2_off_eagle=True,
    ),
)
SUPPORTED: tuple[str, ...] = tuple(r.version for r in RELEASES)
#: First release with ``num_speculative_tokens_per_batch_size`` (vLLM PR #32374); nothing older can vary K.
FIRST_DYNAMIC = "0.24.0"


class UnsupportedVersion(AdapterInstallError):
    """The installed vLLM release is not one specpolicy was tested with."""


def installed_version() -> str | None:
    """The installed vLLM release, from package metadata (vLLM is not imported), or None."""
    return _support.installed_version("vllm")


def version_key(version: str) -> tuple[int, int, int]:
    """(major, minor, patch) of a release string such as ``0.33.0``, ``0.24.1rc2`` or ``0.34.0.dev3+gabc``."""
    try:
        major, minor, patch = _support.release_key(version.strip(), length=3)[:3]
    except ValueError:
        raise ValueError(f"not a vLLM version string: {version!r}") from None
    return major, minor, patch


def release(version: str | None) -> Release | None:
    """The table row of a tested release; None for any other (untested releases get no per-release rule)."""
    parsed = _support.parse_version(version) if version else None
    return next(
        (r for r in RELEASES if parsed is not None and _support.parse_version(r.version) == parsed), None
    )


def check_version(version: str | None, allow_untested: bool = False) -> str:
    """Return ``version`` when supported; raise UnsupportedVersion with the reason otherwise.

    With ``allow_untested`` a release from 0.24.0 on that is not in SUPPORTED (other releases, release
    candidates, source builds) is accepted with a loud warning.
    """
    tested = ", ".join(SUPPORTED)
    if version is None:
        raise UnsupportedVersion(f"vLLM is not installed; specpolicy supports vLLM {tested}")
    if release(version) is not None:
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
