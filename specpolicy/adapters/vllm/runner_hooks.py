"""The V2 model runner's drafter hooks of one release, installed as one plan.

A release's row in ``versions.RELEASES`` decides which pieces it gets (``Pieces``): ``drafter_depth`` where
the drafter ignores the per-step depth (``mrv2_drafts_k=False``: 0.26), ``off_drafter`` where the draft-model
drafter runs no forward at depth 0 (``mrv2_off_drafter``), ``off_eagle`` where the EAGLE / EAGLE-3 / MTP one
does not (``mrv2_off_eagle``). They share one ``GPUModelRunner.execute_model`` wrapper, which notes the
step's depth for ``drafter_depth`` and hands the speculator the off-step bookkeeping once. Where two pieces
drive the same drafter method (0.26's ``AutoRegressiveSpeculator.propose``), they make one wrapper: the
off-step one outside, reading the depth from ``drafter_depth``'s note and handing it on with each pass.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from .._patch import HookPlan, apply
from .config import uses_specpolicy_scheduler
from .versions import release

__all__ = ["Pieces", "pieces", "needed", "runner_execute_model", "hook_plan", "targets", "install"]

_ACTIVE = "_specpolicy_hooks"  # on the runner: whether its engine runs the specpolicy scheduler
_RUNNER = "vllm.v1.worker.gpu.model_runner.GPUModelRunner"


@dataclasses.dataclass(frozen=True)
class Pieces:
    """The hooks a release gets: ``depth`` (``drafter_depth``), ``off_drafter`` (the draft model idle at
    depth 0) and ``off_eagle`` (the EAGLE / EAGLE-3 / MTP drafter idle at depth 0)."""

    depth: bool = False
    off_drafter: bool = False
    off_eagle: bool = False

    @property
    def lag(self) -> bool:
        """Whether a drafter keeps off-step bookkeeping (``catch_up.SlotLag``)."""
        return self.off_drafter or self.off_eagle

    @property
    def any(self) -> bool:
        return self.depth or self.lag


def pieces(version: str | None) -> Pieces:
    """The hooks of the tested release ``version`` (an untested release gets none)."""
    row = release(version)
    if row is None:
        return Pieces()
    return Pieces(not row.mrv2_drafts_k, row.mrv2_off_drafter, row.mrv2_off_eagle)


def needed(version: str | None) -> bool:
    """Whether ``version`` gets any drafter hook."""
    return pieces(version).any


def runner_execute_model(which: Pieces) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The ``execute_model`` wrapper of ``which``: in an engine on the specpolicy scheduler, the step's depth
    noted on the speculator and the draft-token handler (``drafter_depth``; a dummy run notes none), and
    the speculator's off-step bookkeeping made at the first step (``off_drafter.new_lag``)."""
    from . import drafter_depth, off_drafter
    from .catch_up import STATE

    def make(orig: Callable[..., Any]) -> Callable[..., Any]:
        def execute_model(self: Any, scheduler_output: Any, *args: Any, **kwargs: Any) -> Any:
            active = self.__dict__.get(_ACTIVE)
            if active is None:
                active = uses_specpolicy_scheduler(self.vllm_config.scheduler_config.scheduler_cls)
                setattr(self, _ACTIVE, active)
            if active:
                speculator = getattr(self, "speculator", None)
                if which.depth:
                    dummy = kwargs.get("dummy_run", args[1] if len(args) > 1 else False)
                    depth = None if dummy else int(scheduler_output.num_spec_tokens_to_schedule)
                    for target in (speculator, getattr(self, "draft_tokens_handler", None)):
                        if target is not None:
                            setattr(target, drafter_depth.DEPTH, depth)
                if which.lag and speculator is not None and STATE not in speculator.__dict__:
                    setattr(speculator, STATE, off_drafter.new_lag(self, speculator))
            return orig(self, scheduler_output, *args, **kwargs)

        return execute_model

    return make


def hook_plan(version: str | None) -> HookPlan:
    """(class, method, wrapper factory) of every vLLM method the hooks of ``version`` wrap."""
    from vllm.v1.worker.gpu.model_runner import GPUModelRunner

    from . import drafter_depth, off_drafter, off_eagle

    which = pieces(version)
    if not which.any:
        return []
    plan: HookPlan = [(GPUModelRunner, "execute_model", runner_execute_model(which))]
    if which.lag:
        plan.append((GPUModelRunner, "add_requests", off_drafter.runner_add_requests))
    if which.off_drafter:
        plan += off_drafter.hook_plan()
    if which.off_eagle:
        plan += off_eagle.hook_plan(depth_note=which.depth)
    if which.depth:
        taken = {(cls, name) for cls, name, _ in plan}
        plan += [entry for entry in drafter_depth.hook_plan() if entry[:2] not in taken]
    return plan


def targets(version: str | None) -> tuple[str, ...]:
    """The vLLM names the hooks of ``version`` wrap or read."""
    from . import drafter_depth, off_drafter, off_eagle

    which = pieces(version)
    names: tuple[str, ...] = (f"{_RUNNER}.execute_model",) if which.any else ()
    if which.lag:
        names += (f"{_RUNNER}.add_requests",)
    if which.off_drafter:
        names += off_drafter.TARGETS
    if which.off_eagle:
        names += off_eagle.targets(depth_note=which.depth)
    if which.depth:
        names += drafter_depth.TARGETS
    return tuple(dict.fromkeys(names))


def install(version: str | None) -> list[str]:
    """Wrap the methods of ``version``'s hooks (idempotent); the names wrapped."""
    return apply(hook_plan(version))
