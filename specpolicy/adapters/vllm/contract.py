"""Every vLLM-internal name the adapter overrides, reads or calls, resolvable without running an engine.

The contract tests and ``specpolicy doctor`` both resolve this list against the installed vLLM, so a release
that renames one of them is caught before a server starts serving without the policy. A tested release
without one of them lists it as ``absent`` in its row of ``versions.RELEASES`` (0.26 has no
``SchedulerOutput.skip_drafts``, vLLM's own flag for a step whose drafts nothing would use). A release whose
row turns on a drafter hook (``runner_hooks``) also needs the names that hook wraps.
"""

from __future__ import annotations

from .._support import check_targets as _check
from .._support import resolve
from . import runner_hooks
from .versions import installed_version, release

__all__ = ["TARGETS", "targets_for", "resolve", "check_targets"]

_SCHED = "vllm.v1.core.sched.scheduler.Scheduler"
TARGETS: tuple[str, ...] = (
    f"{_SCHED}._update_after_schedule",
    f"{_SCHED}.make_spec_decoding_stats",
    f"{_SCHED}.update_from_output",
    f"{_SCHED}.shutdown",
    f"{_SCHED}.get_request_counts",
    "vllm.v1.core.sched.async_scheduler.AsyncScheduler._update_after_schedule",
    "vllm.v1.core.sched.output.SchedulerOutput.num_spec_tokens_to_schedule",
    "vllm.v1.core.sched.output.SchedulerOutput.skip_drafts",
    "vllm.config.speculative.SpeculativeConfig.num_speculative_tokens_per_batch_size",
    "vllm.config.vllm.VllmConfig.use_v2_model_runner",
    "vllm.config.scheduler.SchedulerConfig.get_scheduler_cls",
    "vllm.engine.arg_utils.EngineArgs.create_engine_config",
    "vllm.plugins.load_general_plugins",
)


def targets_for(version: str | None) -> tuple[str, ...]:
    """The names a release must have: TARGETS, less its ``absent`` ones when it is a tested release, plus the
    drafter hooks' where the release gets them."""
    row = release(version)
    if row is None:
        return TARGETS
    return tuple(t for t in TARGETS if t not in row.absent) + runner_hooks.targets(version)


def check_targets() -> dict[str, str | None]:
    """name -> None when it resolves in the installed vLLM, else the problem."""
    return _check(targets_for(installed_version()))
