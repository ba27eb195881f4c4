"""Depth-0 steps that leave vLLM's draft-model drafter alone, and the catch-up that makes it exact on resume.

On the V2 model runner the draft-model drafter (``StandaloneARSpeculator``) keeps its own KV cache in the
slots the target allocates for each position. Every ``propose`` starts with one forward over the step's
accepted tokens plus the newly sampled one, which writes the drafter's KV there; vLLM runs that forward at
depth 0 too, only to keep the KV in step. Here a depth-0 step runs no drafter forward at all: each request's
skipped positions are counted (``SlotLag``, by request-state slot), and the next ``propose`` that drafts
feeds the drafter, per request, its missed positions followed by the step's own tokens (``extend_batch``),
with the tokens read from the runner's token history (``req_states.all_token_ids``). The drafter's KV and
proposals are then exactly what an always-on drafter would have: every KV row is written from the same
token at the same position over the same earlier rows. The catch-up is lazy and batched (one forward,
part of the step's own first pass), and a request that finishes while off never pays.

A step is skipped only when it verifies no drafts (``num_draft_tokens == 0``): then every query token is
a committed token and the missed counts are known on the host. The first depth-0 step after a speculative
one verifies that step's drafts, whose accepted count only the GPU knows yet, so it runs the drafter's
first pass as vLLM does. When missed positions and the step's tokens do not fit the drafter's token budget
together, the missed positions are fed first in passes of their own (``lag_passes``), each request's
chunk ending where the next begins; the step's own first pass then runs unchanged.

Only engines on the specpolicy scheduler are affected; dummy runs (warm-up, capture) never skip, nor does a
drafter with vLLM's adaptive verification, which records the drafter's confidences every step.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from .._patch import HookPlan, apply
from .catch_up import STATE, Extension, SlotLag, extend_batch, lag_passes, no_drafts, pass_args, step_of
from .config import uses_specpolicy_scheduler
from .versions import release

__all__ = [
    "needed",
    "new_lag",
    "hook_plan",
    "targets",
    "install",
]

log = logging.getLogger("vllm.specpolicy")

_ACTIVE = "_specpolicy_off_drafter"  # on the runner: whether its engine runs the specpolicy scheduler

_GPU = "vllm.v1.worker.gpu"
_RUNNER = f"{_GPU}.model_runner.GPUModelRunner"
_SPECULATOR = f"{_GPU}.spec_decode.standalone_ar.speculator.StandaloneARSpeculator"
#: The vLLM names the hook wraps.
TARGETS: tuple[str, ...] = (
    f"{_RUNNER}.execute_model",
    f"{_RUNNER}.add_requests",
    f"{_SPECULATOR}.propose",
)


def needed(version: str | None) -> bool:
    """Whether the tested release ``version`` gets the hook (for a draft model, an EAGLE drafter or both)."""
    row = release(version)
    return row is not None and (row.mrv2_off_drafter or row.mrv2_off_eagle)


def new_lag(runner: Any, speculator: Any) -> SlotLag | None:
    """The bookkeeping for ``speculator``'s off steps (None: a drafter the hook leaves to vLLM)."""
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    from . import off_eagle

    tokens = runner.req_states.all_token_ids.gpu
    if isinstance(speculator, StandaloneARSpeculator):
        return SlotLag(speculator.max_num_reqs, tokens)
    return off_eagle.new_lag(runner, speculator, tokens)


def runner_execute_model(orig: Callable[..., Any]) -> Callable[..., Any]:
    def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        active = self.__dict__.get(_ACTIVE)
        if active is None:
            active = uses_specpolicy_scheduler(self.vllm_config.scheduler_config.scheduler_cls)
            setattr(self, _ACTIVE, active)
        speculator = getattr(self, "speculator", None)
        if active and speculator is not None and STATE not in speculator.__dict__:
            setattr(speculator, STATE, new_lag(self, speculator))
        return orig(self, scheduler_output, *args, **kwargs)

    return execute_model


def speculator_propose(orig: Callable[..., Any]) -> Callable[..., Any]:
    def propose(self: Any, input_batch: Any, *args: Any, **kwargs: Any) -> Any:
        lag: SlotLag | None = self.__dict__.get(STATE)
        step = step_of(self, lag, input_batch, args, kwargs)
        if lag is None or step is None:
            return orig(self, input_batch, *args, **kwargs)
        if step.off:
            lag.skip(step.slots, step.query_lens)
            return no_drafts(self, input_batch.num_reqs)
        missed = lag.take(step.slots)
        if not missed.any():
            return orig(self, input_batch, *args, **kwargs)
        if int(missed.sum()) + input_batch.num_tokens <= self.max_num_tokens:
            merged = extend_batch(input_batch, Extension(missed, missed, step.query_lens), lag.tokens)
            return orig(self, merged, *args, **kwargs)
        rest, own_kwargs = pass_args(args, kwargs)
        for ext in lag_passes(missed, self.max_num_tokens):
            lag.own_passes += 1
            orig(self, extend_batch(input_batch, ext, lag.tokens), *rest, **own_kwargs)
        return orig(self, input_batch, *args, **kwargs)

    return propose


def runner_add_requests(orig: Callable[..., Any]) -> Callable[..., Any]:
    def add_requests(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
        out = orig(self, scheduler_output, *args, **kwargs)
        speculator = getattr(self, "speculator", None)
        lag: SlotLag | None = getattr(speculator, "__dict__", {}).get(STATE)
        if lag is not None:  # a new request took these slots: its drafter runs over its whole prefill
            index = self.req_states.req_id_to_index
            for new in scheduler_output.scheduled_new_reqs:
                slot = index.get(new.req_id)
                if slot is not None:
                    lag.reset(slot)
        return out

    return add_requests


def hook_plan(version: str | None = None) -> HookPlan:
    """(class, method, wrapper factory) of every vLLM method the hook wraps on ``version`` (None: all)."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    from . import off_eagle

    row = release(version)
    plan: HookPlan = [
        (GPUModelRunner, "execute_model", runner_execute_model),
        (GPUModelRunner, "add_requests", runner_add_requests),
    ]
    if row is None or row.mrv2_off_drafter:
        plan.append((StandaloneARSpeculator, "propose", speculator_propose))
    if row is None or row.mrv2_off_eagle:
        plan += off_eagle.hook_plan()
    return plan


def targets(version: str | None) -> tuple[str, ...]:
    """The vLLM names the hook wraps on ``version``."""
    from . import off_eagle

    row = release(version)
    if row is None:
        return TARGETS + off_eagle.TARGETS
    return (
        TARGETS[:2]
        + (TARGETS[2:] if row.mrv2_off_drafter else ())
        + (off_eagle.TARGETS if row.mrv2_off_eagle else ())
    )


def install(version: str | None) -> list[str]:
    """Wrap the methods where ``version`` gets the hook (idempotent); the names wrapped."""
    if not needed(version):
        return []
    return apply(hook_plan(version))
