"""The scheduler's per-step depth reaching the V2 runner's drafter, on a release whose drafter ignores it.

vLLM's scheduler writes each step's depth in ``SchedulerOutput.num_spec_tokens_to_schedule``. On a release
whose row in ``versions.RELEASES`` has ``mrv2_drafts_k=False`` (0.26), the V2 runner's autoregressive drafter
(``AutoRegressiveSpeculator``: EAGLE, EAGLE-3, MTP) runs ``num_speculative_tokens`` draft steps whatever that
number says. There the plugin wraps three methods, in every vLLM process (the model runner lives in the
worker processes, which load the plugins before they build it; ``runner_hooks`` installs them):

* ``GPUModelRunner.execute_model`` (``runner_hooks``' wrapper, shared with the off-step hook) notes the
  step's depth on the runner's speculator and draft-token handler, when the engine runs the specpolicy
  scheduler (vLLM's own scheduler is left alone). A dummy run (start-up warm-up, capture) notes nothing, so
  it drafts at full depth as before.
* ``AutoRegressiveSpeculator.propose`` runs ``max(K, 1)`` draft steps and marks the drafts past ``K`` as
  ``-1``, as later releases do. Its first pass writes the drafter's KV for the step's tokens, which later
  speculative steps attend to; at ``K = 0`` ``off_eagle``'s wrapper around this one skips it for EAGLE,
  EAGLE-3 and MTP and catches up on resume.
* ``DraftTokensHandler.set_draft_tokens`` hands the scheduler ``K`` drafts per request, so a sync scheduler
  schedules the policy's depth.

The depth is consumed by the call that uses it, so a call without a fresh depth behaves as vLLM's own.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .._patch import HookPlan
from .versions import release

__all__ = ["DEPTH", "METHODS", "TARGETS", "needed", "speculator_propose", "hook_plan"]

log = logging.getLogger("vllm.specpolicy")

#: The attribute carrying a step's depth from the runner to its speculator and draft-token handler.
DEPTH = "_specpolicy_depth"

#: Speculative methods whose V2 drafter is the autoregressive one the hook drives.
METHODS = ("eagle", "eagle3", "mtp")

_GPU = "vllm.v1.worker.gpu"
_RUNNER = f"{_GPU}.model_runner.GPUModelRunner"
_SPECULATOR = f"{_GPU}.spec_decode.autoregressive.speculator.AutoRegressiveSpeculator"
_HANDLER = f"{_GPU}.spec_decode.utils.DraftTokensHandler"
#: The vLLM names the hook wraps or reads (resolved by the contract tests and ``specpolicy doctor``).
TARGETS: tuple[str, ...] = (
    f"{_RUNNER}.execute_model",
    f"{_SPECULATOR}.propose",
    f"{_HANDLER}.set_draft_tokens",
)


def needed(version: str | None) -> bool:
    """Whether the tested release ``version`` needs the hook (an untested release gets none)."""
    row = release(version)
    return row is not None and not row.mrv2_drafts_k


def speculator_propose(orig: Callable[..., Any]) -> Callable[..., Any]:
    def propose(self: Any, *args: Any, **kwargs: Any) -> Any:
        depth = self.__dict__.pop(DEPTH, None)
        k_max = self.num_speculative_steps
        if depth is None or depth >= k_max:
            return orig(self, *args, **kwargs)
        self.num_speculative_steps = max(depth, 1)  # the loop bound of propose's draft steps
        try:
            drafts = orig(self, *args, **kwargs)
        finally:
            self.num_speculative_steps = k_max
        # at one step propose returns only the first column: hand back every column, as at full depth
        drafts = self.draft_tokens[: drafts.shape[0]]
        drafts[:, depth:] = -1
        return drafts

    return propose


def handler_set_draft_tokens(orig: Callable[..., Any]) -> Callable[..., Any]:
    def set_draft_tokens(self: Any, input_batch: Any, draft_tokens: Any) -> Any:
        depth = self.__dict__.pop(DEPTH, None)
        if depth is not None and depth < draft_tokens.shape[1]:
            draft_tokens = draft_tokens[:, :depth].contiguous()
        return orig(self, input_batch, draft_tokens)

    return set_draft_tokens


def hook_plan() -> HookPlan:
    """(class, method, wrapper factory) of the drafter methods the hook wraps (``runner_hooks`` adds the
    runner's ``execute_model``)."""
    from vllm.v1.worker.gpu.spec_decode.autoregressive.speculator import AutoRegressiveSpeculator
    from vllm.v1.worker.gpu.spec_decode.utils import DraftTokensHandler

    return [
        (AutoRegressiveSpeculator, "propose", speculator_propose),
        (DraftTokensHandler, "set_draft_tokens", handler_set_draft_tokens),
    ]
