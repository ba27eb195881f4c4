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

from .._patch import HookPlan
from .catch_up import STATE, Extension, SlotLag, extend_batch, lag_passes, no_drafts, pass_args, step_of

__all__ = ["TARGETS", "new_lag", "speculator_propose", "runner_add_requests", "hook_plan"]

log = logging.getLogger("vllm.specpolicy")

_SPECULATOR = "vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator.StandaloneARSpeculator"
#: The vLLM names the hook wraps (``runner_hooks`` adds the runner's).
TARGETS: tuple[str, ...] = (f"{_SPECULATOR}.propose",)


def new_lag(runner: Any, speculator: Any) -> SlotLag | None:
    """The bookkeeping for ``speculator``'s off steps (None: a drafter the hook leaves to vLLM)."""
    from . import off_eagle

    tokens = runner.req_states.all_token_ids.gpu
    cls = type(speculator)
    if any(f"{c.__module__}.{c.__qualname__}" == _SPECULATOR for c in cls.__mro__):
        return SlotLag(speculator.max_num_reqs, tokens)
    return off_eagle.new_lag(runner, speculator, tokens)


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


def hook_plan() -> HookPlan:
    """(class, method, wrapper factory) of the draft-model drafter's method the hook wraps (``runner_hooks``
    adds the runner's ``execute_model`` and ``add_requests``)."""
    from vllm.v1.worker.gpu.spec_decode.standalone_ar.speculator import StandaloneARSpeculator

    return [(StandaloneARSpeculator, "propose", speculator_propose)]
